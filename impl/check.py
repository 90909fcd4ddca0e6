"""``settee check``: verify a database's files without changing them.

One checker, used everywhere (bbolt's ``tx.Check()``): the CLI, test
teardown and state-machine invariants all call ``check_database``. It yields
problems as ``path:offset: what`` and never writes. It agrees with recovery:
a torn tail that opening kept (and later commits wrote past) is a *note*,
handed to the ``notes`` callback when one is given, never a problem, unless
HEADS names a commit in it as durable: then its header was damaged after its
fsync, and the commits it ends are lost (``ShardFile.lost_commit``).

What it verifies, per shard file:

1. every commit, found by following each header's ``prev`` back from the
   newest one (``settee.walker``): every header, and every block marker and
   frame checksum of each commit's data region (so damage in superseded data
   is found too);
2. the B+tree invariants of ``by_id`` and ``by_seq`` (``btree_check``);
3. that ``by_id`` and ``by_seq`` agree: one by_seq row per document, at its
   seq, naming its winner and deleted flag; stored counts equal a recount;
   every leaf body is readable; the revision tree is well formed.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from settee.btree import NodeCache
from settee.btree_check import check_tree
from settee.docinfo import DocInfo
from settee.file import ShardFile, TornTailWarning
from settee.heads import HeadsFile, Slot
from settee.io import FileSystem, OsFileSystem, on_os_files
from settee.layout import META_NAME, read_layout, shard_path
from settee.snapshot import Snapshot, by_id_tree, by_seq_tree
from settee.spec import revtree
from settee.spec.attachments import digest_of
from settee.spec.errors import CorruptionError, SetteeError
from settee.walker import Finding, walk

__all__ = ["Notes", "check_database", "check_shard", "check_snapshot"]

#: Receives each note (a kept torn tail, not damage) as ``file:offset: what``.
Notes = Callable[[str], None]


def check_database(
    path: str, fs: FileSystem | None = None, *, notes: Notes | None = None
) -> Iterator[str]:
    """Every problem found in the database at ``path``, as ``file:offset: what``;
    notes go to ``notes`` when given (and are dropped otherwise)."""
    fs = fs or OsFileSystem()
    try:
        layout = read_layout(fs, path)
    except (SetteeError, OSError) as exc:
        yield f"{os.path.join(path, META_NAME)}:0: {exc}"
        return
    heads = HeadsFile(path, writer=False) if on_os_files(fs) else None
    try:
        for index in range(layout.shards):
            slot = None if heads is None else heads.read(index)
            yield from check_shard(
                fs,
                shard_path(path, index),
                layout.uuid,
                index,
                layout.shards,
                notes=notes,
                slot=slot,
            )
    finally:
        if heads is not None:
            heads.close()


def check_shard(
    fs: FileSystem,
    path: str,
    db_uuid: str,
    index: int,
    shards: int,
    *,
    notes: Notes | None = None,
    slot: Slot | None = None,
) -> Iterator[str]:
    """Every problem found in one shard file, as ``file:offset: what`` (see module doc);
    ``slot`` is the shard's HEADS slot, if any."""
    try:
        with warnings.catch_warnings():
            # A kept tail is one of check's notes (below), not a warning to print.
            warnings.simplefilter("ignore", TornTailWarning)
            file = ShardFile.open(fs, path, create=False)
    except (SetteeError, OSError) as exc:
        yield f"{path}:0: cannot open: {exc}"
        return
    try:
        if file.header is None:
            yield f"{path}:0: no valid header"
            return
        yield from _check_identity(file, db_uuid, index, shards)
        if slot is not None and (lost := file.lost_commit(slot.offset, slot.seq)) is not None:
            yield f"{path}:{slot.offset}: {lost}"
        yield from _check_commits(file, notes)
        cache = NodeCache(1 << 20)
        header = file.header
        snap = Snapshot(
            file,
            by_id_tree(file, header.by_id, cache, checked=False),
            by_seq_tree(file, header.by_seq, cache),
            header.seq,
        )
        yield from check_snapshot(snap)
    except CorruptionError as exc:
        yield f"{exc.path}:{exc.offset}: {exc.detail}"
    finally:
        file.close()


def check_snapshot(snap: Snapshot) -> Iterator[str]:
    """Tree invariants and by_id/by_seq agreement of one committed shard state."""
    try:
        yield from check_tree(snap.by_id)
        yield from check_tree(snap.by_seq)
        yield from _check_agreement(snap)
    except CorruptionError as exc:
        yield f"{exc.path}:{exc.offset}: {exc.detail}"


def _check_identity(file: ShardFile, db_uuid: str, index: int, shards: int) -> Iterator[str]:
    header = file.header
    assert header is not None  # invariant: check_shard returned early for a file without one
    found = (header.db, header.shard, header.shards)
    if found != (db_uuid, index, shards):
        expected = (db_uuid, index, shards)
        yield f"{file.path}:{file.header_offset}: header names {found}, expected {expected}"


def _check_commits(file: ShardFile, notes: Notes | None) -> Iterator[str]:
    """The walker's problems; its notes go to ``notes``."""
    for item in walk(file):
        if not isinstance(item, Finding):
            continue
        if item.kind == "problem":
            yield str(item)
        elif notes is not None:
            notes(str(item))


def _check_agreement(snap: Snapshot) -> Iterator[str]:
    path = snap.file.path
    by_seq: dict[int, list[Any]] = {}
    for seq, value in snap.by_seq.fold():
        by_seq[seq] = value
    live = deleted = 0
    seen_seqs: set[int] = set()
    for doc_id, value in snap.by_id.fold():
        try:
            info = DocInfo.from_value(doc_id, value)
        except CorruptionError:
            yield f"{path}:0: by_id value of {doc_id!r} is malformed: {value!r}"
            continue
        yield from _check_doc(snap, info)
        live, deleted = live + (not info.deleted), deleted + info.deleted
        row = by_seq.get(info.seq)
        expected = info.by_seq_row()
        if row != expected:
            yield f"{path}:0: by_seq[{info.seq}] is {row!r}, by_id says {expected!r}"
        if info.seq in seen_seqs or info.seq > snap.seq:
            yield f"{path}:0: document {doc_id!r} has seq {info.seq} (duplicate or > {snap.seq})"
        seen_seqs.add(info.seq)
    for seq in set(by_seq) - seen_seqs:
        yield f"{path}:0: by_seq[{seq}] names {by_seq[seq][0]!r}, which by_id does not place there"
    counts = snap.counts()
    if counts[:2] != [live, deleted]:
        yield f"{path}:0: stored counts {counts[:2]} != recount {[live, deleted]}"


def _check_doc(snap: Snapshot, info: DocInfo) -> Iterator[str]:
    path = snap.file.path
    try:
        problems = info.problems()
    except CorruptionError as exc:
        yield f"{path}:0: document {info.id!r}: {exc.detail}"
        return
    for problem in problems:
        yield f"{path}:0: document {info.id!r} has a {problem}"
    if not revtree.is_valid_tree(info.tree):
        return
    for leaf in revtree.leaves(info.tree):
        if leaf not in info.bodies:
            yield f"{path}:0: document {info.id!r} leaf {leaf} has no body"
            continue
        try:
            snap.body(info, leaf)
        except CorruptionError as exc:
            yield f"{exc.path}:{exc.offset}: body of {info.id!r} {leaf}: {exc.detail}"
        yield from _check_attachments(snap, info, leaf)


def _check_attachments(snap: Snapshot, info: DocInfo, leaf: str) -> Iterator[str]:
    """Every chunk of every attachment a leaf holds reads back, and the bytes
    have the digest the record claims."""
    path = snap.file.path
    try:
        found = info.attachments(leaf)
    except (TypeError, ValueError) as exc:  # a record of another shape: a writer bug
        yield f"{path}:0: attachments of {info.id!r} {leaf} are malformed ({exc})"
        return
    for att in found:
        try:
            data = snap.attachment_data(att)
        except CorruptionError as exc:
            yield f"{exc.path}:{exc.offset}: attachment {att.name!r} of {info.id!r}: {exc.detail}"
            continue
        if digest_of(data) != att.digest:
            yield f"{path}:0: attachment {att.name!r} of {info.id!r} {leaf} has another digest"
