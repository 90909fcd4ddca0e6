"""Mistakes a careless optimiser of the engine would make: the third mutation round.

Each class wraps the real engine (``Wrapper``) and moves one answer the way a
plausible slip in the engine would (an off-by-one, ``if limit:`` for ``if limit
is not None:``, a leaf filter that forgets the deleted flag, a count taken of
the wrong reduction); the group mutants at the end plant a writer whose group
commit decides one edit wrongly (``_Group``, as ``lifecycle.plant`` plants a
shard). ``CARELESS`` maps each name to its class and what it breaks; the
package's ``MUTANTS`` includes them all.
"""

from __future__ import annotations

import base64
from typing import Any

from settee.docinfo import DocInfo
from settee.proof.stateful.mutants import Wrapper
from settee.proof.stateful.mutants.lifecycle import plant
from settee.shard import Shard, _Group
from settee.spec import revtree
from settee.spec.attachments import since_position
from settee.spec.errors import NotFound
from settee.spec.revs import is_valid_rev, rev_pos
from settee.spec.routing import shard_of
from settee.tokens import decode_token, encode_token

__all__ = ["CARELESS"]


class _Careless(Wrapper):
    """A ``Wrapper`` that can read a document's stored revision tree."""

    def tree(self, doc_id: Any) -> dict[str, list[Any]] | None:
        if not isinstance(doc_id, str) or not doc_id:
            return None
        shards = self.inner.shards
        info = shards[shard_of(doc_id, len(shards))].current().doc_info(doc_id)
        return None if info is None else info.tree


# -- reading the revision tree -----------------------------------------------------------------


class ConflictsWithDeleted(_Careless):
    """``_conflicts`` lists the deleted losing leaves too (the leaf filter forgot
    ``not deleted``: ``deleted_conflicts`` and ``_conflicts`` merged)."""

    def get(self, docid: Any, rev: Any = None, *args: Any, **kwargs: Any) -> Any:
        doc = self.inner.get(docid, rev, *args, **kwargs)
        tree = self.tree(docid)
        if rev is None and tree and (kwargs.get("conflicts") or args[1:2] == (True,)):
            extra = [r for r in revtree.leaves(tree) if r != doc["_rev"]]
            if extra:
                doc["_conflicts"] = extra
        return doc


class ConflictsDropLast(_Careless):
    """``_conflicts`` loses its last entry when there are two or more (a slice
    ``leaves[1:-1]`` written for "all but the winner")."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        doc = self.inner.get(*args, **kwargs)
        if len(doc.get("_conflicts", ())) >= 2:
            doc["_conflicts"] = doc["_conflicts"][:-1]
        return doc


class ConflictsForExplicitRev(_Careless):
    """``get(id, rev=R, conflicts=True)`` adds ``_conflicts`` (SEMANTICS.md §6: only
    a read of the winner does)."""

    def get(
        self, docid: Any, rev: Any = None, revs: Any = False, conflicts: Any = False, **kw: Any
    ) -> Any:
        doc = self.inner.get(docid, rev, revs, conflicts, **kw)
        tree = self.tree(docid)
        if rev is not None and conflicts is True and tree:
            found = revtree.conflicts(tree)
            if found:
                doc["_conflicts"] = found
        return doc


class TombstoneRevNotFound(_Careless):
    """``get(id, rev=<a tombstone>)`` answers ``NotFound("deleted")`` instead of the
    tombstone (the deleted check of a winner read applied to every read)."""

    def get(self, docid: Any, rev: Any = None, *args: Any, **kwargs: Any) -> Any:
        doc = self.inner.get(docid, rev, *args, **kwargs)
        if rev is not None and doc.get("_deleted"):
            raise NotFound("deleted")
        return doc


class RevisionsOneShort(_Careless):
    """``_revisions`` stops one short of the root (a walk that ends when the parent
    of the next node is None, not when the node is)."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        doc = self.inner.get(*args, **kwargs)
        if len(doc.get("_revisions", {}).get("ids", ())) >= 2:
            doc["_revisions"]["ids"] = doc["_revisions"]["ids"][:-1]
        return doc


class WinnerIgnoresDeleted(_Careless):
    """``get(id)`` picks the winner by ``(position, hash)`` alone: a longer deleted
    branch beats a shorter live one, and the document reads as deleted."""

    def get(self, docid: Any, rev: Any = None, *args: Any, **kwargs: Any) -> Any:
        tree = self.tree(docid) if rev is None else None
        if tree:
            top = max(revtree.leaves(tree), key=lambda r: (rev_pos(r), r.partition("-")[2]))
            if tree[top][1]:
                raise NotFound("deleted")
        return self.inner.get(docid, rev, *args, **kwargs)


# -- all_docs -------------------------------------------------------------------------------------


class AllDocsLimitZero(_Careless):
    """``all_docs(limit=0)`` returns every row (``if limit:`` for ``if limit is not
    None:``)."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("limit") == 0 and type(kwargs.get("limit")) is int:
            kwargs["limit"] = None
        return self.inner.all_docs(*args, **kwargs)


class KeysDeduplicated(_Careless):
    """``all_docs(keys=...)`` answers a key asked twice once (the keys went through
    a dict on the way to the shards, and the rows were built from it)."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        keys = kwargs.get("keys")
        if isinstance(keys, list) and all(isinstance(k, str) for k in keys):
            kwargs["keys"] = list(dict.fromkeys(keys))
        return self.inner.all_docs(*args, **kwargs)


class KeysSkipBeforeReverse(_Careless):
    """``all_docs(keys=..., descending=True)`` applies skip and limit before it
    reverses the keys, not after."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        keys = kwargs.get("keys")
        if not (isinstance(keys, list) and kwargs.get("descending") is True):
            return self.inner.all_docs(*args, **kwargs)
        skip, limit = kwargs.get("skip", 0), kwargs.get("limit")
        if type(skip) is not int or not (limit is None or type(limit) is int):
            return self.inner.all_docs(*args, **kwargs)
        stop = None if limit is None else skip + limit
        kwargs.update(keys=keys[skip:stop], skip=0, limit=None)
        return self.inner.all_docs(*args, **kwargs)


class RangeShowsTombstones(_Careless):
    """A range query lists deleted documents too, as ``keys=`` rows do (the range fold
    forgot the live filter its reduction has)."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.inner.all_docs(*args, **kwargs)
        if kwargs.get("keys") is not None or args or kwargs.get("limit") is not None:
            return answer
        if kwargs.get("skip") or kwargs.get("startkey") is not None:
            return answer
        if kwargs.get("endkey") is not None:
            return answer
        deleted = [c["id"] for c in self.inner.changes()["results"] if c.get("deleted")]
        if not deleted:
            return answer
        extra = self.inner.all_docs(keys=deleted, include_docs=kwargs.get("include_docs", False))
        rows = answer["rows"] + extra["rows"]
        rows.sort(key=lambda r: r["id"], reverse=kwargs.get("descending") is True)
        answer["rows"] = rows
        return answer


class TotalRowsWithDeleted(_Careless):
    """``total_rows`` counts tombstones too (the by_id reduction's row count, not its
    live count)."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.inner.all_docs(*args, **kwargs)
        answer["total_rows"] += self.inner.info()["doc_del_count"]
        return answer


class OffsetUncapped(_Careless):
    """``offset`` is ``P + skip`` without the cap at ``total_rows``."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.inner.all_docs(*args, **kwargs)
        skip = kwargs.get("skip", 0)
        at_cap = answer["offset"] is not None and answer["offset"] == answer["total_rows"]
        if at_cap and type(skip) is int and not args:
            before = self.inner.all_docs(
                startkey=kwargs.get("startkey"), descending=kwargs.get("descending", False), limit=0
            )
            answer["offset"] = before["offset"] + skip
        return answer


class ExclusiveEndAscendingOnly(_Careless):
    """``inclusive_end=False`` is honoured only ascending: descending, the end key
    (the low bound) is still returned."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("descending") is True and kwargs.get("inclusive_end") is False:
            kwargs["inclusive_end"] = True
        return self.inner.all_docs(*args, **kwargs)


class DescendingSkipFromFarEnd(_Careless):
    """Descending, ``skip`` drops rows from the far end of the range (skip applied
    to the ascending merge, before it is reversed)."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        skip = kwargs.get("skip", 0)
        if kwargs.get("keys") is not None or kwargs.get("descending") is not True:
            return self.inner.all_docs(*args, **kwargs)
        if type(skip) is not int or not skip or args:
            return self.inner.all_docs(*args, **kwargs)
        limit = kwargs.get("limit")
        answer = self.inner.all_docs(**{**kwargs, "skip": 0, "limit": None})
        rows = answer["rows"][: max(0, len(answer["rows"]) - skip)]
        answer["rows"] = rows if limit is None else rows[:limit]
        answer["offset"] = min(answer["total_rows"], answer["offset"] + skip)
        return answer


# -- changes ----------------------------------------------------------------------------------


class ChangesLimitZero(_Careless):
    """``changes(limit=0)`` returns every change (``if limit:``)."""

    def changes(self, since: Any = 0, limit: Any = None, include_docs: Any = False) -> Any:
        if limit == 0 and type(limit) is int:
            limit = None
        return self.inner.changes(since, limit, include_docs)


class ChangesSinceInclusive(_Careless):
    """Resuming from a token repeats the change the token ends at (the by_seq fold
    starts at ``seq`` instead of ``seq + 1``)."""

    def changes(self, since: Any = 0, limit: Any = None, include_docs: Any = False) -> Any:
        if isinstance(since, str) and since not in ("0", "now") and "-" in since:
            shards = len(self.inner.shards)
            current = [s.current().seq for s in self.inner.shards]
            try:
                seqs = decode_token(since, shards, current)
            except Exception:
                return self.inner.changes(since, limit, include_docs)
            since = encode_token([max(0, s - 1) for s in seqs])
        return self.inner.changes(since, limit, include_docs)


class LastSeqIgnoresLimit(_Careless):
    """``last_seq`` is the database's ``update_seq`` even when ``limit`` cut the list:
    resuming from it skips the changes the limit left out."""

    def changes(self, since: Any = 0, limit: Any = None, include_docs: Any = False) -> Any:
        answer = self.inner.changes(since, limit, include_docs)
        if limit is not None and answer["results"]:
            answer["last_seq"] = self.inner.info()["update_seq"]
        return answer


class ChangesDeletedOnlyWithDocs(_Careless):
    """A tombstone's change row says ``"deleted": True`` only with ``include_docs``
    (the flag taken from the loaded document)."""

    def changes(self, since: Any = 0, limit: Any = None, include_docs: Any = False) -> Any:
        answer = self.inner.changes(since, limit, include_docs)
        if include_docs is not True:
            for row in answer["results"]:
                row.pop("deleted", None)
        return answer


class ChangesRevIgnoresDeleted(_Careless):
    """A change row names the highest leaf by ``(position, hash)``, deleted or not,
    instead of the winner."""

    def changes(self, since: Any = 0, limit: Any = None, include_docs: Any = False) -> Any:
        answer = self.inner.changes(since, limit, include_docs)
        for row in answer["results"]:
            tree = self.tree(row["id"])
            if tree:
                top = max(revtree.leaves(tree), key=lambda r: (rev_pos(r), r.partition("-")[2]))
                row["changes"] = [{"rev": top}]
        return answer


# -- info ---------------------------------------------------------------------------------------


class DelCountAnyTombstoneLeaf(_Careless):
    """``doc_del_count`` counts every document with a deleted leaf, a live conflicted
    one too (the reduction tested the leaf flags, not the winner's)."""

    def info(self) -> Any:
        answer = self.inner.info()
        extra = 0
        for row in self.inner.all_docs()["rows"]:
            tree = self.tree(row["id"])
            if tree and any(tree[r][1] for r in revtree.leaves(tree)):
                extra += 1
        answer["doc_del_count"] += extra
        return answer


class DocCountWithoutDesign(_Careless):
    """``doc_count`` leaves design documents out (as CouchDB's view index would)."""

    def info(self) -> Any:
        answer = self.inner.info()
        design = self.inner.all_docs(startkey="_design/", endkey="_design0")["rows"]
        answer["doc_count"] -= len(design)
        return answer


# -- revs_diff ----------------------------------------------------------------------------------


class PossibleAncestorsInclusive(_Careless):
    """``possible_ancestors`` takes leaves at the missing position too (``<=``)."""

    def revs_diff(self, revs: Any) -> Any:
        answer = self.inner.revs_diff(revs)
        for doc_id, entry in answer.items():
            tree = self.tree(doc_id)
            if tree:
                top = max(rev_pos(r) for r in entry["missing"])
                found = [leaf for leaf in revtree.leaves(tree) if rev_pos(leaf) <= top]
                if found:
                    entry["possible_ancestors"] = found
        return answer


class MissingUnsorted(_Careless):
    """``missing`` keeps the asked order for a known id (no ``find_missing`` sort)."""

    def revs_diff(self, revs: Any) -> Any:
        answer = self.inner.revs_diff(revs)
        for doc_id, entry in answer.items():
            if isinstance(revs, dict) and isinstance(revs.get(doc_id), list):
                asked = [r for r in dict.fromkeys(revs[doc_id]) if r in entry["missing"]]
                entry["missing"] = asked
        return answer


# -- attachments --------------------------------------------------------------------------------


class StubRevposBumped(_Careless):
    """An edit that keeps an attachment by stub stores it again, with the new
    revision's ``revpos`` (the stub resolved to the parent's bytes, then written
    as a new attachment)."""

    def put(self, doc: Any) -> Any:
        return self.inner.put(self._inline(doc))

    def bulk_docs(self, docs: Any, new_edits: Any = True) -> Any:
        if new_edits is True and type(docs) is list:  # not a hostile look-alike
            docs = [self._inline(doc) for doc in docs]
        return self.inner.bulk_docs(docs, new_edits)

    def _inline(self, doc: Any) -> Any:
        if type(doc) is not dict or type(doc.get("_attachments")) is not dict:
            return doc
        rev = doc.get("_rev")
        if not (isinstance(rev, str) and is_valid_rev(rev)):
            return doc
        atts = dict(doc["_attachments"])
        for name, att in atts.items():
            if att == {"stub": True}:
                try:
                    held = self.inner.attachment(doc["_id"], name, rev=rev)
                except Exception:
                    return doc
                atts[name] = {"content_type": held["content_type"], "data": held["data"]}
        return {**doc, "_attachments": atts}


class AttsSinceInclusive(_Careless):
    """``atts_since`` sends the data of attachments at the named position too (``>=``
    where ``couch_db`` has ``>``)."""

    def get(self, docid: Any, rev: Any = None, *args: Any, **kwargs: Any) -> Any:
        since = kwargs.get("atts_since")
        doc = self.inner.get(docid, rev, *args, **kwargs)
        tree = self.tree(docid)
        if not (isinstance(since, list) and tree and doc.get("_attachments")):
            return doc
        if kwargs.get("attachments") is False and not since:
            return doc
        at = since_position(tree, doc["_rev"], since)
        for name, att in doc["_attachments"].items():
            if att.get("stub") and at and att["revpos"] == at:
                data = self.inner.attachment(docid, name, rev=doc["_rev"])["data"]
                doc["_attachments"][name] = {  # as render() puts data: base64
                    "content_type": att["content_type"],
                    "revpos": att["revpos"],
                    "digest": att["digest"],
                    "data": base64.b64encode(data).decode("ascii"),
                }
        return doc


class LengthOfBase64(_Careless):
    """A stub's ``length`` is the length of the base64 text, not of the bytes."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        doc = self.inner.get(*args, **kwargs)
        for att in (doc.get("_attachments") or {}).values():
            if att.get("stub"):
                att["length"] = len(base64.b64encode(b"\0" * att["length"]))
        return doc


class LimitBeforeSkip(_Careless):
    """A range applies ``limit`` before ``skip`` (each shard's stream cut to ``limit``
    rows, then the coordinator skips)."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        skip, limit = kwargs.get("skip", 0), kwargs.get("limit")
        if args or kwargs.get("keys") is not None or type(limit) is not int:
            return self.inner.all_docs(*args, **kwargs)
        if type(skip) is not int or not skip:
            return self.inner.all_docs(*args, **kwargs)
        answer = self.inner.all_docs(**{**kwargs, "skip": 0})
        answer["rows"] = answer["rows"][skip:]
        answer["offset"] = min(answer["total_rows"], answer["offset"] + skip)
        return answer


class KeysDeletedDocBody(_Careless):
    """``all_docs(keys=..., include_docs=True)`` gives a deleted document's row the
    tombstone as ``doc`` instead of ``None``."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.inner.all_docs(*args, **kwargs)
        for row in answer["rows"]:
            if row.get("value", {}).get("deleted") and "doc" in row:
                row["doc"] = self.inner.get(row["id"], rev=row["value"]["rev"])
        return answer


class DocsReadAfterRows(_Careless):
    """``all_docs(include_docs=True)`` lists its rows from one pinned instant, then
    reads each row's document as it is now (one ``get`` per row, each on the shard's
    current snapshot): a write between the two shows a row whose ``doc`` is of
    another revision, or a row without its document."""

    def all_docs(self, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs.get("include_docs") is not True or kwargs.get("keys") is not None:
            return self.inner.all_docs(*args, **kwargs)
        answer = self.inner.all_docs(**{**kwargs, "include_docs": False})
        rows = []
        for row in answer["rows"]:
            try:
                rows.append({**row, "doc": self.inner.get(row["id"])})
            except NotFound:
                continue  # deleted since it was listed: the row goes too
        answer["rows"] = rows
        return answer


class UpdateSeqCached(_Careless):
    """``info()["update_seq"]`` is a cached token that ``put`` and ``delete`` refresh
    but ``bulk_docs`` and ``purge`` do not: resuming ``changes`` from it repeats
    changes made before the ``info`` call."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        self.cached = self.inner.info()["update_seq"]

    def put(self, doc: Any) -> Any:
        answer = self.inner.put(doc)
        self.cached = self.inner.info()["update_seq"]
        return answer

    def delete(self, *args: Any) -> Any:
        answer = self.inner.delete(*args)
        self.cached = self.inner.info()["update_seq"]
        return answer

    def info(self) -> Any:
        return {**self.inner.info(), "update_seq": self.cached}


# -- compaction -------------------------------------------------------------------------------


class CompactDropsLosingLeaves(_Careless):
    """Compaction copies each document's winning branch only: its live conflicts are
    gone afterwards (the copier walked ``winner``'s path, not every leaf's)."""

    def compact(self) -> None:
        self.inner.compact()
        losers: dict[str, list[str]] = {}
        for row in self.inner.all_docs()["rows"]:
            found = self.inner.get(row["id"], conflicts=True).get("_conflicts")
            if found:
                losers[row["id"]] = found
        if losers:
            self.inner.purge(losers)


# -- group commit: a writer deciding one edit wrongly -------------------------------------------


class _GroupShard(Shard):
    """A shard whose writer decides each group with ``group_class``."""

    group_class: type[_Group] = _Group

    def _new_group(self) -> _Group:
        return self.group_class(self.snapshot, self._revs_limit)


class _RunningStateGroup(_Group):
    def _apply_one(
        self, doc: Any, encoded: bytes, before: dict[str, DocInfo | None], deleting: bool
    ) -> Any:
        before.pop(doc.id, None)  # each entry judged against the state the last one left
        return super()._apply_one(doc, encoded, before, deleting)


class _RunningStateShard(_GroupShard):
    group_class = _RunningStateGroup


class BatchChecksRunningState(_Careless):
    """``bulk_docs`` judges each entry's ``_rev`` (or its absence) against the state the
    earlier entries of the call left, not the state before the call (SEMANTICS.md §7.1
    rule 1): a batch that deletes a document and creates it again succeeds twice."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, _RunningStateShard)


class _ReplicatedUnstemmedGroup(_Group):
    def _replicate_one(self, doc: Any, encoded: bytes, working: dict[str, Any]) -> Any:
        limit, self.revs_limit = self.revs_limit, 0  # 0: apply_replicated stems nothing
        try:
            return super()._replicate_one(doc, encoded, working)
        finally:
            self.revs_limit = limit


class _ReplicatedUnstemmedShard(_GroupShard):
    group_class = _ReplicatedUnstemmedGroup


class ReplicatedUnstemmed(_Careless):
    """``new_edits=False`` writes are not stemmed to ``revs_limit`` (the fast path for
    replicated paths skipped the stem); interactive edits still are."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, _ReplicatedUnstemmedShard)


class _StemOneMoreGroup(_Group):
    def __init__(self, base: Any, revs_limit: int) -> None:
        super().__init__(base, revs_limit + 1)


class _StemOneMoreShard(_GroupShard):
    group_class = _StemOneMoreGroup


class StemKeepsOneMore(_Careless):
    """Writes stem every path to ``revs_limit + 1`` revisions (a ``<=`` for ``<``);
    compaction, which stems on its own, still keeps ``revs_limit``."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, _StemOneMoreShard)


class _PurgeKeepsSeqGroup(_Group):
    def purge(self, revs: dict[str, list[str]]) -> dict[str, list[str]]:
        stale = list(self.stale_seqs)
        answer = super().purge(revs)
        if self.removed:
            self.stale_seqs = stale  # a document purged whole keeps its by_seq row
        return answer


class _PurgeKeepsSeqShard(_GroupShard):
    group_class = _PurgeKeepsSeqGroup


class PurgeKeepsBySeq(_Careless):
    """Purging a document whole leaves its row in by_seq: ``changes`` goes on listing a
    document that no longer exists."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, _PurgeKeepsSeqShard)


class _StaleSeqKeptGroup(_Group):
    def _apply_one(
        self, doc: Any, encoded: bytes, before: dict[str, DocInfo | None], deleting: bool
    ) -> Any:
        stale = list(self.stale_seqs)
        result = super()._apply_one(doc, encoded, before, deleting)
        self.stale_seqs = stale  # an edit's old by_seq row is left behind
        return result


class _StaleSeqKeptShard(_GroupShard):
    group_class = _StaleSeqKeptGroup


class StaleSeqKept(_Careless):
    """An interactive edit leaves the document's old by_seq row in place: ``changes``
    lists an edited document twice, at its old and its new seq."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, _StaleSeqKeptShard)


class _KnownRevRestoredGroup(_Group):
    def _replicate_one(self, doc: Any, encoded: bytes, working: dict[str, Any]) -> Any:
        result = super()._replicate_one(doc, encoded, working)
        work = working.get(doc.id)
        leaf = doc.revisions[0]
        if result is not None or work is None or leaf not in work.tree:
            return result
        # The revision is known: "ignored" should leave it be; this stores the
        # sent body over the kept one, and counts it as a change.
        if work.seq is None and work.stale_seq is not None:
            self.stale_seqs.append(work.stale_seq)
        self.seq += 1
        work.seq = self.seq
        self.bodies[(doc.id, leaf)] = encoded
        work.bodies[leaf] = [None, len(encoded)]
        return None


class _KnownRevRestoredShard(_GroupShard):
    group_class = _KnownRevRestoredGroup


class KnownRevRestored(_Careless):
    """``new_edits=False`` with a revision the tree already holds replaces its body
    (SEMANTICS.md §7.2: ignored, counted as a success, no new seq)."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, _KnownRevRestoredShard)


#: name -> (class, what it breaks).#: name -> (class, what it breaks).
CARELESS: dict[str, tuple[type, str]] = {
    "conflicts_with_deleted": (ConflictsWithDeleted, "_conflicts lists deleted leaves"),
    "conflicts_drop_last": (ConflictsDropLast, "_conflicts loses its last entry"),
    "conflicts_for_explicit_rev": (ConflictsForExplicitRev, "get(rev=R) adds _conflicts"),
    "tombstone_rev_not_found": (TombstoneRevNotFound, "get(rev=tombstone) is NotFound"),
    "revisions_one_short": (RevisionsOneShort, "_revisions misses the root"),
    "winner_ignores_deleted": (WinnerIgnoresDeleted, "a long deleted branch wins get"),
    "all_docs_limit_zero": (AllDocsLimitZero, "all_docs limit=0 returns every row"),
    "keys_deduplicated": (KeysDeduplicated, "keys= asked twice answers once"),
    "keys_skip_before_reverse": (KeysSkipBeforeReverse, "keys= skip before descending"),
    "range_shows_tombstones": (RangeShowsTombstones, "a range lists deleted documents"),
    "total_rows_with_deleted": (TotalRowsWithDeleted, "total_rows counts tombstones"),
    "offset_uncapped": (OffsetUncapped, "offset not capped at total_rows"),
    "exclusive_end_ascending_only": (
        ExclusiveEndAscendingOnly,
        "inclusive_end=False ignored descending",
    ),
    "descending_skip_from_far_end": (DescendingSkipFromFarEnd, "descending skip from far end"),
    "changes_limit_zero": (ChangesLimitZero, "changes limit=0 returns every change"),
    "changes_since_inclusive": (ChangesSinceInclusive, "resume repeats the token's change"),
    "last_seq_ignores_limit": (LastSeqIgnoresLimit, "a cut list's last_seq skips ahead"),
    "changes_deleted_only_with_docs": (
        ChangesDeletedOnlyWithDocs,
        "deleted flag only with include_docs",
    ),
    "changes_rev_ignores_deleted": (ChangesRevIgnoresDeleted, "a change names a deleted leaf"),
    "del_count_any_tombstone_leaf": (
        DelCountAnyTombstoneLeaf,
        "doc_del_count counts deleted leaves",
    ),
    "doc_count_without_design": (DocCountWithoutDesign, "doc_count leaves design docs out"),
    "possible_ancestors_inclusive": (
        PossibleAncestorsInclusive,
        "possible_ancestors takes equal positions",
    ),
    "missing_unsorted": (MissingUnsorted, "revs_diff missing left unsorted"),
    "stub_revpos_bumped": (StubRevposBumped, "a kept stub gets the new revpos"),
    "atts_since_inclusive": (AttsSinceInclusive, "atts_since sends the named position"),
    "length_of_base64": (LengthOfBase64, "a stub's length is the base64 length"),
    "compact_drops_losing_leaves": (CompactDropsLosingLeaves, "compaction drops conflicts"),
    "batch_checks_running_state": (
        BatchChecksRunningState,
        "bulk_docs rule 1 checked against running state",
    ),
    "replicated_unstemmed": (ReplicatedUnstemmed, "new_edits=False writes not stemmed"),
    "stem_keeps_one_more": (StemKeepsOneMore, "writes stem to revs_limit + 1"),
    "purge_keeps_by_seq": (PurgeKeepsBySeq, "a purged document stays in changes"),
    "limit_before_skip": (LimitBeforeSkip, "a range applies limit before skip"),
    "keys_deleted_doc_body": (KeysDeletedDocBody, "keys= gives a deleted row a doc"),
    "docs_read_after_rows": (DocsReadAfterRows, "include_docs reads after the rows"),
    "update_seq_cached": (UpdateSeqCached, "update_seq not refreshed by bulk_docs"),
    "stale_seq_kept": (StaleSeqKept, "an edit leaves its old by_seq row"),
    "known_rev_restored": (KnownRevRestored, "a known replicated rev gets a new body"),
}
