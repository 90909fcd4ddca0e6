"""Deliberately broken engines: the proof must catch every one.

Each mutant is a factory ``(path, **options) -> db`` wrapping the real
engine (``settee.open``) with one bug, so ``"settee.proof.stateful.mutants:NAME"``
is a valid engine spec. ``MUTANTS`` maps each name to what it breaks;
``test_mutants.py`` runs the machines against each and asserts it is caught.
Faults inside the engine (a lock released too early) live in ``lifecycle.py``
and are planted into the shards of the database a wrapper opens.
"""

from __future__ import annotations

import threading
from typing import Any

import settee
from settee.proof.stateful.mutants.lifecycle import (
    BodyCacheAcrossFilesShard,
    EnqueueOutsideLockShard,
    FracturedCut,
    FracturedFollowerCut,
    HeadsBeforeFsyncShard,
    plant,
)
from settee.spec.errors import Conflict, NotFound
from settee.spec.revs import new_rev
from settee.spec.routing import shard_of

__all__ = ["MUTANTS", "Wrapper"]


class Wrapper:
    """Delegates everything to the real engine; mutants override one method."""

    def __init__(self, path: str, **options: Any) -> None:
        self.inner = settee.open(path, **options)
        self.shard_count = options.get("shards") or 4

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __enter__(self) -> Any:
        self.inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.__exit__(*exc)


class LostUpdate(Wrapper):
    """No conflict check: a put that conflicts overwrites the winner instead."""

    def put(self, doc: Any) -> Any:
        try:
            return self.inner.put(doc)
        except Conflict:
            row = self.inner.all_docs(keys=[doc["_id"]])["rows"][0]
            if "value" not in row:  # no document to overwrite: a genuine conflict
                raise
            return self.inner.put({**doc, "_rev": row["value"]["rev"]})


class CheckThenWrite(Wrapper):
    """The conflict check races the writer: an update is checked against a
    snapshot, then stored with ``new_edits=False`` (no check by the writer)."""

    def put(self, doc: Any) -> Any:
        rev = doc.get("_rev") if isinstance(doc, dict) else None
        if rev is None or doc.get("_deleted") or "_revisions" in doc:
            return self.inner.put(doc)
        rows = self.inner.all_docs(keys=[doc["_id"]])["rows"]
        if "value" not in rows[0] or rows[0]["value"].get("deleted"):
            return self.inner.put(doc)
        if rev != rows[0]["value"]["rev"]:
            return self.inner.put(doc)
        body = {k: v for k, v in doc.items() if not k.startswith("_")}
        child = new_rev(rev, False, body)
        self.inner.bulk_docs(
            [
                {
                    **body,
                    "_id": doc["_id"],
                    "_revisions": {
                        "start": int(child.split("-")[0]),
                        "ids": [child.split("-")[1], rev.split("-")[1]],
                    },
                }
            ],
            new_edits=False,
        )
        return {"ok": True, "id": doc["_id"], "rev": child}


class WinnerTieBreakReversed(Wrapper):
    """Among live leaves of equal position the *smaller* hash wins."""

    def get(self, doc_id: Any, rev: Any = None, revs: Any = False, conflicts: Any = False) -> Any:
        doc = self.inner.get(doc_id, rev, revs, conflicts=True)
        if rev is None:
            pos = doc["_rev"].split("-")[0]
            ties = [r for r in doc.get("_conflicts", []) if r.split("-")[0] == pos]
            if ties:
                return self.inner.get(doc_id, min(ties), revs, conflicts)
        return self.inner.get(doc_id, rev, revs, conflicts)


class InclusiveEndIgnored(Wrapper):
    """``all_docs(inclusive_end=False)`` still returns the end key."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("inclusive_end") is False:
            kwargs["inclusive_end"] = True
        return self.inner.all_docs(*args, **kwargs)


class OffsetOffByOne(Wrapper):
    """``offset`` counts the start key itself."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.inner.all_docs(*args, **kwargs)
        if kwargs.get("startkey") is not None and answer["offset"] is not None:
            answer["offset"] = min(answer["total_rows"], answer["offset"] + 1)
        return answer


class SkipPerShard(Wrapper):
    """``skip`` applied by every shard instead of once by the coordinator."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        skip, limit = kwargs.pop("skip", 0), kwargs.pop("limit", None)
        answer = self.inner.all_docs(*args, **kwargs)
        if kwargs.get("keys") is not None or not skip:
            rows = answer["rows"][skip:]
        else:
            seen: dict[int, int] = {}
            rows = []
            for row in answer["rows"]:
                shard = shard_of(row["id"], self.shard_count)
                seen[shard] = seen.get(shard, 0) + 1
                if seen[shard] > skip:
                    rows.append(row)
        answer["rows"] = rows if limit is None else rows[:limit]
        return answer


class ChangesDropDoc(Wrapper):
    """Resuming from a token loses the first change after it."""

    def changes(self, since: Any = 0, limit: Any = None, include_docs: Any = False) -> Any:
        answer = self.inner.changes(since, limit, include_docs)
        if since not in (0, "now") and answer["results"]:
            del answer["results"][0]
        return answer


class StaleRead(Wrapper):
    """``get`` answers from a per-id cache that writes do not invalidate."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        self.cache: dict[Any, Any] = {}

    def get(self, doc_id: Any, rev: Any = None, revs: Any = False, conflicts: Any = False) -> Any:
        key = (doc_id, rev, revs, conflicts)
        if isinstance(doc_id, str) and rev is None and key in self.cache:
            return self.cache[key]
        answer = self.inner.get(doc_id, rev, revs, conflicts)
        self.cache[key] = answer
        return answer


class NoTombstone(Wrapper):
    """A deleted document looks as if it never existed."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.inner.get(*args, **kwargs)
        except NotFound as exc:
            raise NotFound("missing") from exc

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.inner.all_docs(*args, **kwargs)
        answer["rows"] = [
            {"key": r["key"], "error": "not_found"} if r.get("value", {}).get("deleted") else r
            for r in answer["rows"]
        ]
        return answer


class DeletedLiveInKeys(Wrapper):
    """``all_docs(keys=...)`` reports a deleted document as live."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.inner.all_docs(*args, **kwargs)
        for row in answer["rows"]:
            row.get("value", {}).pop("deleted", None)
        return answer


class PartialBatch(Wrapper):
    """``bulk_docs`` commits one document at a time: readers see half a batch."""

    def bulk_docs(self, docs: Any, new_edits: Any = True) -> Any:
        if not isinstance(docs, list) or new_edits is not True or len(docs) < 2:
            return self.inner.bulk_docs(docs, new_edits)
        self.inner.bulk_docs(docs[:0])  # validate nothing; keep the call shape
        out = []
        for doc in docs:
            out += self.inner.bulk_docs([doc])
        return out


class RevsLimitIgnored(Wrapper):
    """Stemming never happens: ``revs_limit`` is dropped on the floor."""

    def __init__(self, path: str, **options: Any) -> None:
        options.pop("revs_limit", None)
        super().__init__(path, **options)


class EnqueueOutsideLock(Wrapper):
    """The submit lock is released before the enqueue: a write admitted just
    before ``close()`` is never answered (see ``lifecycle.EnqueueOutsideLockShard``)."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, EnqueueOutsideLockShard)


class FracturedRead(Wrapper):
    """A read over several shards pins them one after another and never checks that
    no commit landed in between: it can show a write without an earlier one that
    its writer saw acknowledged (see ``lifecycle.FracturedCut``)."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        self.inner.cut = FracturedCut()


class FracturedFollower(Wrapper):
    """A readonly handle's read over several shards reads each shard's HEADS slot
    on its own, at a different instant (``lifecycle.FracturedFollowerCut``)."""

    @staticmethod
    def open_follower(path: str) -> Any:
        follower = settee.open(path, readonly=True)
        follower.cut = FracturedFollowerCut()
        return follower


class StaleFollower(Wrapper):
    """A readonly handle (``readonly=True``) keeps the commit it opened at: it never
    follows the writer, so a read after an acknowledged write misses it."""

    @staticmethod
    def open_follower(path: str) -> Any:
        follower = settee.open(path, readonly=True)
        for shard in follower.shards:
            shard.current = lambda shard=shard: shard.snapshot  # type: ignore[method-assign]
        return follower


class CatchUpNewestSeq(Wrapper):
    """Compaction's catch-up outside the writer records the shard's newest seq as
    copied instead of its snapshot's: writes that land during a pass are never
    copied, and are lost when the compacted file takes over."""

    def compact(self) -> None:
        from settee import compaction

        original = compaction._Copier.catch_up

        def catch_up(copier: Any) -> None:
            original(copier)
            copier.seq = copier.shard.snapshot.seq

        compaction._Copier.catch_up = catch_up  # type: ignore[method-assign]
        try:
            self.inner.compact()
        finally:
            compaction._Copier.catch_up = original  # type: ignore[method-assign]


class HeadsBeforeFsync(Wrapper):
    """HEADS names a commit before its header fsync (see ``lifecycle``)."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, HeadsBeforeFsyncShard)


class BodyCacheAcrossFiles(Wrapper):
    """A body cache that outlives compaction's file swap (see ``lifecycle``)."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, BodyCacheAcrossFilesShard)
        for shard in self.inner.shards:
            shard.kept = shard.snapshot.file.body_cache


class EndlessRange(Wrapper):
    """A range asked for more rows than there are never returns: it reads again and
    again for the rows it lacks (the mutation round's V31, a merge over shards that
    forgot every shard was read to its end, looped like this in Python)."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.inner.all_docs(*args, **kwargs)
        limit = kwargs.get("limit")
        if type(limit) is int and kwargs.get("keys") is None:
            while len(answer["rows"]) < limit:
                answer = self.inner.all_docs(*args, **kwargs)
        return answer


class UnansweredDelete(Wrapper):
    """A delete's request is never answered, as one left in a queue no writer reads:
    its caller waits forever, blocked (not spinning)."""

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        threading.Event().wait()


#: name -> (class, what it breaks).
MUTANTS: dict[str, tuple[type[Wrapper], str]] = {
    "lost_update": (LostUpdate, "no conflict check: a stale put overwrites"),
    "check_then_write": (CheckThenWrite, "conflict check races the writer"),
    "winner_tie_break": (WinnerTieBreakReversed, "winner tie-break reversed"),
    "inclusive_end": (InclusiveEndIgnored, "inclusive_end=False ignored"),
    "offset": (OffsetOffByOne, "all_docs offset off by one"),
    "skip_per_shard": (SkipPerShard, "skip applied per shard"),
    "changes_drop": (ChangesDropDoc, "changes drops a doc when resuming"),
    "stale_read": (StaleRead, "stale read after write"),
    "no_tombstone": (NoTombstone, "delete leaves no visible tombstone"),
    "deleted_live_in_keys": (DeletedLiveInKeys, "keys= shows a deleted doc as live"),
    "partial_batch": (PartialBatch, "a reader sees a partially applied batch"),
    "revs_limit_ignored": (RevsLimitIgnored, "stemming never happens"),
    "enqueue_outside_lock": (EnqueueOutsideLock, "a write admitted before close() hangs"),
    "stale_follower": (StaleFollower, "a readonly handle never sees new commits"),
    "fractured_read": (FracturedRead, "a read pins its shards at different instants"),
    "fractured_follower": (
        FracturedFollower,
        "a readonly handle pins its shards at different instants",
    ),
    "catch_up_newest_seq": (
        CatchUpNewestSeq,
        "compaction skips writes landing while it catches up",
    ),
    "heads_before_fsync": (HeadsBeforeFsync, "HEADS names a commit before it is durable"),
    "body_cache_across_files": (
        BodyCacheAcrossFiles,
        "cached bodies of the old file answer reads after compaction",
    ),
    "endless_range": (EndlessRange, "a range with a limit past its rows never returns"),
    "unanswered_delete": (UnansweredDelete, "a delete waits forever for its answer"),
}

# The careless optimiser's mistakes (careless.py) subclass Wrapper, so they come last.
from settee.proof.stateful.mutants.careless import CARELESS  # noqa: E402

MUTANTS.update(CARELESS)

from settee.proof.stateful.mutants.internals import INTERNALS  # noqa: E402

MUTANTS.update(INTERNALS)

from settee.proof.stateful.mutants.escapes import ESCAPES  # noqa: E402

MUTANTS.update(ESCAPES)

from settee.proof.stateful.mutants.races import RACES  # noqa: E402

MUTANTS.update(RACES)

from settee.proof.stateful.mutants.round6 import ROUND6  # noqa: E402

MUTANTS.update(ROUND6)

from settee.proof.stateful.mutants.round7 import ROUND7  # noqa: E402

MUTANTS.update(ROUND7)

globals().update({name: cls for name, (cls, _) in MUTANTS.items()})
