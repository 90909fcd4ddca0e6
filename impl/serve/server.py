"""Starting and stopping the server: ``start_server`` (tests, embedding) and ``serve``.

The server runs an asyncio loop on its own thread. It creates the listening
socket itself (sockets.py applies the buffer policy before ``listen()``),
hands it to aiohttp's low-level ``web.Server`` and applies the policy again
to each accepted connection. Stopping is orderly: stop accepting, let
in-flight requests finish (longpoll feeds return at once), close
connections, wait for the worker threads, then close every database so each
writer finishes its queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from settee.serve import repdocs
from settee.serve.app import CouchRequest, dispatch
from settee.serve.dbupdates import flush_events
from settee.serve.options import merge_options
from settee.serve.registry import Registry
from settee.serve.sockets import apply_buffers, listening_socket
from settee.serve.state import State

__all__ = ["ServerHandle", "start_server"]

log = logging.getLogger("settee.serve")

#: aiohttp's per-connection read buffer (its default is 64 KiB): the transport
#: pauses reading past twice this, so large bodies arrive in big chunks.
READ_BUFSIZE = 1 << 20
#: Seconds in-flight requests get to finish when the server stops.
SHUTDOWN_TIMEOUT = 10.0


class _StallAwareHandler(RequestHandler):
    """A connection whose client stops reading what it asked for is aborted once
    its send buffer has stayed full for ``stall_timeout`` seconds (asyncio pauses
    writing when the buffer passes its high-water mark and resumes it when the
    client has read enough), so a client that never reads an answer cannot hold
    a ``--max-connections`` slot, and a handler, forever."""

    def __init__(self, *args: Any, stall_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stall_timeout = stall_timeout
        self._stall: asyncio.TimerHandle | None = None

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """What aiohttp's own parser refuses (a header line past 8190 bytes, a control
        character in one) answered with CouchDB's JSON error body, not text/plain; the
        status and the closed connection stay aiohttp's."""
        response = super().handle_error(request, status, exc, message)
        if isinstance(response, web.Response):
            error = "bad_request" if 400 <= status < 500 else "unknown_error"
            reason = message or HTTPStatus(status).phrase
            response.text = json.dumps({"error": error, "reason": reason.strip()})
            response.content_type = "application/json"
        return response

    def pause_writing(self) -> None:
        super().pause_writing()
        self._stall = self._loop.call_later(self._stall_timeout, self._abort_stalled)

    def resume_writing(self) -> None:
        self._cancel_stall()
        super().resume_writing()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_stall()
        super().connection_lost(exc)

    def _cancel_stall(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _abort_stalled(self) -> None:
        self._stall = None
        if self.transport is not None:
            self.transport.abort()


class _PolicyServer(web.Server):
    """aiohttp's low-level server, plus the socket policy on accepted connections."""

    def __init__(self, handler: Any, *, policy: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._policy = policy

    def _make_request(self, *args: Any) -> web.BaseRequest:
        # web.Server's own factory, with the request class that adds chttpd's headers.
        return CouchRequest(*args, self._loop)

    def __call__(self) -> RequestHandler:
        stall = self._policy["idle_timeout"] / 1000
        return _StallAwareHandler(self, loop=self._loop, stall_timeout=stall, **self._kwargs)

    def connection_made(self, handler: Any, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            apply_buffers(sock, self._policy)
        limit = self._policy["max_connections"]
        if limit is not None and len(self.connections) > limit:
            # Past the cap a connection is closed at once, before any request is read.
            transport.close()


class ServerHandle:
    """A running server: ``.port``, ``.url``, ``.stop()``; also a context manager."""

    def __init__(self, directory: str, host: str, options: Mapping[str, Any]) -> None:
        self.dir = os.path.abspath(directory)
        self.host = host
        self.port = 0
        self.options = dict(options)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._web: _PolicyServer | None = None
        self._listener: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def listening_socket(self) -> Any:
        """The listening socket (for inspecting its options)."""
        assert self._listener is not None, "the server has not started"
        return self._listener.sockets[0]

    def connection_sockets(self) -> list[Any]:
        """The sockets of the currently open client connections."""
        server = self._web
        if server is None:
            return []
        sockets = []
        for handler in server.connections:
            transport = handler.transport
            sock = transport.get_extra_info("socket") if transport is not None else None
            if sock is not None:
                sockets.append(sock)
        return sockets

    def stop(self) -> None:
        """Stop serving and close every database; idempotent."""
        loop, event = self._loop, self._stop_requested
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(event.set)
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the server thread ----------------------------------------------------------------------

    def _start(self, port: int) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(port,), name="settee-serve", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _run(self, port: int) -> None:
        try:
            asyncio.run(self._main(port))
        except BaseException as exc:  # reported to the starting thread if it still waits
            if not self._ready.is_set():
                self._error = exc
            else:
                log.exception("settee serve stopped on an error")
        finally:
            self._ready.set()

    async def _main(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop_requested = asyncio.Event()
        registry = Registry(self.dir, self.options)
        state = State(registry, self.options, loop, _server_uuid(self.dir))
        # Writes the database events /_db_updates lists; its last write is after
        # stopping is set, before the databases close (_shutdown awaits it).
        flusher = loop.create_task(flush_events(state))
        # Starts and stops the replications the _replicator databases' documents ask for.
        replicator = loop.create_task(repdocs.watch(state))
        try:
            self._web = _PolicyServer(
                lambda request: dispatch(state, request),
                policy=self.options,
                handler_cancellation=True,
                access_log=None,
                read_bufsize=READ_BUFSIZE,
                max_line_size=self.options["max_url_length"],
                # Closes a connection that has not sent a whole request for this long:
                # idle before its first request, half-sent headers, or idle between
                # requests (aiohttp's default is an hour), so idle sockets cannot hold
                # every --max-connections slot.
                keepalive_timeout=self.options["idle_timeout"] / 1000,
                # Content-Encoding is decoded by State.body_chunks, within the body
                # limit; aiohttp's decoder answered 500 (or never ended the body) for
                # bytes that were not what the header said.
                auto_decompress=False,
            )
            sock = listening_socket(self.host, port, self.options)
            backlog = self.options["backlog"]
            self._listener = await loop.create_server(
                self._web, sock=sock, **({} if backlog is None else {"backlog": backlog})
            )
            self.port = self._listener.sockets[0].getsockname()[1]
            state.bind_address = (self.host, self.port)
            self._ready.set()
            await self._stop_requested.wait()
        finally:
            await self._shutdown(state, flusher, replicator)

    async def _shutdown(
        self, state: State, flusher: asyncio.Task[None], replicator: asyncio.Task[None]
    ) -> None:
        state.stopping.set()
        if self._listener is not None:
            self._listener.close()
        if self._web is not None:
            self._web.pre_shutdown()
            await self._web.shutdown(SHUTDOWN_TIMEOUT)
        await asyncio.gather(flusher, replicator, return_exceptions=True)
        loop = asyncio.get_running_loop()
        # Worker threads may still be inside engine calls; the databases close after them.
        await loop.run_in_executor(None, state.pool.shutdown, True)
        await loop.run_in_executor(None, state.registry.close)


def _server_uuid(directory: str) -> str:
    """Stable per data directory, so replication ids survive restarts."""
    return uuid.uuid5(uuid.NAMESPACE_URL, "settee:" + os.path.abspath(directory)).hex


def start_server(
    dir: str, host: str = "127.0.0.1", port: int = 5984, **options: Any
) -> ServerHandle:
    """Serve the databases under ``dir`` on ``host:port`` (0: any free port) from a
    background thread; returns once listening. ``options``: see ``serve.options``."""
    handle = ServerHandle(dir, host, merge_options(**options))
    handle._start(port)
    return handle
