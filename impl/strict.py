"""Strict mode (``settee.open(..., strict=True)``): check each commit before it is published.

bbolt's ``StrictMode`` runs its one checker after every commit; settee does the
same, at a cost bounded by what the commit changed rather than by the size of
the database: the B+tree nodes the commit wrote (``check_tree(since=...)``),
and for every document it changed, the revision tree, the leaf bodies it
wrote, the ``by_seq`` row it moved, and the counts the reductions keep. A
problem fails the write (and every later one, until reopen) instead of
surfacing in a later read; the proof runs every engine with it on.

A compaction rewrites the whole shard, so its copy is checked whole before the
swap (:func:`check_compaction`); a finding fails the compaction and keeps the
original file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from settee.btree_check import check_tree
from settee.check import check_snapshot
from settee.docinfo import DocInfo
from settee.snapshot import Snapshot
from settee.spec import revtree
from settee.spec.errors import CorruptionError, SetteeError

__all__ = [
    "StrictModeError",
    "check_commit",
    "check_compaction",
    "require_consistent_commit",
    "require_faithful_compaction",
]


class StrictModeError(SetteeError):
    """Strict mode found a commit that left the shard inconsistent (an engine bug)."""


def require_consistent_commit(
    before: Snapshot,
    after: Snapshot,
    changed: Iterable[str],
    start: int,
    removed: Iterable[str] = (),
) -> None:
    """Raise ``StrictModeError`` listing every problem :func:`check_commit` finds."""
    problems = list(check_commit(before, after, changed, start, removed))
    if problems:
        raise StrictModeError(
            "strict mode: the commit would leave the shard inconsistent: " + "; ".join(problems)
        )


def require_faithful_compaction(source: Snapshot, copy: Snapshot) -> None:
    """Raise ``StrictModeError`` listing every problem :func:`check_compaction` finds."""
    problems = list(check_compaction(source, copy))
    if problems:
        raise StrictModeError(
            "strict mode: the compacted file differs from the shard it replaces, "
            "which is kept: " + "; ".join(problems[:20])
        )


def check_compaction(source: Snapshot, copy: Snapshot) -> Iterator[str]:
    """Problems in ``copy``, a compaction of ``source`` about to replace it.

    A compaction rewrites the whole shard, so strict mode checks the whole copy:
    its trees and by_id/by_seq agreement (``settee check``'s snapshot check), and
    the same changes feed and counts as the source. Catch-up bugs (a stale
    by_seq row kept, a change skipped) show here, at the swap, not in a later read.
    """
    yield from check_snapshot(copy)
    path = copy.file.path
    try:
        if source.seq != copy.seq:
            yield f"{path}:0: the copy is at seq {copy.seq}, the shard at {source.seq}"
        theirs, ours = list(source.changes(0)), list(copy.changes(0))
        if theirs != ours:
            yield f"{path}:0: {_first_difference(theirs, ours)}"
        if source.counts()[:2] != copy.counts()[:2]:
            yield f"{path}:0: counts {copy.counts()[:2]} != the shard's {source.counts()[:2]}"
    except CorruptionError as exc:
        yield f"{exc.path}:{exc.offset}: {exc.detail}"


def _first_difference(source: list[object], copy: list[object]) -> str:
    for index, (a, b) in enumerate(zip(source, copy, strict=False)):
        if a != b:
            return f"change #{index} is {b!r} in the copy, {a!r} in the shard"
    return f"the copy has {len(copy)} changes, the shard {len(source)}"


def check_commit(
    before: Snapshot,
    after: Snapshot,
    changed: Iterable[str],
    start: int,
    removed: Iterable[str] = (),
) -> Iterator[str]:
    """Problems in the commit that turned ``before`` into ``after``, which changed the
    documents ``changed``, removed the documents ``removed`` (purged whole) and
    appended its terms from file offset ``start``."""
    try:
        yield from check_tree(after.by_id, since=start)
        yield from check_tree(after.by_seq, since=start)
        ids = sorted(set(changed))
        gone = sorted(set(removed))
        old, new = before.doc_infos(ids + gone), after.doc_infos(ids + gone)
        yield from _check_docs(before, after, ids, old, new, start, purged=bool(gone))
        yield from _check_removed(after, gone, old, new)
        yield from _check_counts(before, after, old, new)
    except CorruptionError as exc:
        yield f"{exc.path}:{exc.offset}: {exc.detail}"


def _check_docs(
    before: Snapshot,
    after: Snapshot,
    ids: list[str],
    old: dict[str, DocInfo],
    new: dict[str, DocInfo],
    start: int,
    purged: bool = False,
) -> Iterator[str]:
    path = after.file.path
    seqs = []
    for doc_id in ids:
        info = new.get(doc_id)
        if info is None:
            yield f"{path}:0: changed document {doc_id!r} is not in by_id"
            continue
        seqs.append(info.seq)
        yield from _check_doc(after, info, start)
        if not before.seq < info.seq <= after.seq:
            yield f"{path}:0: {doc_id!r} has seq {info.seq}, not in ({before.seq}, {after.seq}]"
        stale = old.get(doc_id)
        if stale is not None and stale.seq != info.seq and after.by_seq.get(stale.seq) is not None:
            yield f"{path}:0: by_seq still holds {doc_id!r}'s previous seq {stale.seq}"
    if len(set(seqs)) != len(seqs):
        yield f"{path}:0: two changed documents share a seq: {sorted(seqs)}"
    if purged:
        # The seq a purged document took earlier in the group stays the header's
        # (every commit's seq moves on), though no document carries it any more.
        if after.seq <= before.seq:
            yield f"{path}:0: a purge commit keeps header seq {before.seq}"
    elif seqs and max(seqs) != after.seq:
        yield f"{path}:0: header seq {after.seq} is not the newest document seq {max(seqs)}"


def _check_removed(
    after: Snapshot, gone: list[str], old: dict[str, DocInfo], new: dict[str, DocInfo]
) -> Iterator[str]:
    path = after.file.path
    for doc_id in gone:
        if doc_id in new:
            yield f"{path}:0: purged document {doc_id!r} is still in by_id"
        stale = old.get(doc_id)
        if stale is not None and after.by_seq.get(stale.seq) is not None:
            yield f"{path}:0: by_seq still holds purged {doc_id!r}'s seq {stale.seq}"


def _check_doc(snap: Snapshot, info: DocInfo, start: int) -> Iterator[str]:
    path = snap.file.path
    problems = info.problems()
    for problem in problems:
        yield f"{path}:0: document {info.id!r} has a {problem}"
    if not revtree.is_valid_tree(info.tree):
        return
    row, expected = snap.by_seq.get(info.seq), info.by_seq_row()
    if row != expected:
        yield f"{path}:0: by_seq[{info.seq}] is {row!r}, by_id says {expected!r}"
    for leaf in revtree.leaves(info.tree):
        pointer = info.bodies.get(leaf)
        if pointer is None:
            yield f"{path}:0: document {info.id!r} leaf {leaf} has no body"
        elif pointer[0] >= start and snap.body(info, leaf) is None:
            yield f"{path}:{pointer[0]}: body of {info.id!r} {leaf} is missing"


def _check_counts(
    before: Snapshot, after: Snapshot, old: dict[str, DocInfo], new: dict[str, DocInfo]
) -> Iterator[str]:
    expected = before.counts()
    for infos, sign in ((old, -1), (new, 1)):
        for info in infos.values():
            expected[1 if info.deleted else 0] += sign
            expected[2] += sign * info.active
    if after.counts() != expected:
        yield (
            f"{after.file.path}:0: counts [live, deleted, active] are {after.counts()}, "
            f"the commit's changes make them {expected}"
        )
