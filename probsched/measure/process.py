"""``WorkerProcess``: a measuring worker started from the package's own entry point.

The worker is ``python -m probsched.measure.worker``, started with :mod:`subprocess` and
connected to its caller by a socket pair (a :class:`multiprocessing.connection.Connection`
at each end). Unlike a ``multiprocessing`` ``spawn`` child, it never imports the caller's
``__main__`` module: a plain script, a notebook or a REPL can measure without an
``if __name__ == "__main__":`` guard (what TVM's popen workers do too). It also works
where ``multiprocessing`` refuses to start children, e.g. inside a daemonic process such as
a Dask worker.

The handle offers what :class:`~probsched.measure.local.LocalMeasurer` needs of a process:
``pid``, ``conn``, ``sentinel`` (waitable: readable once the process has exited),
``is_alive()``, ``kill()``, ``join(timeout)`` and ``exitcode`` (negative: killed by that
signal, as ``multiprocessing`` reports it).

>>> import os, tempfile
>>> p = WorkerProcess(os.path.join(tempfile.mkdtemp(), "w.log"), name="doctest")
>>> p.conn.recv()[0]  # the worker says it is ready once numba is initialised
'ready'
>>> p.conn.send(("exit",)); p.join(30); p.exitcode
0
>>> p.close()
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Optional

#: The folder holding the ``probsched`` and ``handlers`` packages (this file is
#: ``probsched/measure/process.py``): put first on the worker's ``PYTHONPATH`` so that it
#: imports the same code as its caller (a source checkout that is not installed included).
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


#: The worker leads a process group of its own: Ctrl-C at a terminal reaches the caller
#: alone (which stops and closes its workers), and when the caller dies while the worker is
#: stopped (SIGSTOP: paused while a kernel is timed) the group becomes orphaned and the
#: kernel sends it SIGHUP, which ends it, where a stopped process could not notice by itself.
_OWN_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {}


def _child_env() -> dict:
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = _ROOT + (os.pathsep + path if path else "")
    return env


class WorkerProcess:
    """A running ``python -m probsched.measure.worker`` and its connection (see the module doc)."""

    def __init__(self, log_path: str, name: str = "probsched-measure") -> None:
        ours, theirs = socket.socketpair()
        try:
            fd = theirs.fileno()
            self._popen = subprocess.Popen(
                [sys.executable, "-m", "probsched.measure.worker", str(fd), log_path, name],
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
                env=_child_env(),
                close_fds=True,
                **_OWN_GROUP,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the child holds the only other end: its death reads as EOF here
        self.conn = Connection(ours.detach())
        self.pid = self._popen.pid
        self.name = name
        self._pidfd: Optional[int] = None
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # before Linux 5.3: the connection's EOF says it
            pass

    @property
    def sentinel(self) -> Optional[int]:
        """A file descriptor readable once the process has exited (None where the OS has none)."""
        return self._pidfd

    @property
    def exitcode(self) -> Optional[int]:
        """Exit status, ``-N`` when killed by signal N, None while it runs."""
        return self._popen.poll()

    def is_alive(self) -> bool:
        """Whether the process still runs."""
        return self._popen.poll() is None

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait up to ``timeout`` seconds for the process to exit (and reap it)."""
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def kill(self) -> None:
        """SIGKILL (a stopped process dies too)."""
        if self._popen.poll() is None:
            try:
                self._popen.kill()
            except OSError:
                pass

    def close(self) -> None:
        """Release the connection and the process descriptor (the process must be gone or going)."""
        self.conn.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
