"""What every handler shares: the databases, the worker pool and the event loop.

Engine calls block (file reads, a writer's fsync) and JSON of a large body
takes real CPU, so handlers hand both to ``State.run``, which runs them on a
thread pool; the event loop only moves bytes.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from settee.serve.dbevents import DbEvents
from settee.serve.gunzip import Gunzip
from settee.serve.lease import Lease
from settee.serve.notifier import REPLICATOR_WAKE, Notifier
from settee.serve.options import request_limit
from settee.serve.protocol import HTTPError
from settee.serve.registry import DbEntry, Registry, is_replicator_db
from settee.spec.spool import MEMORY_LIMIT, Spooled, SpoolWriter

__all__ = ["State"]

T = TypeVar("T")


class State:
    """Shared by every request of one server."""

    def __init__(
        self,
        registry: Registry,
        options: Mapping[str, Any],
        loop: asyncio.AbstractEventLoop,
        server_uuid: str,
    ) -> None:
        self.registry = registry
        self.options = dict(options)
        self.loop = loop
        self.uuid = server_uuid
        #: The address the server listens on, once bound (``[chttpd] bind_address``, ``port``).
        self.bind_address: tuple[str, int] | None = None
        self.pool = ThreadPoolExecutor(options["threads"], thread_name_prefix="settee-serve")
        self.stopping = asyncio.Event()
        self.background: set[asyncio.Future[Any]] = set()
        #: Wakes the live ``_changes`` feeds, by database name (event-loop side).
        self.notifier = Notifier()
        #: The database events ``/_db_updates`` has yet to write (dbupdates.py).
        self.db_events = DbEvents()

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on a worker thread."""
        return await self.loop.run_in_executor(self.pool, functools.partial(fn, *args, **kwargs))

    def lease(self, name: str) -> Lease:
        """A hold on database ``name`` (``async with``): it stays open meanwhile."""
        return Lease(self.registry, self.pool, name)

    def notify(self, entry: DbEntry) -> None:
        """From a worker thread, after a durable write: wake the changes feeds, and
        note the database's ``updated`` event for ``/_db_updates``."""
        self.db_events.record("updated", entry.name)
        self.loop.call_soon_threadsafe(self.notifier.bump, entry.name)
        if is_replicator_db(entry.name):
            self.loop.call_soon_threadsafe(self.notifier.bump, REPLICATOR_WAKE)

    async def read_body(self, request: web.BaseRequest) -> bytes:
        """The whole request body, read as the bytes arrive (no small fixed reads,
        no 1 MiB cap); 413 past ``max_request_size`` as CouchDB's
        ``max_http_request_size``."""
        return b"".join([chunk async for chunk in self.body_chunks(request)])

    async def spool_body(self, request: web.BaseRequest) -> Spooled:
        """``read_body``, but the bytes go to a ``Spooled`` (memory for the first
        MiB, then a temporary file) as they arrive, a MiB at a time on a worker:
        an attachment body is never held whole (SEMANTICS.md §18)."""
        writer = SpoolWriter()
        pending: list[bytes] = []
        held = 0
        try:
            async for chunk in self.body_chunks(request):
                pending.append(chunk)
                held += len(chunk)
                if held >= MEMORY_LIMIT:
                    await self.run(writer.write, b"".join(pending))
                    pending, held = [], 0
            await self.run(writer.write, b"".join(pending))
        except BaseException:
            writer.abandon()
            raise
        return writer.finish()

    @property
    def body_limit(self) -> int:
        """The most bytes a request body may hold (``max_request_size``)."""
        return request_limit(self.options)

    async def body_chunks(self, request: web.BaseRequest) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive, decoded when sent ``Content-Encoding:
        gzip`` (CouchDB reads gzip bodies and answers 415 to other encodings); 413
        as soon as they pass the limit, decoded or not, 408 (and the connection
        closed) when none arrives for ``idle_timeout``."""
        limit = self.body_limit
        length = request.content_length
        if length is not None and length > limit:
            raise _too_large()
        gunzip = _decoder(request.headers.get("Content-Encoding"))
        decoded_size = 0
        async for chunk in self._raw_chunks(request, limit):
            if gunzip is None:
                yield chunk
                continue
            decoded = gunzip.feed(chunk, limit + 1 - decoded_size)
            decoded_size += len(decoded)
            if decoded_size > limit:  # a small gzip body must not unpack without bound
                raise _too_large()
            if decoded:
                yield decoded
        if gunzip is not None:
            gunzip.finish()

    async def _raw_chunks(self, request: web.BaseRequest, limit: int) -> AsyncIterator[bytes]:
        size = 0
        # A body that stops arriving must not hold a connection slot forever: the
        # same idle_timeout as a request that never finishes its headers.
        wait = self.options["idle_timeout"] / 1000
        while True:
            try:
                chunk = await asyncio.wait_for(request.content.readany(), wait)
            except TimeoutError:
                raise _too_slow(wait) from None
            if not chunk:
                return
            size += len(chunk)
            if size > limit:
                raise _too_large()
            yield chunk


def _decoder(encoding: str | None) -> Gunzip | None:
    """The decoder of a request body sent with ``Content-Encoding: encoding``."""
    name = (encoding or "identity").strip().lower()
    if name == "identity":
        return None
    if name in ("gzip", "x-gzip"):
        return Gunzip("the request body (Content-Encoding: gzip)")
    # CouchDB's couch_httpd:body throws bad_ctype for any other encoding.
    raise HTTPError(415, "bad_content_type", f"{encoding} is not a supported content encoding.")


def _too_large() -> HTTPError:
    # The rest of the body is read and dropped for a while after the answer (aiohttp's
    # lingering close), so a client still sending sees the 413, not a reset.
    return HTTPError(413, "too_large", "the request entity is too large")


def _too_slow(seconds: float) -> HTTPError:
    # The client stopped sending: the connection is closed right after the answer,
    # with no lingering read that would hold its slot longer.
    reason = f"no byte of the request body arrived for {seconds:g} s (idle_timeout)"
    return HTTPError(408, "request_timeout", reason, {"Connection": "close"})
