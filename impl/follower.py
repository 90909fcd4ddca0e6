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
* without a valid slot (no writer since HEADS existed, a torn slot, a
  simulated file system) it falls back to the newest valid header found by
  scanning the file, when the file's size or identity changed.

Snapshots are the same immutable ``Snapshot`` the writer's readers use, so
every read call of a follower sees one commit per shard, as in the writer.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from typing import Any

from settee.btree import MAX_NODE_BYTES, NodeCache
from settee.file import ShardFile
from settee.heads import HeadsFile
from settee.io import FileHandle, FileSystem, OsFileSystem
from settee.shard import ShardIdentity, check_identity
from settee.snapshot import Snapshot
from settee.spec.errors import CorruptionError, SetteeError

__all__ = ["FollowerShard", "readonly_error"]


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
        node_size: int = MAX_NODE_BYTES,
    ) -> None:
        self.path = path
        self.identity = identity
        self.fs = fs
        self.node_size = node_size
        self.strict = False
        self._heads = heads
        self._cache_bytes = cache_bytes
        self._refresh_lock = threading.Lock()
        self._closed = False
        self._token: Any = None
        # One node cache per open file (positions are per file), dropped with the file.
        self._caches: weakref.WeakKeyDictionary[ShardFile, NodeCache] = weakref.WeakKeyDictionary()
        self.snapshot = self._load(self._token_now(), None)

    # -- reading ------------------------------------------------------------------------------

    def current(self) -> Snapshot:
        """The newest snapshot the writer has made durable, as of this call."""
        if self._closed:
            raise SetteeError("database is closed; open it again with settee.open(path)")
        token = self._token_now()
        if token != self._token:
            with self._refresh_lock:
                if token != self._token and not self._closed:
                    self.snapshot = self._load(token, self.snapshot)
        return self.snapshot

    def _token_now(self) -> Any:
        """What changes when the writer publishes: the HEADS slot, or else the file's
        identity and size."""
        if self._heads is not None:
            slot = self._heads.read(self.identity.index)
            if slot is not None:
                return ("slot", *slot)
        if isinstance(self.fs, OsFileSystem):
            try:
                st = os.stat(self.path)
            except OSError as exc:
                raise SetteeError(f"{self.path}: cannot stat the shard file: {exc}") from exc
            return ("stat", st.st_ino, st.st_size)
        return ("size", None if self._token is None else self.snapshot.file.handle.size())

    def _load(self, token: Any, old: Snapshot | None) -> Snapshot:
        """The snapshot ``token`` describes, reusing the open file when it is the same."""
        file = None if old is None else old.file
        offset = token[2] if token[0] == "slot" else None
        if file is None or offset is None or self._replaced(file):
            # No slot: the newest header a scan finds is all there is to go by.
            file = self._open_file()
        if offset is not None and offset != file.header_offset and not file.adopt_header(offset):
            # The slot names no valid header of this file: maybe it was swapped just
            # now, else the slot is stale or torn. Trust what a scan of the path finds.
            file = self._open_file()
        header = file.header
        if header is None:
            raise CorruptionError(file.path, 0, "no valid shard header")
        check_identity(file, self.identity)
        self._token = token
        if old is not None and old.file is file and old.seq == header.seq:
            return old
        return Snapshot.of_header(file, header, self._caches[file], self.node_size)

    def _replaced(self, file: ShardFile) -> bool:
        if not isinstance(self.fs, OsFileSystem):
            return False
        try:
            return os.stat(self.path).st_ino != os.fstat(file.handle.read_fd).st_ino  # type: ignore[attr-defined]  # an OsFileHandle
        except OSError:
            return True

    def _open_file(self) -> ShardFile:
        file = ShardFile.open(self.fs, self.path, create=False, tail_warning=False)
        # Closed when the last snapshot of it goes (a compaction retires it while
        # readers may still hold snapshots), or by close().
        weakref.finalize(file, _close_handle, file.handle)
        self._caches[file] = NodeCache(self._cache_bytes)
        return file

    def close(self) -> None:
        """Stop reading; later calls raise SetteeError. Idempotent."""
        with self._refresh_lock:
            if self._closed:
                return
            self._closed = True
        self.snapshot.file.refuse_reads()
        _close_handle(self.snapshot.file.handle)


def readonly_error(path: str) -> SetteeError:
    return SetteeError(
        f"{path}: the database was opened with readonly=True; write through the process "
        "that opened it for writing, or open it without readonly"
    )


def _close_handle(handle: FileHandle) -> None:
    with contextlib.suppress(OSError):  # closing: nothing left to protect
        handle.close()
