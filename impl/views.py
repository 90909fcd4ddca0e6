"""The read calls that span shards: ``all_docs``, ``changes``, ``revs_diff``.

Each takes the snapshots of every shard, pinned once at the start of the
call, so one answer never mixes two commits of the same shard. As in CouchDB's
``fabric`` coordinator, every shard streams its rows in key (or seq) order and
the rows are merged, per-shard offsets summed; ``_all_docs`` ranges merge a
leaf's worth of rows at a time instead of a row (``_first_live``).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
import sys
from collections.abc import Iterator
from typing import Any

from settee.btree import Tally
from settee.docinfo import DELETED, WINNER, Summary, require_well_formed, summaries
from settee.snapshot import DELETED_DOCS, Snapshot
from settee.spec import revtree
from settee.spec.arguments import AllDocsArgs
from settee.spec.docs import render_doc
from settee.spec.errors import CorruptionError
from settee.spec.revs import parse_rev, rev_pos
from settee.spec.routing import shards_of
from settee.tokens import decode_token, encode_token

__all__ = ["all_docs", "changes", "revs_diff_entry"]


def all_docs(snaps: list[Snapshot], query: AllDocsArgs) -> dict[str, Any]:
    total = sum(snap.counts()[0] for snap in snaps)
    if query.keys is not None:
        rows = _key_rows(snaps, query)
        offset = None
    else:
        # The offset's counts come from the folds' own descents (``Tally``); a range
        # that reads no row (limit=0) counts them apart.
        tallies = None if query.startkey is None else [snap.live_tally() for snap in snaps]
        rows = _range_rows(snaps, query, tallies)
        before = 0
        if tallies is not None:
            before = sum(
                snap.live_before(query.startkey, descending=query.descending)
                if tally.value is None
                else tally.value
                for snap, tally in zip(snaps, tallies, strict=True)
            )
        offset = min(total, before + query.skip)
    return {"total_rows": total, "offset": offset, "rows": rows}


def _range_rows(
    snaps: list[Snapshot], query: AllDocsArgs, tallies: list[Tally] | None = None
) -> list[dict[str, Any]]:
    if query.limit == 0:
        return []  # however far skip reaches: no row is read for nothing
    first = _clamp(query.skip)
    stop = None if query.limit is None else _clamp(query.skip + query.limit)
    entries, read = _first_live(snaps, query, stop, tallies)
    entries = entries[first:stop]
    docs: dict[str, Any] = {}
    if query.include_docs and entries:
        # Each shard's bodies in one call, for the entries it read that made the cut:
        # ids are unique across shards, so those lie between the cut's first and last
        # id, one slice of what the shard read (found in C by bisect, ascending).
        for index, got in enumerate(read):
            mine = _made_the_cut(got, entries, query.descending)
            if mine:
                snaps[index].entry_docs(mine, docs)
    try:
        if query.include_docs:
            return [
                {"id": k, "key": k, "value": {"rev": v[WINNER]}, "doc": docs[k]} for k, v in entries
            ]
        return [{"id": k, "key": k, "value": {"rev": v[WINNER]}} for k, v in entries]
    except (TypeError, IndexError, KeyError):  # crc held: a writer bug
        require_well_formed(entries)  # names the malformed value
        raise


def _made_the_cut(got: list[_Entry], cut: list[_Entry], descending: bool) -> list[_Entry]:
    """The entries of ``got`` (one shard's, in fold order) that are in ``cut``."""
    if descending:
        ids = set(map(_by_id, cut))
        return [e for e in got if e[0] in ids]
    lo = bisect.bisect_left(got, cut[0][0], key=_by_id)
    return got[lo : bisect.bisect_right(got, cut[-1][0], lo, key=_by_id)]


# A by_id entry as a leaf holds it: (id, by_id value).
_Entry = tuple[str, tuple[Any, ...]]
# How many more live entries than its share each shard reads at first; a range whose
# rows are not evenly spread reads again (``_first_live``).
_SLACK = 8
_by_id = operator.itemgetter(0)


def _first_live(
    snaps: list[Snapshot], query: AllDocsArgs, stop: int | None, tallies: list[Tally] | None = None
) -> tuple[list[_Entry], list[list[_Entry]]]:
    """The first ``stop`` live ``by_id`` entries of all shards together (all of them
    if ``stop`` is None), in fold order; and every shard's entries read, by shard
    index: a body pointer is only meaningful in its own shard's file.

    Every shard streams its entries in order a leaf at a time. Each reads about its
    share of ``stop`` (more if that proves too few), and one sort merges what was
    read. Measured against a heap merge of per-entry streams (CouchDB's ``fabric``
    coordinator does that): the same rows at half the cost, because lists are cut
    and sorted in C. The rows are certain once ``stop`` entries come at or before
    the *bound*, the last id read of the shards not yet exhausted that comes first
    in fold order (the lowest ascending, the highest descending): nothing unread
    can come before it. ``tallies``, one per shard, count on the folds' way down.
    """
    chunks = [
        snap.by_id.fold_chunks(
            query.startkey,
            query.endkey,
            descending=query.descending,
            inclusive_end=query.inclusive_end,
            tally=None if tallies is None else tallies[index],
        )
        for index, snap in enumerate(snaps)
    ]
    read: list[list[_Entry]] = [[] for _ in snaps]
    open_shards = set(range(len(snaps)))
    quota = None if stop is None else stop // len(snaps) + _SLACK
    while True:
        for index in sorted(open_shards):
            got = read[index]
            while quota is None or len(got) < quota:
                try:
                    leaf = next(chunks[index], None)
                except (TypeError, IndexError, KeyError):  # crc held: a writer bug
                    raise snaps[index].malformed_reduction("by_id") from None
                if leaf is None:
                    open_shards.discard(index)
                    break
                chunk, reduction = leaf
                if _counts_no_tombstone(reduction):  # no value to touch
                    got += chunk
                else:
                    got += [e for e in chunk if not e[1][DELETED]]
        # Only each shard's first ``quota`` entries are merged (a leaf often gives
        # more; a shard that ran out holds fewer): what a shard read past them counts
        # as unread, so its bound is the last one merged.
        window = read if quota is None else [got[:quota] for got in read]
        merged = sorted(itertools.chain(*window), key=_by_id, reverse=query.descending)
        if _certain(merged, stop, [window[index][-1][0] for index in open_shards], query):
            return merged[:stop], read
        quota = 2 * quota  # type: ignore[operator]  # quota is None only when stop is


def _counts_no_tombstone(reduction: Any) -> bool:
    """Whether a leaf's stored by_id reduction counts no deleted document (trusted as
    FORMAT.md "by_id" says; a malformed one, which ``settee check`` reports, only
    costs the filter)."""
    try:
        return reduction[DELETED_DOCS] == 0  # type: ignore[no-any-return]
    except (TypeError, IndexError, KeyError):
        return False


def _certain(merged: list[_Entry], stop: int | None, lasts: list[str], query: AllDocsArgs) -> bool:
    """Whether ``merged[:stop]`` are the first rows: every shard is read to its end,
    or the ``stop``-th row comes at or before the last id read of every open shard."""
    if stop is None or not lasts:
        return True
    if len(merged) < stop:
        return False
    if query.descending:
        return merged[stop - 1][0] >= max(lasts)
    return merged[stop - 1][0] <= min(lasts)


def _key_rows(snaps: list[Snapshot], query: AllDocsArgs) -> list[dict[str, Any]]:
    keys = list(query.keys or [])
    if query.descending:
        keys.reverse()
    stop = None if query.limit is None else query.skip + query.limit
    keys = keys[query.skip : stop]
    wanted: dict[int, list[str]] = {}
    for key, index in zip(keys, shards_of(keys, len(snaps)), strict=True):
        wanted.setdefault(index, []).append(key)
    # A row needs only its by_id value's clear fields: building a DocInfo per key
    # cost a third of a 100-key multiget.
    found: dict[str, tuple[int, Summary]] = {}
    for index, ids in wanted.items():
        got = snaps[index].by_id.get_many(ids)
        stored = [(k, value) for k, value in zip(ids, got, strict=True) if value is not None]
        for known in summaries(stored):
            found[known[0]] = (index, known)
    rows = []
    # The rows of live documents, per shard, to read their bodies in one call each
    # (a key asked for twice gets two rows, both filled).
    live: dict[int, list[tuple[dict[str, Any], Summary]]] = {}
    for key in keys:
        hit = found.get(key)
        if hit is None:
            rows.append({"key": key, "error": "not_found"})
            continue
        index, known = hit
        value: dict[str, Any] = {"rev": known[1]}
        row: dict[str, Any] = {"id": key, "key": key, "value": value}
        if known[2]:  # deleted
            value["deleted"] = True
            if query.include_docs:
                row["doc"] = None
        elif query.include_docs:
            live.setdefault(index, []).append((row, known))
        rows.append(row)
    for index, pairs in live.items():
        snaps[index].fill_docs([row for row, _ in pairs], [known for _, known in pairs])
    return rows


def changes(
    snaps: list[Snapshot], since: Any, limit: int | None, include_docs: bool, *, may_lag: bool
) -> dict[str, Any]:
    current = [snap.seq for snap in snaps]
    position = decode_token(since, len(snaps), current, may_lag=may_lag)
    streams = [_shard_changes(i, snap, position[i]) for i, snap in enumerate(snaps)]
    merged = heapq.merge(*streams)
    results = []
    for seq, index, doc_id, rev, deleted in itertools.islice(merged, _clamp(limit)):
        position[index] = seq
        entry: dict[str, Any] = {
            "seq": encode_token(position),
            "id": doc_id,
            "changes": [{"rev": rev}],
        }
        if deleted:
            entry["deleted"] = True
        if include_docs:
            entry["doc"] = _change_doc(snaps[index], doc_id, rev)
        results.append(entry)
    # A list the limit did not cut covers everything up to the pinned snapshots;
    # a cut one ends at its last entry (limit=0: where it started, CouchDB 3.5).
    if limit is None or len(results) < limit:
        position = [max(p, c) for p, c in zip(position, current, strict=True)]
    return {"results": results, "last_seq": encode_token(position)}


def _clamp(count: int | None) -> int | None:
    """``count`` capped at what ``islice`` takes; no store holds ``sys.maxsize`` rows, so
    ``limit=2**63`` and ``limit=sys.maxsize`` mean the same: no limit."""
    return None if count is None else min(count, sys.maxsize)


def _shard_changes(index: int, snap: Snapshot, since: int) -> Iterator[tuple[Any, ...]]:
    for seq, doc_id, rev, deleted in snap.changes(since):
        yield seq, index, doc_id, rev, deleted


def _change_doc(snap: Snapshot, doc_id: str, rev: str) -> dict[str, Any]:
    info = snap.doc_info(doc_id)
    # by_seq and by_id of one snapshot agree; when they do not (a writer bug, which
    # settee check reports), the answer is corruption, not a raw KeyError.
    node = None if info is None else info.tree.get(rev)
    if info is None or node is None:
        raise CorruptionError(
            snap.file.path, 0, f"by_seq names {doc_id!r} at {rev!r}, which by_id does not hold"
        )
    body = snap.body(info, rev) or {}
    atts = snap.rendered_attachments(info, rev)
    return render_doc(doc_id, rev, node[1], body, attachments=atts)


def revs_diff_entry(tree: dict[str, list[Any]] | None, revs: list[str]) -> dict[str, Any] | None:
    """The revs_diff answer for one id, or None when nothing is missing."""
    missing = [r for r in dict.fromkeys(revs) if tree is None or r not in tree]
    if not missing:
        return None
    entry: dict[str, Any] = {"missing": missing}
    if tree is not None:
        missing.sort(key=parse_rev)  # couch_key_tree:find_missing sorts {pos, id}
        top = max(rev_pos(r) for r in missing)
        ancestors = [leaf for leaf in revtree.leaves(tree) if rev_pos(leaf) < top]
        if ancestors:
            entry["possible_ancestors"] = ancestors
    return entry
