"""``HostLock``: one kernel timed at a time on this machine, across processes.

A :class:`~probsched.measure.LocalMeasurer` times one kernel at a time among its own
workers. Several measurers on one machine (the measuring threads of one or more Dask
workers on a host: :mod:`.remote`) take this lock around each timing too, so that they time
one kernel at a time between them, and stop their compiling workers while another one times
(:meth:`held_elsewhere`).

It is an advisory ``flock`` on a file in the temporary folder (``$PROBSCHED_HOST_LOCK``
names another: it must be a file every process measuring on the machine can open, e.g. when
containers on one host do not share ``/tmp``). The kernel releases the lock when its holder
dies, so a measurer killed in the middle of a timing never leaves the machine locked;
each ``HostLock`` opens the file itself, so two of them in one process exclude each other
as two processes do.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "timing.lock")
>>> a, b = HostLock(path), HostLock(path)
>>> a.try_acquire(), b.try_acquire(), b.held_elsewhere()
(True, False, True)
>>> a.release(); b.held_elsewhere(), b.try_acquire()
(False, True)
>>> b.release(); a.close(); b.close()
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from typing import Optional


def default_path() -> str:
    """``$PROBSCHED_HOST_LOCK``, else ``probsched-timing.lock`` in the temporary folder."""
    return os.environ.get("PROBSCHED_HOST_LOCK") or os.path.join(tempfile.gettempdir(), "probsched-timing.lock")


class HostLock:
    """An exclusive, non-blocking, per-machine lock (see the module doc)."""

    def __init__(self, path: Optional[str] = None) -> None:
        self.path = path or default_path()
        try:
            self._fd: Optional[int] = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:  # created by another user: flock needs no write access
            self._fd = os.open(self.path, os.O_RDONLY)
        self.held = False

    def try_acquire(self) -> bool:
        """Take the lock if no one holds it; never waits."""
        if self.held:
            return True
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.held = True
        return True

    def release(self) -> None:
        """Give the lock back (nothing happens when it is not held)."""
        if self.held:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self.held = False

    def held_elsewhere(self) -> bool:
        """Whether another holder (process or ``HostLock``) times a kernel now."""
        if self.held:
            return False
        try:  # a shared lock is refused only while someone holds the exclusive one
            fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        return False

    def close(self) -> None:
        """Release and close the file."""
        if self._fd is not None:
            self.release()
            os.close(self._fd)
            self._fd = None
