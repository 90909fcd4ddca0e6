"""The open databases in least-recently-used order, with the leases requests hold on them.

CouchDB's couch_server keeps at most ``max_dbs_open`` databases open: when one
more must open, ``couch_lru:close`` closes the least recently used database
that no client is using and skips (bumps) the busy ones; if none is idle the
open fails with ``all_dbs_active``. ``LeasedLru`` is that bookkeeping: which
items are open, in which order they were last used, and how many leases each
has. It never opens or closes anything itself (the registry does, outside its
lock): every method is a few dictionary operations under one lock, so the
event loop may call ``lease`` and ``release`` without blocking.

An item is only ever removed with no lease on it, by ``evict_idle``; ``pop``
(a deleted database) and ``pop_all`` (shutdown) are the two exceptions, as
they are for CouchDB.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["LeasedLru"]

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class _Slot(Generic[T]):
    item: T
    leases: int = 0


class LeasedLru(Generic[T]):
    """Items by name, least recently leased first, each with its count of leases."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: OrderedDict[str, _Slot[T]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._slots)

    def peek(self, name: str) -> T | None:
        """The open item ``name``, neither leased nor moved."""
        slot = self._slots.get(name)
        return slot.item if slot is not None else None

    def lease(self, name: str) -> T | None:
        """The open item ``name`` with one more lease, now the most recently used;
        None when it is not open."""
        with self._lock:
            slot = self._slots.get(name)
            if slot is None:
                return None
            slot.leases += 1
            self._slots.move_to_end(name)
            return slot.item

    def retain(self, name: str, item: T) -> bool:
        """One more lease on ``item``, which the caller already leases (work that
        outlives its request); False when ``item`` is no longer the open ``name``."""
        with self._lock:
            slot = self._slots.get(name)
            if slot is None or slot.item is not item:
                return False
            slot.leases += 1
            return True

    def release(self, name: str, item: T) -> None:
        """Give back one lease on ``item``. Nothing happens when ``item`` was removed
        meanwhile (deleted, or the server stopped): its lease went with it."""
        with self._lock:
            slot = self._slots.get(name)
            if slot is None or slot.item is not item:
                return
            # Invariant: every release pairs with a lease or retain of this item.
            assert slot.leases > 0, f"{name}: released more often than leased"
            slot.leases -= 1

    def add(self, name: str, item: T, *, leased: bool) -> None:
        """Put ``item``, just opened, as the most recently used ``name``."""
        with self._lock:
            # Invariant: the registry opens a name only while it is not open.
            assert name not in self._slots, f"{name} is already open"
            self._slots[name] = _Slot(item, 1 if leased else 0)

    def evict_idle(self, keep: int) -> list[T]:
        """Remove the least recently used items that have no lease until at most
        ``keep`` remain (more when too many are leased); the removed ones, for the
        caller to close."""
        with self._lock:
            excess = len(self._slots) - keep
            idle = [name for name, slot in self._slots.items() if slot.leases == 0]
            return [self._slots.pop(name).item for name in idle[: max(excess, 0)]]

    def pop_idle(self, name: str, item: T) -> bool:
        """Remove ``item`` when it is still the open ``name`` and nobody leases it (it
        is to be closed and opened again); whether it was removed."""
        with self._lock:
            slot = self._slots.get(name)
            if slot is None or slot.item is not item or slot.leases:
                return False
            del self._slots[name]
            return True

    def pop(self, name: str) -> T | None:
        """Remove ``name`` whatever its leases (its database is being deleted)."""
        with self._lock:
            slot = self._slots.pop(name, None)
            return slot.item if slot is not None else None

    def pop_all(self) -> list[T]:
        """Remove every item, leased or not (the server is stopping)."""
        with self._lock:
            items = [slot.item for slot in self._slots.values()]
            self._slots.clear()
            return items

    def leased(self) -> dict[str, int]:
        """Each open name and its count of leases, least recently used first."""
        with self._lock:
            return {name: slot.leases for name, slot in self._slots.items()}
