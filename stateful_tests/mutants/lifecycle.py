"""Mutants inside the engine's lifecycle: faults a wrapper around the public API
cannot express, planted by swapping the class of each shard a database opens
(``impl/`` itself stays correct).
"""

from __future__ import annotations

from typing import Any

from settee.shard import Shard
from settee.spec.errors import SetteeError

__all__ = ["EnqueueOutsideLockShard", "plant"]


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
