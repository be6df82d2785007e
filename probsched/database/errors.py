"""``DatabaseError``: a tuning-record database that cannot be opened or used."""

from __future__ import annotations

from ..errors import ProbschedError


class DatabaseError(ProbschedError):
    """The file is not SQLite, not a probsched database, of another schema version, or unusable.

    The message names the path.
    """
