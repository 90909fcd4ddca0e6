"""A request's hold on one open database, on the event loop's side.

While a request holds its lease, the registry never closes the database to
make room for another (registry.py), so ``lease.entry.db`` stays usable for as
long as the request runs, a streamed answer included. The router takes one for
every request on a database and gives it back when the handler returns; a live
``_changes`` feed gives it back while it waits and takes it again to read.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor, Future
from types import TracebackType

from settee.serve.registry import DbEntry, Registry

__all__ = ["Lease"]


class Lease:
    """``async with Lease(registry, pool, name) as lease:`` holds ``name`` open;
    ``lease.entry`` is its entry while held."""

    def __init__(self, registry: Registry, pool: Executor, name: str) -> None:
        self.name = name
        self._registry = registry
        self._pool = pool
        self._entry: DbEntry | None = None

    @property
    def held(self) -> bool:
        return self._entry is not None

    @property
    def entry(self) -> DbEntry:
        """The leased entry; only while held."""
        # Invariant: handlers use the entry only between acquire and release.
        assert self._entry is not None, f"{self.name}: used without its lease"
        return self._entry

    async def acquire(self) -> DbEntry:
        """Take the lease: at once when the database is open, else on a worker
        (opening it is file I/O). 404 when it does not exist, 503 ``all_dbs_active``
        when every open database is in use."""
        # Invariant: a lease is held once at a time (release before acquiring again).
        assert self._entry is None, f"{self.name}: leased twice"
        entry = self._registry.try_acquire(self.name)
        if entry is None:
            entry = await self._acquire_on_worker()
        self._entry = entry
        return entry

    async def _acquire_on_worker(self) -> DbEntry:
        future = self._pool.submit(self._registry.acquire, self.name)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # The client went away (aiohttp cancels its handler) while a worker opened
            # the database: the lease the worker then takes must be given back, or
            # the database could never close again.
            future.add_done_callback(self._release_abandoned)
            raise

    def _release_abandoned(self, future: Future[DbEntry]) -> None:
        if not future.cancelled() and future.exception() is None:
            self._registry.release(future.result())

    def release(self) -> None:
        """Give the lease back (idempotent); the database may close from now on."""
        entry, self._entry = self._entry, None
        if entry is not None:
            self._registry.release(entry)

    async def __aenter__(self) -> Lease:
        await self.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
