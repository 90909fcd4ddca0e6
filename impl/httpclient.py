"""Requests to a CouchDB-compatible server, standard library only (``http.client``, ``json``).

``Server`` is where requests go (from a URL such as ``http://user:pass@host:5984/prefix``:
``user:pass@`` becomes Basic authentication, a path a prefix of every request);
``Client`` sends JSON requests over a pool of persistent connections and returns
``(status, decoded JSON)``; ``error_for`` turns a CouchDB error reply into the
settee error class the engine raises in the same case. ``settee.http`` builds
settee's API on these.

Connections: a thread takes an idle connection from the pool for one request and
gives it back after reading the whole reply, so threads never share one. A
request whose *reused* connection turns out closed by the server before any reply
byte arrived (an idle keep-alive timeout: the server never read it) is sent once
more on a new connection; any other failure, and a timeout, is a ``SetteeError``.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from settee.spec.attachments import MissingStub
from settee.spec.errors import BadRequest, Conflict, CorruptionError, NotFound, SetteeError
from settee.spec.values import describe

__all__ = ["TIMEOUT", "Client", "Server", "encode_json", "error_for"]

#: Seconds a request may take: a hung server becomes a SetteeError, never a hang.
TIMEOUT = 120.0
_BAD_REQUEST_STATUSES = frozenset({400, 413, 414, 415, 431})
#: CouchDB's 404 reasons for a missing database (3.x, then 1.x), as opposed to a document.
_NO_DATABASE_REASONS = frozenset({"Database does not exist.", "no_db_file"})
_PATH_OFFSET = re.compile(r"(.+?):([0-9]+): (.*)\Z", re.DOTALL)
#: What a reused connection raises when the server closed it before reading the request.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


@dataclass(frozen=True, slots=True)
class Server:
    """Where requests go: scheme, host, port, path prefix and the headers every request
    carries (``Authorization`` when the URL names a user)."""

    scheme: str
    host: str
    port: int | None
    prefix: str
    headers: tuple[tuple[str, str], ...]

    @classmethod
    def from_url(cls, url: str) -> Server:
        """``http(s)://[user:pass@]host[:port][/prefix]``; SetteeError for anything else."""
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError as exc:
            raise SetteeError(f"server URL {url!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SetteeError(f"server URL {url!r} is not http(s)://[user:pass@]host[:port]")
        headers = [("Accept", "application/json"), ("Content-Type", "application/json")]
        if parts.username is not None:
            # Percent-escapes let a password hold ':' or '@'; the header carries it plain.
            user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            headers.append(("Authorization", "Basic " + base64.b64encode(user_pass).decode()))
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"), tuple(headers))

    @property
    def url(self) -> str:
        """The server's URL without credentials (for messages)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{host}{port}{self.prefix}"

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


class Client:
    """JSON requests to one server over a pool of persistent connections. Thread-safe."""

    def __init__(self, server: Server, timeout: float = TIMEOUT) -> None:
        self.server = server
        self.timeout = timeout
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """``(status, the reply's JSON)`` for ``method path`` with ``body`` as JSON; an
        error reply that is not JSON comes back as its text. SetteeError when the server
        cannot be reached or answers a success with something that is not JSON."""
        payload = None if body is None else encode_json(body)
        conn, reused = self._take()
        try:
            try:
                status, raw = self._exchange(conn, method, path, payload)
            except _STALE:
                if not reused:
                    raise
                conn.close()
                conn = self.server.connect(self.timeout)
                status, raw = self._exchange(conn, method, path, payload)
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise SetteeError(
                f"{method} {self.server.url}{path} failed: {type(exc).__name__}: {exc}; "
                f"is the server at {self.server.url} running?"
            ) from None
        return status, _decode(raw, status, f"{method} {path}")

    def _exchange(
        self, conn: http.client.HTTPConnection, method: str, path: str, payload: bytes | None
    ) -> tuple[int, bytes]:
        headers = dict(self.server.headers)
        conn.request(method, self.server.prefix + path, body=payload, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        self._give_back(conn, keep=not response.will_close)
        return response.status, raw

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection (reused: True) or a new one."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self.server.connect(self.timeout), False

    def _give_back(self, conn: http.client.HTTPConnection, *, keep: bool) -> None:
        with self._lock:
            if keep and not self._closed:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections; connections in use close when their request ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def encode_json(value: Any) -> bytes:
    """A request body: compact UTF-8 JSON, NaN refused (it is not JSON)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8")


def _decode(raw: bytes, status: int, what: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        if status >= 400:  # proxies and HTTP parsers answer some errors in plain text
            return raw[:300].decode("utf-8", "replace")
        raise SetteeError(
            f"{what}: the server answered {status} with a body that is not JSON: "
            f"{describe(raw[:80])}"
        ) from None


def error_for(status: int, body: Any, what: str) -> SetteeError:
    """The settee error for a CouchDB error reply ``{"error", "reason"}`` to ``what``:
    409 ``Conflict``; 404 ``NotFound`` with the server's reason, except a missing
    database (``SetteeError``); 400, 413 (CouchDB's ``document_too_large``), 414, 415
    and 431 ``BadRequest``; 410 (settee serve) or 500 (CouchDB) ``corruption``
    ``CorruptionError``; else ``SetteeError``."""
    error = body.get("error") if isinstance(body, dict) else None
    reason = body.get("reason") if isinstance(body, dict) else body
    text = reason if isinstance(reason, str) else json.dumps(reason)
    if status == 409:
        return Conflict(text or "Document update conflict.")
    if status == 412 and error == "missing_stub":
        return MissingStub(text)
    if status == 404 and text not in _NO_DATABASE_REASONS:
        return NotFound(text)
    if status in _BAD_REQUEST_STATUSES:
        return BadRequest(f"{what}: {error}: {text}")
    if error == "corruption" and status in (410, 500):  # settee serve's; CouchDB's 500
        return _corruption(text)
    return SetteeError(f"{what}: HTTP {status} {error}: {text}")


def _corruption(reason: str) -> CorruptionError:
    """settee serve's reason is the engine's ``path:offset: detail``; another's is kept whole."""
    found = _PATH_OFFSET.match(reason)
    if found:
        return CorruptionError(found[1], int(found[2]), found[3])
    return CorruptionError(reason, -1, "reported by the server")
