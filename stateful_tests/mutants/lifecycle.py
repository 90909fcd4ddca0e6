"""Mutants inside the engine's lifecycle: faults a wrapper around the public API
cannot express, planted by swapping the class of each shard a database opens
(``impl/`` itself stays correct).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from settee.cut import PIN_STEP, FollowerCut, WriterCut
from settee.heads import Slot
from settee.shard import Shard
from settee.snapshot import Snapshot
from settee.spec.errors import SetteeError

__all__ = [
    "EnqueueOutsideLockShard",
    "FracturedCut",
    "FracturedFollowerCut",
    "leaves_a_thread",
    "plant",
]


class EnqueueOutsideLockShard(Shard):
    """``_enqueue`` releases the submit lock one statement before the put: a request
    admitted just before ``close()`` can land in the queue after ``_STOP``, when
    the writer has gone, and its caller waits forever."""

    def _enqueue(self, item: Any) -> None:
        self._step("admit")
        self._submit_lock.acquire()
        try:
            if self._closed:
                raise SetteeError("database is closed; open it again with settee.open(path)")
            if self._failure is not None:
                raise self._refusal()
        finally:
            self._submit_lock.release()
        self._queue.put(item)  # the fault: outside the lock


def plant(db: Any, shard_class: type[Shard]) -> Any:
    """Make every shard of the open database ``db`` a ``shard_class``; returns ``db``."""
    for shard in db.shards:
        shard.__class__ = shard_class
    return db


class HeadsBeforeFsyncShard(Shard):
    """Publishes each commit in HEADS once its header is written, before the header's
    fsync: a readonly handle can read a commit that a crash may still take away."""

    _pending_seq = 0

    def _step(self, name: str) -> None:
        offset = self.snapshot.file.header_offset
        if name == "before_header_fsync" and self._heads is not None and offset is not None:
            self._heads.publish(
                self.identity.index, Slot(self._generation, offset, self._pending_seq)
            )
        super()._step(name)

    def _commit(self, group: Any) -> Snapshot:
        self._pending_seq = group.seq
        return super()._commit(group)


class BodyCacheAcrossFilesShard(Shard):
    """Keeps the body cache of the file it opened for every file compaction swaps in:
    positions are per file, so a body cached at an offset of the old file answers
    a read of whatever the new file holds there."""

    kept: Any = None

    def _snapshot_of(self, file: Any) -> Snapshot:
        snap = super()._snapshot_of(file)
        file.body_cache = self.kept
        return snap


class FracturedCut(WriterCut):
    """Takes each shard's snapshot in turn, as ``settee`` did before ``settee.cut``: a
    commit landing between two of them goes unnoticed."""

    def snapshots(self, shards: Sequence[Any]) -> list[Snapshot]:
        return _one_by_one(shards, self.step_hook)


class FracturedFollowerCut(FollowerCut):
    """Reads each shard's HEADS slot when it comes to that shard (``current()``), not
    all of them at one instant."""

    def __init__(self) -> None:
        super().__init__(None)

    def snapshots(self, shards: Sequence[Any]) -> list[Snapshot]:
        return _one_by_one(shards, self.step_hook)


def _one_by_one(shards: Sequence[Any], hook: Any) -> list[Snapshot]:
    snaps = []
    for i, shard in enumerate(shards):
        if i and hook is not None:
            hook(PIN_STEP)
        snaps.append(shard.current())
    return snaps


def leaves_a_thread(path: str | None = None, **options: Any) -> Any:
    """settee's engine, with a thread started at each open that never ends and is not
    a daemon: the process that opened it can never exit. Not a mutant (every answer
    is settee's); ``tests/test_verify.py`` checks that settee verify still ends."""
    import threading

    import settee

    threading.Thread(target=threading.Event().wait, name="never-ends").start()
    return settee.open(path, **options)
