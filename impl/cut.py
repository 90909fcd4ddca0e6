"""Consistent cuts: every shard's snapshot as of one instant, for reads over several shards.

Each shard commits on its own, so a read over several shards (``all_docs``,
``changes``, ``info``, ``revs_diff``) that took one snapshot after another
could pin shard 0 before a commit and shard 1 after a later one. A client
that saw its write to shard 0 acknowledged and then wrote to shard 1 would be
shown the second write without the first: no single instant explains that
read, and the proof's linearizability check rejects it. A cut pins every
shard at one instant instead, without ever waiting for a writer's I/O:

* :class:`WriterCut`, in the process that writes: a sequence lock over the
  shards' publications. A shard's writer publishes a snapshot by bumping a
  version around the assignment (under a lock shared by the shards, held for
  two increments and one store); a reader notes the version, takes every
  shard's snapshot and takes them again if the version moved meanwhile.
  After ``RETRIES`` moves it takes the lock (publishers wait a few
  microseconds): reads never starve under a stream of commits.
* :class:`FollowerCut`, in a ``readonly=True`` handle: the writer's HEADS
  slots read in one ``pread``, repeated until two reads agree (a slot only
  moves forward, so two equal reads were both true at an instant between
  them; ``HeadsFile.read_all``), then each shard loads exactly the commit its
  slot names (``FollowerShard.current_at``), even when the handle already
  follows a later one. When a compaction swapped a shard's file after HEADS
  was read, and that commit is gone with the old file, the cut starts over;
  after ``RETRIES`` starts it takes each shard's newest. A shard without a
  usable slot (no HEADS file, a garbage slot; a torn one is read again)
  falls back to scanning its file, as a single-shard read does, and is then
  not part of the cut (SEMANTICS.md §1 lists these limits).

``step_hook``, when set, is called between two shards' snapshots: the proof's
interleaving scheduler parks the reader there, so a cut that is not one
(``settee.proof.stateful.mutants:fractured_read``) shows up as a read no
serial order explains.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from settee.heads import HeadsFile, Slot

if TYPE_CHECKING:
    from settee.follower import FollowerShard
    from settee.shard import Shard
    from settee.snapshot import Snapshot

__all__ = ["PIN_STEP", "RETRIES", "FollowerCut", "WriterCut"]

#: Attempts of a lock-free cut before a reader takes the publication lock.
RETRIES = 16
#: The label of the scheduling point between two shards' snapshots.
PIN_STEP = "pin"


class WriterCut:
    """Cuts of the shards of the writing process, and the publication they order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Odd while a publication is under way; each publication adds two.
        self._version = 0
        self.step_hook: Callable[[str], None] | None = None

    def publish(self, shard: Shard, snapshot: Snapshot) -> None:
        """Make ``snapshot`` the one ``shard`` reads from (its writer thread only)."""
        with self._lock:
            self._version += 1
            shard.snapshot = snapshot
            self._version += 1

    def snapshots(self, shards: Sequence[Shard]) -> list[Snapshot]:
        """Every shard's published snapshot as of one instant (SetteeError once closed)."""
        hook = self.step_hook
        for _ in range(RETRIES):
            version = self._version
            snaps = _pin(shards, hook)
            if version == self._version and not version & 1:
                return snaps
        # Publications keep landing mid-cut: hold them off for one pass. No hook
        # here: a thread parked by the scheduler must not hold the lock.
        self._lock.acquire()
        try:
            return _pin(shards, None)
        finally:
            self._lock.release()


class FollowerCut:
    """Cuts of a readonly handle's shards, by the writer's HEADS slots."""

    def __init__(self, heads: HeadsFile | None) -> None:
        self._heads = heads
        self.step_hook: Callable[[str], None] | None = None

    def snapshots(self, shards: Sequence[FollowerShard]) -> list[Snapshot]:
        """Every shard's newest durable commit as of one instant of HEADS."""
        for _ in range(RETRIES):
            snaps = self._at_one_instant(shards)
            if snaps is not None:
                return snaps
        # Compactions keep swapping files under the slots: each shard's newest.
        return [shard.current() for shard in shards]

    def _at_one_instant(self, shards: Sequence[FollowerShard]) -> list[Snapshot] | None:
        """The cut at the instant HEADS is read, or None when a shard's file was
        swapped since and its commit can no longer be read."""
        slots: list[Slot | None] = (
            [None] * len(shards) if self._heads is None else self._heads.read_all(len(shards))
        )
        hook = self.step_hook
        snaps = []
        for i, (shard, slot) in enumerate(zip(shards, slots, strict=True)):
            if i and hook is not None:
                hook(PIN_STEP)
            snap = shard.current_at(slot)
            if snap is None:
                return None
            snaps.append(snap)
        return snaps


def _pin(shards: Sequence[Shard], hook: Callable[[str], None] | None) -> list[Snapshot]:
    if hook is None:
        return [shard.current() for shard in shards]
    snaps = []
    for i, shard in enumerate(shards):
        if i:
            hook(PIN_STEP)
        snaps.append(shard.current())
    return snaps
