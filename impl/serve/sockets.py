"""The listening socket and the buffer policy of every socket the server owns.

The policy, from CouchDB issue #1409 and MochiWeb #153: on Linux, an explicit
``SO_RCVBUF`` caps the TCP receive window *and* switches off receive-buffer
autotuning for that socket, so a large request body crawls in one small
window per round trip. settee therefore calls ``setsockopt(SO_RCVBUF)`` or
``setsockopt(SO_SNDBUF)`` only when the user set ``recbuf``/``sndbuf``; with
the defaults (None) the kernel's autotuning stays on. An explicit value is set
on the listening socket *before* ``listen()`` (the window scale is fixed in
the handshake, and Linux copies the listener's buffer sizes to accepted
sockets) and again on each accepted socket, so the policy does not rest on
that inheritance.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

__all__ = ["apply_buffers", "listening_socket"]


def apply_buffers(sock: Any, options: Mapping[str, Any]) -> None:
    """Set SO_RCVBUF / SO_SNDBUF only for the options the user set."""
    if options["recbuf"] is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, options["recbuf"])
    if options["sndbuf"] is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, options["sndbuf"])


def listening_socket(host: str, port: int, options: Mapping[str, Any]) -> socket.socket:
    """A bound (not yet listening) TCP socket for ``host:port``; asyncio calls listen()."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        # Restarting the server must not wait for TIME_WAIT connections to expire.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        apply_buffers(sock, options)
        sock.bind(address)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
