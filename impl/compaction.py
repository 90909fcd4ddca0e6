"""Compaction: copy a shard's live data to a new file while writes go on.

1. Copy every document of a pinned snapshot into ``<shard>.compact``: the
   whole (stemmed) revision tree, but only leaf bodies; seqs are kept, so
   change tokens stay valid.
2. Catch up, outside the writer, on documents changed meanwhile, until few
   remain.
3. On the writer thread (so no commit can slip in between): catch up on the
   rest, write the header, fsync, check that the copy reopens to that header
   (and, in strict mode, that it answers exactly as the shard does), rename
   over the shard file, fsync the directory, then switch the shard to the new
   file.

A crash before the rename leaves the original file untouched (opening leaves
the leftover ``.compact`` file alone, as it leaves everything it finds; the
next compaction of the shard replaces it); a crash after it leaves the
complete, fsynced new file. Readers on old snapshots keep their descriptor of
the old file, which closes when the last of them lets go.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from typing import TYPE_CHECKING, Any

from settee.btree import NodeCache
from settee.docinfo import DocInfo, stored_size
from settee.file import ShardFile
from settee.layout import COMPACT_SUFFIX
from settee.snapshot import Snapshot, by_id_tree, by_seq_tree
from settee.spec import revtree
from settee.spec.attachments import Stored
from settee.spec.errors import CorruptionError, SetteeError
from settee.spec.format import encode_payload
from settee.strict import require_faithful_compaction
from settee.walker import newest_header

if TYPE_CHECKING:
    from settee.shard import Shard

__all__ = ["compact_shard"]

#: Documents copied per appended batch.
COPY_CHUNK = 500
#: Stop catching up outside the writer once fewer changes than this remain.
FINAL_CATCH_UP = 1000


def compact_shard(shard: Shard, *, revs_limit: int) -> None:
    """Compact one shard; returns once the shard runs on the new file."""
    # One compaction per shard at a time: two would share the target file and the
    # second would delete the first's, so the first could install a file with no name.
    # acquire() rather than ``with``, as in Shard._enqueue: a second compaction waiting
    # here is then visible to the interleaving scheduler.
    shard.compaction_lock.acquire()
    try:
        _compact(shard, revs_limit)
    except OSError as exc:
        raise SetteeError(f"{shard.path}: compaction failed: {exc}") from exc
    finally:
        shard.compaction_lock.release()


def _compact(shard: Shard, revs_limit: int) -> None:
    shard._step("compact_start")
    # Purges from here on are noted before the copy's snapshot is pinned: one that
    # lands in between is both in the snapshot and noted, which costs a lookup.
    shard.start_purge_log()
    try:
        _copy_and_swap(shard, revs_limit)
    finally:
        shard.stop_purge_log()


def _copy_and_swap(shard: Shard, revs_limit: int) -> None:
    # current() refuses a closed shard before the target is touched: after close()
    # another process may own this database and its own compaction target.
    snapshot = shard.current()
    # A shard file that is a symbolic link (placed on another disk) is compacted
    # beside the file it names, and that file is replaced: the link stays. Renaming
    # over the link replaced it with a regular file on this disk, and left the old
    # file behind it (found by the damaged-directory hunt).
    home = shard.fs.file_behind(shard.path)
    target = home + COMPACT_SUFFIX
    if shard.fs.exists(target):
        shard.fs.remove(target)
    copier = _Copier(shard, ShardFile.open(shard.fs, target, create=True), revs_limit, home)
    try:
        copier.copy_all(snapshot)
        while shard.snapshot.seq - copier.seq >= FINAL_CATCH_UP:
            copier.catch_up()
        shard._step("compact_swap")
        shard.call_in_writer(copier.finish)
    except BaseException:
        copier.file.close()
        # The original shard file is intact; the half-built copy is only clutter
        # (and is replaced by the next compaction if this removal fails too).
        with contextlib.suppress(OSError):
            if shard.fs.exists(target):
                shard.fs.remove(target)
        raise


class _Copier:
    """Builds the compacted file; ``finish`` must run on the shard's writer."""

    def __init__(self, shard: Shard, file: ShardFile, revs_limit: int, home: str) -> None:
        self.shard = shard
        self.file = file
        self.revs_limit = revs_limit
        #: The path ``finish`` renames the new file to (``FileSystem.file_behind``).
        self.home = home
        cache = NodeCache(1 << 20)
        self.by_id = by_id_tree(file, None, cache, shard.node_size)
        self.by_seq = by_seq_tree(file, None, cache, shard.node_size)
        self.seq = 0
        #: Attachment chunk lists already copied (old pointers -> new ones), so the
        #: revisions that shared one copy of the bytes still share one.
        self._copied_chunks: dict[tuple[tuple[int, int], ...], list[list[int]]] = {}

    def copy_all(self, snap: Snapshot) -> None:
        docs = snap.fold_docs(None, None, descending=False, inclusive_end=True)
        for chunk in _chunks(docs, COPY_CHUNK):
            self._copy(snap, chunk, stale_seqs=[])
        self.seq = snap.seq

    def catch_up(self) -> None:
        """Copy the documents changed between ``self.seq`` and the shard's current
        snapshot, and drop those purged whole meanwhile (which by_seq no longer
        lists). The purged ids are taken before the snapshot is read, so each of
        them is gone from it, unless written anew since (then it is a change)."""
        purged = self.shard.take_purged()
        snap = self.shard.snapshot
        changed = (doc_id for _seq, doc_id, _rev, _deleted in snap.changes(self.seq))
        for ids in _chunks(changed, COPY_CHUNK):
            current = snap.doc_infos(ids)
            previous = self.by_id.lookup(sorted(ids))
            stale = [value[0] for value in previous if value is not None]
            self._copy(snap, [current[i] for i in sorted(ids)], stale_seqs=stale)
        self._drop_purged(snap, sorted(set(purged)))
        self.seq = snap.seq

    def _drop_purged(self, snap: Snapshot, ids: list[str]) -> None:
        present = snap.doc_infos(ids)
        gone = [doc_id for doc_id in ids if doc_id not in present]
        copied = self.by_id.lookup(gone)
        stale = [value[0] for value in copied if value is not None]
        if not stale:
            return
        batch = self.file.new_batch()
        self.by_id = self.by_id.modify(batch, [], gone)
        self.by_seq = self.by_seq.modify(batch, [], stale)
        self.file.write_batch(batch)

    def _copy(self, snap: Snapshot, infos: list[DocInfo], stale_seqs: list[int]) -> None:
        batch = self.file.new_batch()
        copied = [self._copy_doc(snap, info, batch) for info in infos]
        self.by_id = self.by_id.modify(batch, [(i.id, i.to_value()) for i in copied], [])
        rows = [(i.seq, i.by_seq_row()) for i in copied]
        self.by_seq = self.by_seq.modify(batch, rows, stale_seqs)
        self.file.write_batch(batch)

    def _copy_doc(self, snap: Snapshot, info: DocInfo, batch: Any) -> DocInfo:
        tree = revtree.stem(info.tree, self.revs_limit)
        bodies = {}
        for leaf in revtree.leaves(tree):
            pointer = info.bodies.get(leaf)
            if pointer is not None:
                body = snap.body(info, leaf)
                entry: list[Any] = [batch.add(body), pointer[1]]
                atts = info.attachments(leaf)
                if atts:
                    entry.append([self._copy_attachment(snap, att, batch) for att in atts])
                bodies[leaf] = entry
        active = sum(stored_size(p) for p in bodies.values())
        return DocInfo(info.id, info.seq, info.deleted, tree, bodies, active)

    def _copy_attachment(self, snap: Snapshot, att: Stored, batch: Any) -> list[Any]:
        key = tuple((pos, size) for pos, size in att.where)
        chunks = self._copied_chunks.get(key)
        if chunks is None:
            chunks = []
            # A chunk at a time (crc and length checked); the batch spills as it grows.
            for piece in snap.attachment_chunks(att):
                payload = encode_payload(piece)
                chunks.append([batch.add_encoded(payload), len(payload)])
            self._copied_chunks[key] = chunks
        return [att.name, att.content_type, att.length, att.digest, att.revpos, chunks]

    def finish(self) -> None:
        """Final catch-up and the switch; runs on the writer, between commits."""
        shard = self.shard
        self.catch_up()
        self.file.write_header(shard.shard_header(self.by_id.root, self.by_seq.root, self.seq))
        # The new file must be durable before its name replaces the old one's.
        self.file.sync()
        self._check_reopens_to_its_header()
        if shard.strict:
            copy = Snapshot(self.file, self.by_id, self.by_seq, self.seq)
            require_faithful_compaction(shard.snapshot, copy)
        try:
            shard.fs.rename(self.file.path, self.home)
            shard.fs.fsync_dir(os.path.dirname(self.home) or ".")
        except BaseException as exc:
            # Which file the shard's name now points to is unknown: committing more to
            # the old file could write into an unlinked inode. Refuse until reopen.
            shard.fail(exc)
            raise
        self.file.path = shard.path
        shard.swap_file(self.file)

    def _check_reopens_to_its_header(self) -> None:
        """The header scan that a reopen runs (the commit walker's) must find exactly the
        header just written: otherwise the rename would replace a good file with one
        that opens to something else. One block read from the page cache."""
        handle = self.file.handle
        found = newest_header(handle, handle.size())
        if found is None or found.offset != self.file.header_offset:
            raise CorruptionError(
                self.file.path,
                self.file.header_offset or 0,
                "the compacted file does not reopen to the header just written; "
                "the original shard file is kept",
            )


def _chunks(items: Any, size: int) -> Any:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk
