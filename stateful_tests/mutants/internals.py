"""Slips inside the engine's machinery: the fourth mutation round.

The earlier rounds moved answers at the public API (``careless.py``) or one step of
the writer's lifecycle (``lifecycle.py``). These break one internal piece the way a
careless edit of it would: the B+tree's folds and counts and the range merge
(``btree.py``, ``views.py``), the caches kept across compaction's file swap, what
compaction copies and drops, a readonly handle's caches, scans and trust in HEADS
(``follower.py``), the publication of snapshots (``cut.py``), ``close()``, attachment
chunks, purges, tokens and ``_revisions`` cut on read. Each is a ``Wrapper`` whose
database runs the real engine with that one piece replaced: a planted subclass
(``lifecycle.plant``), a readonly handle built by ``open_follower``, or a function
swapped for the length of one call (the proof runs one call at a time on these;
``CatchUpNewestSeq`` does the same), most of them the engine's own source with one
slip made in it (``slipped``). ``INTERNALS`` maps each name to its class and what it
breaks; ``stateful_tests/test_mutants.py`` names the check that catches each.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import settee
from settee import snapshot, tokens, views
from settee.btree import BTree
from settee.compaction import _Copier
from settee.docinfo import stored_size
from settee.proof.stateful.mutants import Wrapper
from settee.proof.stateful.mutants.lifecycle import plant
from settee.shard import Shard, _ChunkWriter, _Group
from settee.snapshot import Snapshot
from settee.spec import revtree
from settee.spec.routing import shard_of

__all__ = ["INTERNALS"]


@contextlib.contextmanager
def swapped(module: Any, name: str, value: Any) -> Iterator[None]:
    """``module.name`` is ``value`` for the block (one call of the wrapped engine)."""
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


def slipped(function: Any, old: str, new: str) -> Any:
    """``function`` recompiled from its source with the one text ``old`` made ``new``
    (a one-token slip, as a careless edit makes it), in its own module's namespace."""
    import sys
    import textwrap

    source = textwrap.dedent(inspect.getsource(function))
    assert source.count(old) == 1, f"{function.__qualname__}: {old!r} must occur once"
    module = sys.modules[function.__module__]
    namespace: dict[str, Any] = {}
    exec(
        compile(source.replace(old, new), f"<slipped {function.__qualname__}>", "exec"),
        vars(module),
        namespace,
    )
    return namespace[function.__name__]


class _Swapping(Wrapper):
    """Runs each public call named in ``calls`` with every ``(module, name, attribute)``
    of ``swaps`` applied: ``module.name`` is this class's ``attribute`` meanwhile."""

    calls: tuple[str, ...] = ()
    swaps: tuple[tuple[Any, str, str], ...] = ()  # (module, name, this class's attribute)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in type(self).calls:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with contextlib.ExitStack() as stack:
                for module, target, replacement in type(self).swaps:
                    value = inspect.getattr_static(self, replacement)
                    if isinstance(value, staticmethod):
                        value = value.__func__  # set on a class, it binds as the original did
                    stack.enter_context(swapped(module, target, value))
                return attr(*args, **kwargs)

        return call


# -- B+tree folds and counts, the range merge, reads (btree.py, snapshot.py, views.py) -------------


class OffsetCountsLeafTombstones(_Swapping):
    """``offset`` counts the tombstones that sort before ``startkey`` in its own leaf:
    the in-leaf count (``snapshot._live_in_leaf``) lost its ``not deleted`` filter, so
    only the counts taken from stored reductions skip them."""

    calls = ("all_docs",)
    swaps = ((snapshot, "_live_in_leaf", "live_in_leaf"),)

    @staticmethod
    def live_in_leaf(entries: Any, before: int, reduction: Any) -> int:
        return before


class CertainFromWrongEnd(_Swapping):
    """A descending range with a limit stops merging its shards too early: the bound
    that makes rows certain (``views._certain``) is taken as the ascending one (the
    lowest last id read), so a shard whose rows come later in the merge is cut off."""

    calls = ("all_docs",)
    swaps = ((views, "_certain", "certain"),)

    @staticmethod
    def certain(merged: Any, stop: int | None, lasts: list[str], query: Any) -> bool:
        if stop is None or not lasts:
            return True
        if len(merged) < stop:
            return False
        if query.descending:
            return bool(merged[stop - 1][0] >= min(lasts))
        return bool(merged[stop - 1][0] <= min(lasts))


class RowsDocsWithoutStubs(_Swapping):
    """``all_docs(include_docs=True)`` renders a range's documents with the inline fast
    path even when the winner holds attachments: their ``_attachments`` stubs are lost
    (``Snapshot.entry_docs`` forgot its ``len(entry) == 2`` test)."""

    calls = ("all_docs",)
    swaps = ((Snapshot, "entry_docs", "entry_docs"),)

    @staticmethod
    def entry_docs(snap: Snapshot, entries: Any, docs: dict[str, Any]) -> None:
        bodies = snap.file.read_sized([(v[5][0], v[5][1]) for _, v in entries])
        for (doc_id, value), body in zip(entries, bodies, strict=True):
            if value[1]:
                docs[doc_id] = {"_id": doc_id, "_rev": value[2], "_deleted": True, **body}
            else:
                docs[doc_id] = {"_id": doc_id, "_rev": value[2], **body}


class RevFoldStopsBeforeEndLeaf(_Swapping):
    """A descending range whose ``endkey`` is the last key of a leaf (not the first
    leaf) loses that row: the walk back stops before the leaf holding it, its test
    ``keys[c - 1] < end`` written ``<=`` (``BTree._leaves_rev``)."""

    calls = ("all_docs",)
    swaps = ((BTree, "_leaves_rev", "leaves_rev"),)
    leaves_rev = slipped(BTree._leaves_rev, "keys[c - 1] < end", "keys[c - 1] <= end")


class FwdFoldStopsAfterFullLeaf(_Swapping):
    """An ascending range with an ``endkey`` ends after the first leaf all of whose
    keys are in range (``if stop <= len(keys): return`` for ``<``,
    ``BTree._chunks_fwd``): rows in later leaves are lost."""

    calls = ("all_docs",)
    swaps = ((BTree, "_chunks_fwd", "chunks_fwd"),)
    chunks_fwd = slipped(BTree._chunks_fwd, "if stop < len(keys):", "if stop <= len(keys):")


class RevTallyOffByOneChild(_Swapping):
    """A descending range's ``offset`` counts the child holding ``startkey`` among the
    subtrees above it (``totals[top]`` for ``totals[top + 1]``, ``BTree._leaves_rev``):
    off in trees of more than one leaf only."""

    calls = ("all_docs",)
    swaps = ((BTree, "_leaves_rev", "leaves_rev"),)
    leaves_rev = slipped(
        BTree._leaves_rev, "totals[-1] - totals[top + 1]", "totals[-1] - totals[top]"
    )


class MadeTheCutAscendingOnly(_Swapping):
    """``include_docs`` picks each shard's rows that made the cut by bisecting, as if
    every range were ascending (``views._made_the_cut``): a descending range's
    documents are looked up in the wrong slice."""

    calls = ("all_docs",)
    swaps = ((views, "_made_the_cut", "made_the_cut"),)
    made_the_cut = staticmethod(slipped(views._made_the_cut, "if descending:", "if False:"))


class GetFastPathIgnoresDeleted(_Swapping):
    """A plain ``get`` of a deleted document answers its tombstone: the fast path from
    the by_id value's clear fields (``Snapshot.live_winner_doc``) forgot the
    ``deleted`` flag it must leave to the general path."""

    calls = ("get",)
    swaps = ((Snapshot, "live_winner_doc", "live_winner_doc"),)
    live_winner_doc = slipped(
        Snapshot.live_winner_doc, "if value[DELETED] or entry is None:", "if entry is None:"
    )


# -- tokens (tokens.py) ---------------------------------------------------------------------------


class TokenStandardBase64(_Swapping):
    """Tokens are written in standard base64 (``+`` and ``/``) while the decoder takes
    the URL-safe alphabet only: a token whose payload holds one of those two is refused
    as ``invalid since value`` (seqs from 62 on spell one)."""

    calls = ("changes", "info")
    swaps = ((views, "encode_token", "encode"), (settee.database, "encode_token", "encode"))

    @staticmethod
    def encode(seqs: list[int]) -> str:
        import base64

        import msgpack

        payload = base64.b64encode(msgpack.packb(seqs)).rstrip(b"=").decode("ascii")
        return f"{sum(seqs)}-{payload}"


class TokenPastCurrentAccepted(_Swapping):
    """A ``since`` token naming positions past this database's is taken as it is (the
    check ``any(seq > now ...)`` of ``tokens.decode_token`` left out): another
    database's token, or a copy's, silently skips this database's next writes."""

    calls = ("changes",)
    swaps = ((views, "decode_token", "decode"),)
    decode = staticmethod(
        slipped(tokens.decode_token, "if any(seq > now", "if may_lag and any(seq > now")
    )


# -- publication of snapshots (cut.py) ------------------------------------------------------------


class _PublishOutsideCutShard(Shard):
    _commit_writes = slipped(
        Shard._commit_writes, "self._cut.publish(self, after)", "self.snapshot = after"
    )


class PublishOutsideCut(Wrapper):
    """The writer assigns its new snapshot itself instead of through the cut
    (``WriterCut.publish``): the publication moves no version, so a read over several
    shards that pinned one shard before two ordered writes and the next after them
    takes the pins for one instant (the reader's cut is intact; the writer's half of
    the sequence lock is gone)."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, _PublishOutsideCutShard)


# -- close() (shard.Shard.close) ------------------------------------------------------------------


class _CloseUnderReadsShard(Shard):
    close = slipped(Shard.close, "self.snapshot.file.refuse_reads()", "pass")


class CloseUnderReads(Wrapper):
    """``close()`` closes the shard files' descriptors without first refusing new reads
    and waiting for those in flight (``ShardFile.refuse_reads``): a read parked at its
    pread meets a closed descriptor (or, on a real file, one reused by another file)."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, _CloseUnderReadsShard)


# -- _revisions cut to revs_limit on read (spec.revtree.revisions) --------------------------------


class RevisionsCutWinnerOnly(Wrapper):
    """``_revisions`` is cut to the session's ``revs_limit`` only for a read of the
    winner: ``get(id, rev=R, revs=True)`` shows the whole stored path of ``R``, longer
    than the limit after a reopen with a lower one."""

    def get(self, docid: Any, rev: Any = None, revs: Any = False, *args: Any, **kw: Any) -> Any:
        doc = self.inner.get(docid, rev, revs, *args, **kw)
        if rev is not None and revs is True and "_revisions" in doc:
            shards = self.inner.shards
            info = shards[shard_of(docid, len(shards))].current().doc_info(docid)
            if info is not None and rev in info.tree:
                doc["_revisions"] = revtree.revisions(info.tree, rev)
        return doc


# -- caches across compaction's file swap; readonly handles (shard.py, follower.py) ---------------


class _NodeCacheAcrossFilesShard(Shard):
    """Keeps the node cache of the file it opened for every file compaction swaps in."""

    kept: Any = None

    def _snapshot_of(self, file: Any) -> Snapshot:
        snap = super()._snapshot_of(file)
        if self.kept is None:
            return snap
        return Snapshot.of_header(file, file.header, self.kept, self.node_size)


class NodeCacheAcrossFiles(Wrapper):
    """The writer's B+tree node cache outlives compaction's file swap: positions are per
    file, so a node cached at an offset of the old file answers a read of whatever node
    the compacted file holds there (body_cache_across_files' twin for nodes)."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, _NodeCacheAcrossFilesShard)
        for shard in self.inner.shards:
            shard.kept = shard.snapshot.by_id.cache


class _OneCache(dict):  # type: ignore[type-arg]
    """A follower's per-file cache table that hands every file the first file's cache."""

    def __init__(self, cache: Any) -> None:
        super().__init__()
        self.cache = cache

    def __getitem__(self, file: Any) -> Any:
        return self.cache

    def __setitem__(self, file: Any, cache: Any) -> None:
        pass


class FollowerNodeCacheAcrossFiles(Wrapper):
    """A readonly handle keeps one node cache for every file it follows: after a
    compaction swapped the shard file, nodes cached by position in the old file answer
    reads of the new one."""

    @staticmethod
    def open_follower(path: str) -> Any:
        follower = settee.open(path, readonly=True)
        for shard in follower.shards:
            shard._caches = _OneCache(shard._caches[shard.snapshot.file])
        return follower


class FollowerBodyCacheAcrossFiles(Wrapper):
    """A readonly handle keeps the body cache of the first file it opened for every
    file a compaction swaps in (``FollowerShard._open_file`` gave the new file the old
    cache)."""

    @staticmethod
    def open_follower(path: str) -> Any:
        follower = settee.open(path, readonly=True)
        for shard in follower.shards:
            kept, open_file = shard.snapshot.file.body_cache, shard._open_file

            def open_kept(open_file: Callable[[], Any] = open_file, kept: Any = kept) -> Any:
                file = open_file()
                file.body_cache = kept
                return file

            shard._open_file = open_kept
        return follower


class FollowerScansItsOpenFile(Wrapper):
    """A readonly handle without HEADS (deleted, or never written) that sees the shard
    file change looks for the newest header in the file it has open, not in the file
    now at the path (``FollowerShard._scanned``): once a compaction renamed a new file
    over the path, the handle never sees another commit."""

    @staticmethod
    def open_follower(path: str) -> Any:
        import types

        from settee.follower import FollowerShard

        scanned = slipped(
            FollowerShard._scanned,
            "self._newest(self._open_file(), snap)",
            "self._newest(snap.file, snap)",
        )
        follower = settee.open(path, readonly=True)
        for shard in follower.shards:
            shard._scanned = types.MethodType(scanned, shard)
        return follower


class FollowerTrustsStaleHeads(Wrapper):
    """A readonly handle opened while no writer runs trusts HEADS even when the shard
    files hold newer commits (a machine crash lost HEADS' unsynced slots, or HEADS was
    restored from an older backup): it shows the older commit, and with no writer to
    move HEADS on, for good (the open's ``writer_running`` test left out)."""

    @staticmethod
    def open_follower(path: str) -> Any:
        with swapped(settee.database, "writer_running", lambda path: True):
            return settee.open(path, readonly=True)


# -- what compaction copies (compaction.py) -------------------------------------------------------


def _copy_winner_attachments_only(copier: _Copier, snap: Snapshot, info: Any, batch: Any) -> Any:
    from settee.docinfo import DocInfo

    tree = revtree.stem(info.tree, copier.revs_limit)
    bodies = {}
    for leaf in revtree.leaves(tree):
        pointer = info.bodies.get(leaf)
        if pointer is not None:
            entry: list[Any] = [batch.add(snap.body(info, leaf)), pointer[1]]
            atts = info.attachments(leaf) if leaf == info.winner else []
            if atts:
                entry.append([copier._copy_attachment(snap, att, batch) for att in atts])
            bodies[leaf] = entry
    active = sum(stored_size(p) for p in bodies.values())
    return DocInfo(info.id, info.seq, info.deleted, tree, bodies, active)


class CompactLosersLoseAttachments(_Swapping):
    """Compaction copies the attachments of each document's winning leaf only: a
    conflicting leaf keeps its body but loses its attachments."""

    calls = ("compact",)
    swaps = ((_Copier, "_copy_doc", "copy_doc"),)
    copy_doc = staticmethod(_copy_winner_attachments_only)


class CompactKeepsPurged(_Swapping):
    """Compaction's catch-up never drops documents purged whole while it copied
    (``_Copier._drop_purged`` left out): they come back when the copy takes over."""

    calls = ("compact",)
    swaps = ((_Copier, "_drop_purged", "drop_purged"),)

    @staticmethod
    def drop_purged(copier: _Copier, snap: Snapshot, ids: list[str]) -> None:
        return None


class CompactKeepsAncestorBodies(_Swapping):
    """Compaction copies the body of every revision that has one, not only the leaves':
    ``get(id, rev=<an ancestor>)`` still answers after ``compact()`` (SEMANTICS §13:
    ``NotFound("missing")``), and the space is never reclaimed."""

    calls = ("compact",)
    swaps = ((_Copier, "_copy_doc", "copy_doc"),)
    copy_doc = slipped(_Copier._copy_doc, "for leaf in revtree.leaves(tree):", "for leaf in tree:")


class CompactChunksByName(_Swapping):
    """Compaction shares copied attachment chunks by attachment name, not by the chunk
    list: two documents' same-named attachments end up with one's bytes."""

    calls = ("compact",)
    swaps = ((_Copier, "_copy_attachment", "copy_attachment"),)

    @staticmethod
    def copy_attachment(copier: _Copier, snap: Snapshot, att: Any, batch: Any) -> list[Any]:
        from settee.spec.format import encode_payload

        chunks = copier._copied_chunks.get(att.name)  # type: ignore[call-overload]
        if chunks is None:
            chunks = []
            for piece in snap.attachment_chunks(att):
                payload = encode_payload(piece)
                chunks.append([batch.add_encoded(payload), len(payload)])
            copier._copied_chunks[att.name] = chunks  # type: ignore[index]
        return [att.name, att.content_type, att.length, att.digest, att.revpos, chunks]


class CompactSeqOfNewestDoc(_Swapping):
    """The compacted file's header seq is the newest copied document's, not the shard's
    (each catch-up records where it got to from the rows it copied): a purge that
    removed a document whole moved ``update_seq`` past every row, and compaction
    takes that move back."""

    calls = ("compact",)
    swaps = ((_Copier, "catch_up", "catch_up"),)

    @staticmethod
    def catch_up(copier: _Copier) -> None:
        _CATCH_UP(copier)
        newest = next(copier.by_seq.fold(None, None, descending=True), None)
        copier.seq = 0 if newest is None else newest[0]


_CATCH_UP = _Copier.catch_up


# -- attachment chunks (shard.py) -----------------------------------------------------------------


class ChunksSharedByName(_Swapping):
    """A group commit shares the chunks it wrote for new attachment bytes by attachment
    name (``_ChunkWriter._chunks`` keyed by ``att.name``, not by the attachment): two
    documents of one commit with same-named attachments get the first one's bytes."""

    calls = ("put", "bulk_docs")
    swaps = ((_ChunkWriter, "_chunks", "chunks"),)
    chunks = slipped(_ChunkWriter._chunks, "key = id(att)", "key = att.name")


# -- purge (shard._Group.purge) -------------------------------------------------------------------


class _PurgeNoSeqBumpGroup(_Group):
    def purge(self, revs: dict[str, list[str]]) -> dict[str, list[str]]:
        seq = self.seq
        answer = super().purge(revs)
        if self.removed and not self.pending and self.seq == seq + 1:
            self.seq = seq  # the bump for a purge that left no document behind, undone
        return answer


class _PurgeNoSeqBumpShard(Shard):
    def _new_group(self) -> _Group:
        return _PurgeNoSeqBumpGroup(self.snapshot, self._revs_limit)


class PurgeNoSeqBump(Wrapper):
    """A purge that removes documents whole leaves ``update_seq`` where it was (only a
    purge that re-files a document moves it), so the commit has no seq of its own."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        plant(self.inner, _PurgeNoSeqBumpShard)


#: name -> (class, what it breaks).
INTERNALS: dict[str, tuple[type, str]] = {
    "offset_counts_leaf_tombstones": (
        OffsetCountsLeafTombstones,
        "offset counts tombstones in the start key's leaf",
    ),
    "certain_from_wrong_end": (CertainFromWrongEnd, "a descending range stops merging early"),
    "rows_docs_without_stubs": (RowsDocsWithoutStubs, "include_docs rows lose their stubs"),
    "rev_fold_stops_before_end_leaf": (
        RevFoldStopsBeforeEndLeaf,
        "a descending range loses an end key that ends a leaf",
    ),
    "fwd_fold_stops_after_full_leaf": (
        FwdFoldStopsAfterFullLeaf,
        "an ascending range stops after its first full leaf",
    ),
    "rev_tally_off_by_one_child": (RevTallyOffByOneChild, "descending offset off in deep trees"),
    "made_the_cut_ascending_only": (MadeTheCutAscendingOnly, "descending include_docs misses"),
    "get_fast_path_ignores_deleted": (GetFastPathIgnoresDeleted, "get answers a tombstone"),
    "token_standard_base64": (TokenStandardBase64, "tokens in base64 the decoder refuses"),
    "token_past_current_accepted": (
        TokenPastCurrentAccepted,
        "a token of a database further along is taken",
    ),
    "publish_outside_cut": (PublishOutsideCut, "a commit is published without the cut"),
    "close_under_reads": (CloseUnderReads, "close() closes files under reads in flight"),
    "revisions_cut_winner_only": (
        RevisionsCutWinnerOnly,
        "_revisions of get(rev=R) not cut to revs_limit",
    ),
    "node_cache_across_files": (
        NodeCacheAcrossFiles,
        "cached nodes of the old file answer reads after compaction",
    ),
    "follower_node_cache_across_files": (
        FollowerNodeCacheAcrossFiles,
        "a readonly handle's cached nodes outlive a compaction",
    ),
    "follower_body_cache_across_files": (
        FollowerBodyCacheAcrossFiles,
        "a readonly handle's cached bodies outlive a compaction",
    ),
    "follower_scans_its_open_file": (
        FollowerScansItsOpenFile,
        "a scanning readonly handle stops at a compaction",
    ),
    "follower_trusts_stale_heads": (
        FollowerTrustsStaleHeads,
        "a readonly handle trusts a HEADS behind the files",
    ),
    "compact_losers_lose_attachments": (
        CompactLosersLoseAttachments,
        "compaction drops a losing leaf's attachments",
    ),
    "compact_keeps_purged": (CompactKeepsPurged, "a purge during compaction is undone"),
    "compact_keeps_ancestor_bodies": (
        CompactKeepsAncestorBodies,
        "compaction keeps non-leaf bodies",
    ),
    "compact_chunks_by_name": (CompactChunksByName, "compaction shares chunks by name"),
    "compact_seq_of_newest_doc": (CompactSeqOfNewestDoc, "compaction takes back a purge's seq"),
    "chunks_shared_by_name": (ChunksSharedByName, "a commit shares chunks by name"),
    "purge_no_seq_bump": (PurgeNoSeqBump, "a purge removing documents keeps update_seq"),
}
