"""Tuning records in SQLite.

- :mod:`.errors` — :class:`DatabaseError`;
- :mod:`.record` — :class:`TuningRecord`;
- :mod:`.schema` — tables, opening a file (WAL, schema version), retrying busy writes;
- :mod:`.database` — :class:`Database`: commit, query (``best``, ``records``,
  de-duplication by candidate hash), re-timing sessions (:class:`Retiming`), JSONL export
  and import.
"""

from .database import Database, Retiming, StoredWorkload, default_path  # noqa: F401
from .errors import DatabaseError  # noqa: F401
from .record import TuningRecord  # noqa: F401
from .schema import SCHEMA_VERSION  # noqa: F401

__all__ = ["Database", "DatabaseError", "TuningRecord", "Retiming", "StoredWorkload", "default_path", "SCHEMA_VERSION"]
