"""``TuningResources``: the database and the measurer a tuning run opens and closes.

A path opens a database (None: one in memory) and no measurer makes a
:class:`~probsched.measure.LocalMeasurer`; :meth:`TuningResources.close` closes what was
made here (a database in memory stays open: the run's result still reads it), never what
the caller passed.

>>> class Borrowed:
...     def settle(self): print("settled")
>>> res = TuningResources(None, Borrowed())
>>> res.owns_database, res.owns_measurer
(True, False)
>>> res.settle_borrowed()
settled
>>> res.close()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

from ..database import Database

if TYPE_CHECKING:  # the measurer loads numba: imported where one is made
    from ..measure import Measurer


class TuningResources:
    """The database and measurer of one tuning run (see the module docstring)."""

    def __init__(self, database: Union[str, Database, None], measurer: Optional["Measurer"] = None) -> None:
        self.owns_database = not isinstance(database, Database)
        self._path = database
        self.db: Database = Database(":memory:" if database is None else database) if self.owns_database else database
        self.owns_measurer = measurer is None
        if measurer is None:
            from ..measure import LocalMeasurer

            measurer = LocalMeasurer()
        self.measurer = measurer

    def settle_borrowed(self) -> None:
        """Let a caller's measurer finish starting workers (it may time a kernel next: no
        worker start-up beside it); one made here is closed instead."""
        if not self.owns_measurer and hasattr(self.measurer, "settle"):
            self.measurer.settle()

    def close(self) -> None:
        """Close what was made here."""
        if self.owns_measurer:
            self.measurer.close()
        if self.owns_database and self._path is not None:
            self.db.close()


__all__ = ["TuningResources"]
