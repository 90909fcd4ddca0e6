"""A shard followed from outside its writer: what ``settee.open(path, readonly=True)`` reads.

A database has one writer process (the directory lock says which), but any
number of processes may read it. A follower opens the shard file for reading
only, takes no lock, starts no writer thread, and before each read checks
whether the writer has published a newer durable commit (``settee.heads``):

* the HEADS slot names the newest commit whose fsync returned; when it
  changes, the follower reads the header at that offset and makes a new
  snapshot from it, so it never shows a commit the writer has not made
  durable;
* when the shard file at the path is another file than the one open (a
  compaction renamed its copy over it), the follower opens the new file;
  snapshots of the old one stay readable until nobody holds them;
* without a valid slot (no writer since HEADS existed, a slot still torn
  after ``heads.READ_TRIES`` reads, a simulated file system) it falls back
  to the newest valid header found by scanning the file, when the file's
  size or identity changed.

Snapshots are the same immutable ``Snapshot`` the writer's readers use, so
every read call of a follower sees one commit per shard, as in the writer; a
call over several shards reads their HEADS slots at one instant
(``settee.cut.FollowerCut``).
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from typing import Any

from settee.btree import MAX_NODE_BYTES, NodeCache
from settee.cache import body_cache
from settee.cut import RETRIES
from settee.file import LostCommitWarning, ShardFile
from settee.heads import HeadsFile, Slot
from settee.io import FileSystem, OsFileSystem
from settee.retired import RetiredHandles, close_handle
from settee.shard import ShardIdentity, check_identity
from settee.snapshot import Snapshot
from settee.spec.errors import CorruptionError, SetteeError
from settee.spec.format import ShardHeader

__all__ = ["FollowerShard", "readonly_error", "warn_if_lost"]


class FollowerShard:
    """One shard of a database opened ``readonly=True``. Thread-safe; reads only."""

    def __init__(
        self,
        fs: FileSystem,
        path: str,
        identity: ShardIdentity,
        *,
        heads: HeadsFile | None,
        cache_bytes: int,
        body_cache_bytes: int = 0,
        node_size: int = MAX_NODE_BYTES,
        no_writer: bool = False,
    ) -> None:
        self.path = path
        self.identity = identity
        self.fs = fs
        self.node_size = node_size
        self.strict = False
        self._heads = heads
        self._cache_bytes = cache_bytes
        self._body_cache_bytes = body_cache_bytes
        self._refresh_lock = threading.Lock()
        self._closed = False
        self._retired = RetiredHandles()
        # One node cache per open file (positions are per file), dropped with the file.
        self._caches: weakref.WeakKeyDictionary[ShardFile, NodeCache] = weakref.WeakKeyDictionary()
        # The generation a slot showed each open file to be (see _file_for).
        self._generations: weakref.WeakKeyDictionary[ShardFile, int] = weakref.WeakKeyDictionary()
        # A slot that named no readable commit, or one the files have overtaken
        # with no writer to update it: scanning until HEADS says otherwise.
        self._unusable: Slot | None = None
        # What the snapshot followed now was loaded for (a Slot, or a file token
        # without one) and the snapshot, replaced together.
        self._state: tuple[Any, Snapshot] = self._first_state(no_writer)

    @property
    def snapshot(self) -> Snapshot:
        """The snapshot followed now (the newest this handle has loaded)."""
        return self._state[1]

    # -- reading ------------------------------------------------------------------------------

    def current(self) -> Snapshot:
        """The newest snapshot the writer has made durable, as of this call."""
        self._check_open()
        self._retired.close_queued()  # a read's start: no file system call under way
        for _ in range(RETRIES):
            slot = None if self._heads is None else self._heads.read(self.identity.index)
            if slot is None or slot == self._unusable:
                return self._scanned()
            snap = self._at(slot)
            if snap is not None:
                return snap
        # The slot names no commit of the file followed or at the path: stale (a
        # writer stopped before publishing a swap), or the file keeps being swapped.
        self._unusable = slot
        return self._scanned()

    def current_at(self, slot: Slot | None) -> Snapshot | None:
        """The snapshot of exactly the commit ``slot`` names (this shard's HEADS slot,
        read together with the other shards', ``settee.cut.FollowerCut``), or None
        when it can no longer be read (a compaction swapped the file since); without
        a slot, the newest the file shows."""
        self._check_open()
        if slot is None or slot == self._unusable:
            return self._scanned()
        return self._at(slot)

    def _at(self, slot: Slot) -> Snapshot | None:
        token, snap = self._state
        if token == slot:
            return snap
        with self._refresh_lock:
            self._check_open()
            token, snap = self._state
            if token == slot:
                return snap
            found = self._load_slot(slot, snap.file)
            if found is None:
                return None
            file, header = found
            if _behind(slot, token) or (file is snap.file and header.seq < snap.seq):
                # Another thread read HEADS later and moved on (or, without HEADS,
                # a scan showed a later commit): this read gets the earlier
                # commit, the shard goes on following the later one.
                return self._snapshot(file, header, snap)
            file.adopt(header, slot.offset)
            self._state = (slot, self._snapshot(file, header, snap))
            return self._state[1]

    def _load_slot(self, slot: Slot, followed: ShardFile) -> tuple[ShardFile, ShardHeader] | None:
        """The file and header of the commit ``slot`` names, or None."""
        file = self._file_for(slot.generation, followed)
        header = file.header_at(slot.offset)
        if header is None or header.seq != slot.seq:
            return None
        check_identity(file, self.identity, header)
        self._generations[file] = slot.generation
        return file, header

    def _file_for(self, generation: int, followed: ShardFile) -> ShardFile:
        """The file that may hold a commit of file ``generation``: the one followed
        now when a slot showed it to be that generation (even if the path has been
        swapped since: it is still open) or when nothing showed its generation and
        it is still at the path, else the file now at the path. A header found
        there counts only with the slot's seq (``_load_slot``): a compacted copy may
        have a header, of another commit, where the old file had one."""
        known = self._generations.get(followed)
        if known == generation or (known is None and not self._replaced(followed)):
            return followed
        return self._open_file()

    def _scanned(self) -> Snapshot:
        """Without a slot: the newest valid header of the file at the path, when the
        file's identity or size changed since it was last scanned."""
        token = self._file_token()
        state_token, snap = self._state
        if token == state_token:
            return snap
        with self._refresh_lock:
            self._check_open()
            state_token, snap = self._state
            if token != state_token:
                # A fresh open scans for the newest header, wherever the file is now.
                self._state = (token, self._newest(self._open_file(), snap))
            return self._state[1]

    def _first_state(self, no_writer: bool) -> tuple[Any, Snapshot]:
        slot = None if self._heads is None else self._heads.read(self.identity.index)
        # The file's token before the scan: a commit landing in between must change
        # the token the next read compares, or that read would keep this scan's view.
        token = self._file_token()
        file = self._open_file()
        if slot is not None and no_writer and file.header and file.header.seq > slot.seq:
            # HEADS is behind the files and no writer runs to update it (a machine
            # crash lost its unsynced slots; found in review): every header in the
            # file is one a writer's open would take, so read the newest.
            self._unusable = slot
            return token, self._newest(file, None)
        if slot is not None:
            found = self._load_slot(slot, file)
            if found is not None:
                file, header = found
                file.adopt(header, slot.offset)
                return slot, self._snapshot(file, header, None)
            warn_if_lost(file, slot)
        return token, self._newest(file, None)

    def _newest(self, file: ShardFile, old: Snapshot | None) -> Snapshot:
        header = file.header
        if header is None:
            raise CorruptionError(file.path, 0, "no valid shard header")
        check_identity(file, self.identity)
        return self._snapshot(file, header, old)

    def _snapshot(self, file: ShardFile, header: ShardHeader, old: Snapshot | None) -> Snapshot:
        if old is not None and old.file is file and old.seq == header.seq:
            return old
        return Snapshot.of_header(file, header, self._caches[file], self.node_size)

    def _file_token(self) -> Any:
        """What changes when the writer commits, without HEADS: the file's identity
        and size."""
        if isinstance(self.fs, OsFileSystem):
            try:
                st = os.stat(self.path)
            except OSError as exc:
                raise SetteeError(f"{self.path}: cannot stat the shard file: {exc}") from exc
            return ("stat", st.st_ino, st.st_size)
        # Another file system: the identity of the file at the path (a compaction
        # renames a new one there) and the size of the one followed.
        try:
            at_path = self.fs.file_identity(self.path)
        except OSError as exc:
            raise SetteeError(f"{self.path}: cannot find the shard file: {exc}") from exc
        state = getattr(self, "_state", None)
        return ("size", at_path, None if state is None else state[1].file.handle.size())

    def _replaced(self, file: ShardFile) -> bool:
        held = file.handle.file_identity()
        if held is None:  # this file system cannot tell files apart (FileSystem.file_identity)
            return False
        try:
            return self.fs.file_identity(self.path) != held
        except OSError:
            return True

    def _open_file(self) -> ShardFile:
        file = ShardFile.open(self.fs, self.path, create=False, tail_warning=False)
        # Closed after the last snapshot of it goes (a compaction retires it while
        # readers may still hold snapshots; settee.retired), or by close().
        self._retired.close_when_unused(file, file.handle)
        self._caches[file] = NodeCache(self._cache_bytes)
        file.body_cache = body_cache(self._body_cache_bytes)
        return file

    def _check_open(self) -> None:
        if self._closed:
            raise SetteeError("database is closed; open it again with settee.open(path)")

    def close(self) -> None:
        """Stop reading; later calls raise SetteeError. Idempotent."""
        with self._refresh_lock:
            if self._closed:
                return
            self._closed = True
        self.snapshot.file.refuse_reads()
        close_handle(self.snapshot.file.handle)
        self._retired.owner_closed()


def warn_if_lost(file: ShardFile, slot: Slot | None) -> None:
    """A LostCommitWarning when ``slot`` names a durable commit newer than the one
    ``file`` opened at, whose header is damaged (``ShardFile.lost_commit``): how a
    writer's open and a readonly one say so."""
    lost = None if slot is None else file.lost_commit(slot.offset, slot.seq)
    if lost is not None:
        warnings.warn(LostCommitWarning(f"{file.path}: {lost}"), stacklevel=2)


def _behind(slot: Slot, token: Any) -> bool:
    """Whether ``slot`` names an earlier commit of the same file than ``token`` does.
    It decides only which commit the handle goes on following, never what the read
    that asks gets (both of ``_at``'s branches answer the slot's own commit), so no
    answer depends on its generation test: a mutation round found none."""
    return isinstance(token, Slot) and token.generation == slot.generation and slot.seq < token.seq


def readonly_error(path: str) -> SetteeError:
    return SetteeError(
        f"{path}: the database was opened with readonly=True; write through the process "
        "that opened it for writing, or open it without readonly"
    )
