"""A cache of immutable things stored at file positions, bounded in bytes.

A shard file is append-only and never reuses a position, so what was read and
checked at a position stays true for as long as the file object lives: a cache
keyed by position needs no invalidation, only eviction. Two caches build on
``ClockCache``: the B+tree's decoded nodes (``btree.NodeCache``) and the
checked payloads of document bodies (``BodyCache``, used by
``ShardFile.read_sized``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

__all__ = ["BODY_ENTRY_OVERHEAD", "BodyCache", "ClockCache", "body_cache"]


class ClockCache:
    """Values keyed by file position, bounded by the sizes their owner charges.

    Hits take no lock: a hit is the hottest path of every read, and ``get`` is
    two C calls, each atomic under the GIL (a value evicted between them is
    still returned: it stays valid, positions never change). The lock
    serialises inserts and evictions alone, and the store is read outside it,
    so a slow disk never blocks other readers' hits. Two readers missing the
    same position both read it; the second insert is harmless.

    Eviction is CLOCK (second chance), an approximation of least recently used:
    a hit only marks the position referenced (one set probe), and eviction
    passes over the oldest entries, giving each marked one another lap. Moving
    a hit to the end of an LRU list rewrote its neighbours' links, scattered in
    memory: at a million documents, a tenth of a point read's B+tree descent
    (4.5 µs against 4.1 µs once every leaf was cached).
    """

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"cache capacity must be >= 0 bytes, got {capacity_bytes}")
        self.capacity_bytes = capacity_bytes
        #: position -> (value, charged size); oldest first (CLOCK's hand).
        self._entries: OrderedDict[int, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        # Positions hit since eviction last passed them (CLOCK's reference bits).
        self._referenced: set[int] = set()

    def get(self, pos: int) -> Any:
        """The value cached at ``pos``, or None. Lock-free (see the class)."""
        entry = self._entries.get(pos)
        if entry is None:
            return None
        self._referenced.add(pos)
        return entry[0]

    def put(self, pos: int, value: Any, size: int) -> None:
        """Remember ``value``, charged ``size`` bytes against the capacity."""
        with self._lock:
            self._add(pos, value, size)
            self._evict()

    def put_many(self, items: dict[int, tuple[Any, int]]) -> None:
        """Remember several ``(value, size)`` under one lock acquisition, in the dict's order."""
        with self._lock:
            for pos, (value, size) in items.items():
                self._add(pos, value, size)
            self._evict()

    def _add(self, pos: int, value: Any, size: int) -> None:
        old = self._entries.pop(pos, None)
        if old is not None:
            self._bytes -= old[1]
        self._entries[pos] = (value, size)
        self._bytes += size

    def _evict(self) -> None:
        entries, referenced = self._entries, self._referenced
        chances = len(entries)  # at most one lap of second chances per call
        while self._bytes > self.capacity_bytes and entries:
            pos, entry = entries.popitem(last=False)
            if chances and pos in referenced:
                referenced.discard(pos)
                entries[pos] = entry  # referenced since the last lap: back of the queue
                chances -= 1
                continue
            referenced.discard(pos)
            self._bytes -= entry[1]
            self._evicted(pos)
        if len(referenced) > len(entries):
            # A reader marked an entry evicted meanwhile (hits take no lock).
            referenced.intersection_update(entries)

    def _evicted(self, pos: int) -> None:
        """Forget what a subclass keeps beside the entry at ``pos``."""

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self._referenced.clear()

    @property
    def bytes(self) -> int:
        """Bytes charged for the entries held now (at most ``capacity_bytes``)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)


#: What one cached body costs in memory beyond its payload's bytes: the bytes
#: object's header, the entry tuple, the int key and the dict slot (measured with
#: tracemalloc: 200 bytes an entry beyond a 200-byte payload). Charged so that
#: ``body_cache_bytes`` bounds the memory the cache takes, not only its payloads.
BODY_ENTRY_OVERHEAD = 200


class BodyCache(ClockCache):
    """The checked msgpack payloads of document bodies, keyed by their frame's file
    position. A hit skips the pread, the frame checks and the crc, not the decode:
    every read returns a new object the caller may change. Payloads are ``bytes``,
    which the cyclic collector never tracks, so a full cache costs a collection
    nothing. Only a payload whose frame passed every check of ``decode_frame``
    is admitted; the entry is charged its length plus ``BODY_ENTRY_OVERHEAD``."""

    #: Once the cache is full, one read in this many admits what it missed: reads
    #: spread over more bodies than fit made every miss pay an insert and an
    #: eviction (a get 28% slower than with no cache at all); a body read often
    #: still gets in after a few misses.
    ADMIT_WHEN_FULL = 8

    def __init__(self, capacity_bytes: int) -> None:
        super().__init__(capacity_bytes)
        self._misses_when_full = 0

    def admit(self, payloads: dict[int, tuple[bytes, int]], size: int) -> None:
        """``put_many`` of ``payloads`` (charged ``size`` in all) while they fit; once
        they would evict, one call in ``ADMIT_WHEN_FULL``
        (the count is kept without the lock: a lost increment only shifts which)."""
        if self._bytes + size > self.capacity_bytes:
            self._misses_when_full += 1
            if self._misses_when_full % self.ADMIT_WHEN_FULL:
                return
        self.put_many(payloads)


def body_cache(capacity_bytes: int) -> BodyCache | None:
    """The body cache of one open shard file, or None when ``capacity_bytes`` is 0
    (a read then costs no cache probe)."""
    return BodyCache(capacity_bytes) if capacity_bytes else None
