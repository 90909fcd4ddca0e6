"""A ``settee.httpclient.Client`` whose requests in flight can be cut short.

A continuous replication waits in a longpoll ``_changes`` request for seconds at
a time; a cancel must not wait that long, nor leave the job to send the request
again (the Client resends a request whose reused connection was closed before
any answer, taking the cut for a stale keep-alive connection).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from typing import Any

from settee.httpclient import Client, Server

__all__ = ["AbortableClient"]


class AbortableClient(Client):
    """A ``Client`` whose requests in flight ``abort`` ends at once (their socket shut
    down: the request fails, and is not sent again on a new connection), so a
    cancel does not wait out a longpoll. Requests sent after it go as usual."""

    def __init__(self, server: Server, timeout: float) -> None:
        super().__init__(server, timeout)
        self._busy: set[http.client.HTTPConnection] = set()
        self._lock_busy = threading.Lock()
        self._aborts = 0  # how many times ``abort`` was called
        self._began = threading.local()  # per request: ``_aborts`` when it began

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        self._began.aborts = self._aborts
        return super().request(method, path, body)

    def _exchange(
        self, conn: http.client.HTTPConnection, method: str, path: str, payload: bytes | None
    ) -> tuple[int, bytes]:
        with self._lock_busy:
            if self._began.aborts != self._aborts:  # the Client's stale-connection retry
                raise ConnectionAbortedError("the replication was stopped")
            self._busy.add(conn)
        try:
            return super()._exchange(conn, method, path, payload)
        finally:
            with self._lock_busy:
                self._busy.discard(conn)

    def abort(self) -> None:
        with self._lock_busy:
            self._aborts += 1
            busy = list(self._busy)
        for conn in busy:
            with contextlib.suppress(OSError, AttributeError):  # closed meanwhile
                conn.sock.shutdown(socket.SHUT_RDWR)
