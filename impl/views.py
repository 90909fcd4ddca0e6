"""The read calls that span shards: ``all_docs``, ``changes``, ``revs_diff``.

Each takes the snapshots of every shard, pinned once at the start of the
call, so one answer never mixes two commits of the same shard. Merging
follows CouchDB's ``fabric`` coordinator: every shard streams its rows in key
(or seq) order and the coordinator merges them, summing per-shard offsets.
"""

from __future__ import annotations

import heapq
import itertools
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from settee.docinfo import DocInfo
from settee.snapshot import Snapshot
from settee.spec import revtree
from settee.spec.arguments import AllDocsArgs
from settee.spec.docs import render_doc
from settee.spec.errors import CorruptionError
from settee.spec.revs import rev_pos
from settee.spec.routing import shards_of
from settee.tokens import decode_token, encode_token

__all__ = ["all_docs", "changes", "revs_diff_entry"]


def all_docs(snaps: list[Snapshot], query: AllDocsArgs) -> dict[str, Any]:
    total = sum(snap.counts()[0] for snap in snaps)
    if query.keys is not None:
        rows = _key_rows(snaps, query)
        offset = None
    else:
        rows = _range_rows(snaps, query)
        before = 0
        if query.startkey is not None:
            before = sum(s.live_before(query.startkey, descending=query.descending) for s in snaps)
        offset = min(total, before + query.skip)
    return {"total_rows": total, "offset": offset, "rows": rows}


def _range_rows(snaps: list[Snapshot], query: AllDocsArgs) -> list[dict[str, Any]]:
    first = _clamp(query.skip)
    stop = None if query.limit is None else _clamp(query.skip + query.limit)
    streams = [_live_entries(snap, index, query) for index, snap in enumerate(snaps)]
    # Measured: a heap merge of the shards' lazy streams beats sorting `stop` rows
    # of every shard at once (that reads up to shards x more entries).
    merged = streams[0] if len(streams) == 1 else heapq.merge(*streams, reverse=query.descending)
    rows = []
    by_shard: dict[int, list[tuple[str, Any, dict[str, Any]]]] = {}
    for doc_id, index, value in itertools.islice(merged, first, stop):
        row: dict[str, Any] = {"id": doc_id, "key": doc_id, "value": {"rev": value[_WINNER]}}
        if query.include_docs:
            by_shard.setdefault(index, []).append((doc_id, value, row))
        rows.append(row)
    for index, wanted in by_shard.items():
        # A generator: each info (and its decoded tree) is dropped once planned.
        infos = (DocInfo.from_value(doc_id, value) for doc_id, value, _ in wanted)
        _fill_docs(snaps[index], [row for *_, row in wanted], infos)
    return rows


def _fill_docs(snap: Snapshot, rows: list[dict[str, Any]], infos: Iterable[DocInfo]) -> None:
    """Set each row's ``doc`` to its info's winning document, the shard's bodies read
    in one ``Snapshot.winner_docs`` call."""
    for row, doc in zip(rows, snap.winner_docs(infos), strict=True):
        row["doc"] = doc


# A live by_id entry as the range merge handles it: (id, shard index, by_id value).
# Ids are unique across shards, so tuples compare on the id alone.
_Live = tuple[str, int, tuple[Any, ...]]
# by_id value fields read here (FORMAT.md "by_id values").
_DELETED, _WINNER = 1, 2


def _live_entries(snap: Snapshot, index: int, query: AllDocsArgs) -> Iterator[_Live]:
    chunks = snap.by_id.fold_chunks(
        query.startkey,
        query.endkey,
        descending=query.descending,
        inclusive_end=query.inclusive_end,
    )
    for chunk in chunks:
        for doc_id, value in chunk:
            if not value[_DELETED]:
                yield doc_id, index, value


def _key_rows(snaps: list[Snapshot], query: AllDocsArgs) -> list[dict[str, Any]]:
    keys = list(query.keys or [])
    if query.descending:
        keys.reverse()
    stop = None if query.limit is None else query.skip + query.limit
    keys = keys[query.skip : stop]
    wanted: dict[int, list[str]] = {}
    for key, index in zip(keys, shards_of(keys, len(snaps)), strict=True):
        wanted.setdefault(index, []).append(key)
    found: dict[str, tuple[int, DocInfo]] = {}
    for index, ids in wanted.items():
        for doc_id, info in snaps[index].doc_infos(ids).items():
            found[doc_id] = (index, info)
    rows = [_key_row(key, found.get(key), query.include_docs) for key in keys]
    if query.include_docs:
        _add_live_docs(snaps, rows, found)
    return rows


def _key_row(key: str, hit: tuple[int, DocInfo] | None, include_docs: bool) -> dict[str, Any]:
    if hit is None:
        return {"key": key, "error": "not_found"}
    info = hit[1]
    value: dict[str, Any] = {"rev": info.winner}
    row: dict[str, Any] = {"id": key, "key": key, "value": value}
    if info.deleted:
        value["deleted"] = True
        if include_docs:
            row["doc"] = None
    return row


def _add_live_docs(
    snaps: list[Snapshot], rows: list[dict[str, Any]], found: dict[str, tuple[int, DocInfo]]
) -> None:
    """Give every row of a live document its ``doc``, each shard's bodies read in one
    ``Snapshot.winner_docs`` call (a key may be asked for twice: both rows get it)."""
    by_shard: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        if "error" not in row and "doc" not in row:
            by_shard.setdefault(found[row["key"]][0], []).append(row)
    for index, wanted in by_shard.items():
        _fill_docs(snaps[index], wanted, [found[row["key"]][1] for row in wanted])


def changes(
    snaps: list[Snapshot], since: Any, limit: int | None, include_docs: bool
) -> dict[str, Any]:
    current = [snap.seq for snap in snaps]
    position = decode_token(since, len(snaps), current)
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
        top = max(rev_pos(r) for r in missing)
        ancestors = [leaf for leaf in revtree.leaves(tree) if rev_pos(leaf) < top]
        if ancestors:
            entry["possible_ancestors"] = ancestors
    return entry
