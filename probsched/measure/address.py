"""Dask scheduler addresses, checked before anything connects.

``probsched ... --cluster ADDRESS`` and ``DaskMeasurer("ADDRESS")`` take a scheduler
address as Dask writes it: ``SCHEME://HOST:PORT`` (``tcp``, ``tls``, ``ucx``, ``ws``,
``wss``; ``HOST:PORT`` alone means ``tcp``), or ``inproc://...`` for a scheduler in this
process. :func:`cluster_address` refuses anything else with one line saying what is wrong,
instead of a traceback from deep in ``distributed`` or a wait for a connection that cannot
happen (port 99999, host 256.1.1.1).

>>> cluster_address("10.0.0.5:8786")
'tcp://10.0.0.5:8786'
>>> cluster_address("tcp://[::1]:8786")
'tcp://[::1]:8786'
>>> cluster_address("http://head:8786")
Traceback (most recent call last):
...
ValueError: cluster address 'http://head:8786': unknown scheme 'http' (Dask's: inproc, tcp, tls, ucx, ws, wss); expected e.g. tcp://HOST:8786
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Optional, Tuple

#: The transports ``distributed`` registers (``distributed.comm.registry.backends``).
SCHEMES = ("inproc", "tcp", "tls", "ucx", "ws", "wss")
#: A host name: dot-separated labels of letters, digits, ``-`` and ``_``.
_HOSTNAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?$")
_EXAMPLE = "expected e.g. tcp://HOST:8786"


def cluster_address(text: str) -> str:
    """``text`` as a scheduler address (``tcp://`` added when no scheme is given); a
    ValueError naming what is wrong with it (see the module doc)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"cluster address {text!r}: empty; {_EXAMPLE}")
    text = text.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"cluster address {text!r}: unknown scheme {scheme!r} (Dask's: {', '.join(SCHEMES)}); {_EXAMPLE}")
    if scheme == "inproc":
        if not rest:
            raise ValueError(f"cluster address {text!r}: nothing after inproc://")
        return f"{scheme}://{rest}"
    host, port = _host_port(text, rest)
    return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


def _host_port(text: str, rest: str) -> Tuple[str, int]:
    def bad(what: str) -> ValueError:
        return ValueError(f"cluster address {text!r}: {what}; {_EXAMPLE}")

    if rest.startswith("["):  # [IPv6]:PORT
        host, close, tail = rest[1:].partition("]")
        if not close or not tail.startswith(":"):
            raise bad("an IPv6 host is written [ADDRESS]:PORT")
        port_text = tail[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise bad(f"{host!r} is not an IPv6 address") from None
    else:
        host, colon, port_text = rest.rpartition(":")
        if not colon:
            raise bad("no port")
        if not host:
            raise bad("no host")
        if re.fullmatch(r"[0-9.]+", host):
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise bad(f"{host!r} is not an IPv4 address") from None
        elif not _HOSTNAME.match(host):
            raise bad(f"{host!r} is not a host name")
    if not port_text.isdigit():
        raise bad(f"port {port_text!r} is not a number")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise bad(f"port {port} is not in 1-65535")
    return host, port


def nothing_listens(address: str, timeout: float) -> Optional[str]:
    """Why nothing can answer at a TCP-based ``address`` (refused, unknown host), or None
    when something accepts the connection or it is not known within ``timeout`` seconds.
    A refused connection is final; ``distributed`` would retry it until its timeout."""
    scheme, _, rest = address.partition("://")
    if scheme not in ("tcp", "tls", "ws", "wss"):
        return None
    host, port = _host_port(address, rest)
    try:
        with socket.create_connection((host, port), timeout=min(timeout, 5.0)):
            return None
    except ConnectionRefusedError:
        return f"nothing listens at {host}:{port} (connection refused)"
    except socket.gaierror as exc:
        return f"unknown host {host!r} ({exc.strerror})"
    except OSError:  # slow or filtered: let distributed try, within its timeout
        return None


__all__ = ["cluster_address", "nothing_listens", "SCHEMES"]
