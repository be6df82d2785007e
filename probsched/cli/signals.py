"""SIGTERM ends a command as Ctrl-C does.

``kill``, systemd and container runtimes stop a process with SIGTERM, whose default action
ends Python at once: no ``finally`` runs, so measuring workers are left to notice their
parent is gone and the measurer's temporary directory stays. Within
:func:`sigterm_as_interrupt` SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``) in
the main thread instead, so every cleanup that Ctrl-C runs runs; :func:`stop_words` gives a
command its message word and exit code (``interrupted``, 130; ``terminated``, 143:
128 + the signal, as a shell reports it).

>>> import os, time
>>> with sigterm_as_interrupt():
...     try:
...         os.kill(os.getpid(), signal.SIGTERM)
...         time.sleep(5)
...     except KeyboardInterrupt as exc:
...         print(stop_words(exc))
('terminated', 143)
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator, Tuple


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (raised by :func:`sigterm_as_interrupt`'s handler)."""


def _raise_terminated(signum, frame) -> None:
    # one is enough: a second SIGTERM must not interrupt the cleanup the first one started
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread (outside the
    main thread, where no handler can be installed, nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def stop_words(exc: BaseException) -> Tuple[str, int]:
    """``(word, exit code)`` of a command stopped by ``exc``: SIGTERM or Ctrl-C."""
    return ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)


__all__ = ["Terminated", "sigterm_as_interrupt", "stop_words"]
