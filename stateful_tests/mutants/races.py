"""Slips only concurrent calls show, which the fifth mutation round found the
concurrency campaigns missing.

Each escaped 150 examples of the scheduled interleavings and 25 stress runs: the
histories drew no purge, never resumed ``changes`` from the token an answer gave,
and a compaction seldom landed inside a ``get`` of a named revision. Each now fails
a fixed schedule of ``interleavings.FIXED_SCHEDULES`` (which the stress campaign runs
first, in every batch), named for it in ``stateful_tests/test_mutants.py``
(``RACES_SCHEDULED``). Built like ``internals.py``: a planted shard class, or the
engine's own source with one slip made in it (``slipped``).
"""

from __future__ import annotations

from typing import Any

import settee
from settee.proof.stateful.mutants import Wrapper
from settee.proof.stateful.mutants.internals import slipped
from settee.proof.stateful.mutants.lifecycle import plant
from settee.shard import Shard, _Group
from settee.tokens import decode_token, encode_token

__all__ = ["RACES"]


class _PurgeThenWriteGroup(_Group):
    _apply_one = slipped(_Group._apply_one, "self.removed.discard(doc.id)", "pass")


class _PurgeThenWriteShard(Shard):
    def _new_group(self) -> _Group:
        return _PurgeThenWriteGroup(self.snapshot, self._revs_limit)


class PurgeThenWriteInOneGroup(Wrapper):
    """A document purged whole and written again in the same group commit stays in
    the group's ``removed``: the edit no longer takes its id out. The commit still
    writes it (by_id's ``modify`` lets an insert win over a remove of the same key)
    but reports it purged whole, so strict mode, which every campaign runs, refuses
    the commit as inconsistent ("purged document 'a' is still in by_id"): the purge
    and the write both fail and the shard refuses writes from then on. (Without
    strict mode nothing shows: a compaction told of the purge drops only ids its
    snapshot lacks.) Only a purge and a write decided in one group reach it, which
    takes two clients whose requests the writer finds queued together."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, _PurgeThenWriteShard)


class ChangesLastSeqFromCurrent(Wrapper):
    """When no ``limit`` cuts the list, ``changes`` takes ``last_seq`` from the shards'
    current snapshots instead of the ones it pinned and read: a write that lands
    between the pin and the answer is in no result, yet before the token, so a client
    resuming from it never sees that write."""

    def changes(self, since: Any = 0, limit: Any = None, include_docs: Any = False) -> Any:
        answer = self.inner.changes(since, limit, include_docs)
        if limit is None or len(answer["results"]) < limit:
            shards = self.inner.shards
            now = [s.current().seq for s in shards]
            pos = decode_token(answer["last_seq"], len(shards), now)
            answer["last_seq"] = encode_token([max(p, c) for p, c in zip(pos, now, strict=True)])
        return answer


class GetBodyFromCurrentSnapshot(Wrapper):
    """``get`` of a named revision (or any read past the fast path) reads the body
    through the shard's current snapshot, the document's info through the one it
    pinned: a compaction swapping the file in between makes it read a position of the
    old file in the new one (another body, or damage)."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return _GET_CURRENT(self.inner, *args, **kwargs)


_GET_CURRENT = slipped(
    settee.Database.get,
    "body = snap.body(info, wanted) if",
    "body = self._shard(docid).current().body(info, wanted) if",
)


#: name -> (class, what it breaks).
RACES: dict[str, tuple[type, str]] = {
    "purge_then_write_in_one_group": (
        PurgeThenWriteInOneGroup,
        "a write after a purge of its id in one group is still purged",
    ),
    "changes_last_seq_from_current": (
        ChangesLastSeqFromCurrent,
        "changes' last_seq skips a write landing during the read",
    ),
    "get_body_from_current_snapshot": (
        GetBodyFromCurrentSnapshot,
        "get reads a body through a newer snapshot than its info",
    ),
}
