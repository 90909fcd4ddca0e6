"""Durability mutants: engines that break one io rule, as engine factories.

Each factory is ``(path, fs=None, **options) -> db`` (settee's engine on a
wrapped io layer, or with one writer step moved), so ``settee.proof.crash.mutants:NAME``
is an engine spec for ``settee verify --engine ... --only crash`` and for the
crash suite's meta-test (test_mutants.py), which shows each one is caught.
``MUTANTS`` lists every factory by name.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import settee
import settee.file
from settee.file import TornTailWarning
from settee.io import FileSystemWrapper, OsFileSystem
from settee.layout import COMPACT_SUFFIX
from settee.shard import Shard
from settee.snapshot import Snapshot
from settee.spec import format as fmt
from settee.walker import header_candidates, read_header_at

__all__ = ["ENGINE_MUTANTS", "IO_MUTANTS", "MUTANTS", "tracking"]

Factory = Callable[..., Any]


class _Mutant(FileSystemWrapper):
    """Remembers whether the last append to each file was a header."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.last_was_header: dict[str, bool] = {}
        self.held: dict[str, tuple[int, bytes]] = {}

    def is_header(self, data: bytes) -> bool:
        return fmt.MAGIC in data[: fmt.BLOCK_SIZE + len(fmt.MAGIC) + 1]


class _SkipHeaderFsync(_Mutant):
    """(i) acknowledge before the header is durable: its fsync never happens."""

    def intercept(self, op: str, path: str, call: Any) -> Any:
        if op == "fsync" and ".settee" in path and self.last_was_header.get(path):
            return None
        return call()


class _SkipDataFsync(_Mutant):
    """(ii) the header may reach the disk before the data it points to."""

    def intercept(self, op: str, path: str, call: Any) -> Any:
        if op == "fsync" and ".settee" in path and self.last_was_header.get(path) is False:
            return None
        return call()


class _SkipFsyncDir(_Mutant):
    """(iii) new files and renames never made durable."""

    def intercept(self, op: str, path: str, call: Any) -> Any:
        return None if op == "fsync_dir" else call()


class _HeaderBeforeData(_Mutant):
    """(vi) the header is written and synced first, the data after it."""

    def intercept(self, op: str, path: str, call: Any) -> Any:
        return call()


class _CompactTargetUnsynced(_Mutant):
    """(viii) compaction renames its target over the shard file without syncing the
    target first: the new name can reach the disk before the bytes it names."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.renamed: set[str] = set()

    def intercept(self, op: str, path: str, call: Any) -> Any:
        if op == "rename":
            self.renamed.add(path)
        if op == "fsync" and path.endswith(COMPACT_SUFFIX) and path not in self.renamed:
            return None
        if op == "open" and path.endswith(COMPACT_SUFFIX):
            self.renamed.discard(path)  # the next compaction's target, not yet renamed
        return call()


class _CompactRenameDirUnsynced(_Mutant):
    """(ix) compaction's rename over the shard file is never made durable: the fsync of
    the directory after it is skipped (every other one is done), so a crash can undo
    the rename and bring the old file back, without the writes made since."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.renamed = False

    def intercept(self, op: str, path: str, call: Any) -> Any:
        if op == "rename" and path.endswith(COMPACT_SUFFIX):
            self.renamed = True
        elif op == "fsync_dir" and self.renamed:
            self.renamed = False
            return None
        return call()


class _RetriedFsync(_Mutant):
    """(vi) "fsyncgate": a failed fsync is tried again, and the commit acknowledged
    when the retry succeeds; the writes the failure lost are not on the disk."""

    def intercept(self, op: str, path: str, call: Any) -> Any:
        if op != "fsync":
            return call()
        try:
            return call()
        except OSError:
            return call()  # "a transient error": once more


def tracking(cls: type[_Mutant]) -> Factory:
    """An engine factory whose io layer is wrapped by the mutant ``cls``."""

    def factory(path: str, fs: Any = None, **options: Any) -> Any:
        mutant = cls(fs if fs is not None else OsFileSystem())
        original_open = mutant.open

        def open_(p: str, *, create: bool) -> Any:
            handle = original_open(p, create=create)
            inner_append = handle.append
            inner_fsync = handle.fsync

            def append(data: bytes) -> int:
                mutant.last_was_header[p] = mutant.is_header(data)
                if cls is _HeaderBeforeData and p.endswith(".settee"):
                    return _reorder_append(mutant, handle, p, data, inner_append)
                return inner_append(data)

            def fsync() -> None:
                if cls is _HeaderBeforeData and p in mutant.held and not mutant.last_was_header[p]:
                    return  # the data fsync: nothing written yet
                inner_fsync()
                if cls is _HeaderBeforeData and p in mutant.held:
                    offset, data = mutant.held.pop(p)
                    handle.inner.pwrite(offset, data)

            handle.append = append
            handle.fsync = fsync
            return handle

        mutant.open = open_  # type: ignore[method-assign]
        return settee.Database(path, fs=mutant, **options)

    return factory


def _reorder_append(mutant: _Mutant, handle: Any, path: str, data: bytes, append: Any) -> int:
    if not mutant.is_header(data):
        offset = handle.inner.size()
        mutant.held[path] = (offset, data)  # written after the header's fsync
        return offset
    if path in mutant.held:
        offset, held = mutant.held[path]
        handle.inner.pwrite(offset + len(held), data)
        return offset + len(held)
    return append(data)


IO_MUTANTS = {
    "ack_before_header_fsync": _SkipHeaderFsync,
    "no_data_fsync_before_header": _SkipDataFsync,
    "no_fsync_dir": _SkipFsyncDir,
    "header_before_data": _HeaderBeforeData,
    "compact_target_unsynced": _CompactTargetUnsynced,
    "compact_rename_dir_unsynced": _CompactRenameDirUnsynced,
    "fsync_retried": _RetriedFsync,
}


class _PublishBeforeHeaderFsync(Shard):
    """(vii) readers are served a commit before it is durable: the writer publishes the new
    snapshot after writing the header but before its fsync, so a crash can take back what
    a reader saw, and a failed header fsync leaves the failed commit published until reopen.
    The io order on disk is the correct one; only what readers see moves."""

    _early: tuple[Any, Any, int] | None = None

    def _commit(self, group: Any) -> Snapshot:
        # Keep the trees the commit builds, to publish the snapshot _commit would return.
        write_trees = group.write_trees

        def keep(batch: Any) -> Any:
            by_id, by_seq = write_trees(batch)
            self._early = (by_id, by_seq, group.seq)
            return by_id, by_seq

        group.write_trees = keep
        try:
            return super()._commit(group)
        finally:
            self._early = None

    def _step(self, name: str) -> None:
        if name == "before_header_fsync" and self._early is not None:
            by_id, by_seq, seq = self._early
            self.snapshot = Snapshot(self.snapshot.file, by_id, by_seq, seq)
        super()._step(name)


def publish_before_header_fsync(path: str, fs: Any = None, **options: Any) -> Any:
    """settee's engine with each shard publishing its commits before the header fsync."""
    db = settee.Database(path, fs=fs, **options)
    for shard in db.shards:
        shard.__class__ = _PublishBeforeHeaderFsync  # the real Shard, one step moved
    return db


def spin_on_torn_tail(path: str, fs: Any = None, **options: Any) -> Any:
    """settee's engine whose recovery never ends when a shard has a torn tail: it
    spins looking for a header after it, as a walker that does not advance past a
    bad frame would. A crash campaign without a watchdog hung on it for good."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        db = settee.Database(path, fs=fs, **options)
    while any(issubclass(w.category, TornTailWarning) for w in seen):
        pass
    return db


def _newest_but_wary(handle: Any, size: int) -> Any:
    """Recovery that distrusts the newest header when bytes follow it (a torn tail, it
    reasons, may mean that commit was cut short too) and opens at the one before."""
    found = _NEWEST_HEADER(handle, size)
    if found is None or found.end >= size:
        return found
    for offset in header_candidates(handle, size, below=found.offset):
        older = read_header_at(handle, offset, size)
        if older is not None:
            return older
    return found


_NEWEST_HEADER = settee.file.newest_header


@contextlib.contextmanager
def _recovery(finder: Callable[..., Any]) -> Iterator[None]:
    settee.file.newest_header = finder  # type: ignore[attr-defined]
    try:
        yield
    finally:
        settee.file.newest_header = _NEWEST_HEADER  # type: ignore[attr-defined]


def older_header_after_torn_tail(path: str, fs: Any = None, **options: Any) -> Any:
    """settee's engine whose recovery opens a shard with a torn tail at the header
    before its newest valid one: an acknowledged commit is dropped."""
    with _recovery(_newest_but_wary):
        return settee.Database(path, fs=fs, **options)


def chunk_crc_unchecked(path: str, fs: Any = None, **options: Any) -> Any:
    """settee's engine whose reads of attachment chunks skip the crc (the chunk reader
    decodes the payload itself, "it is only bytes"): a flipped bit in a chunk is
    returned as data. Bodies and nodes are still checked."""
    db = settee.Database(path, fs=fs, **options)
    for shard in db.shards:
        file = shard.snapshot.file
        file.read_term = _chunks_unchecked(file, file.read_term)
    return db


def _chunks_unchecked(file: Any, checked: Callable[..., Any]) -> Callable[..., Any]:
    def read_term(pos: int, payload_size: int | None = None) -> Any:
        if payload_size is None:
            return checked(pos)
        raw = file.handle.pread(pos, fmt.laid_out_size(pos, fmt.FRAME_SIZE + payload_size))
        payload = file._logical(raw, pos)[fmt.FRAME_SIZE :]
        with contextlib.suppress(Exception):
            term = fmt.decode_payload(payload)
            if isinstance(term, bytes):
                return term
        return checked(pos, payload_size)

    return read_term


_TORN = re.compile(r"(.+): ignoring [0-9]+ bytes after offset ([0-9]+) ")


def truncate_torn_tail(path: str, fs: Any = None, **options: Any) -> Any:
    """settee's engine whose recovery cuts a torn tail off (a truncate to where the
    valid commits end, "tidying up" as ZODB's FileStorage once did): the bytes of a
    commit whose header was damaged are gone, and with them the evidence that
    ``settee check`` and ``LostCommitWarning`` read."""
    fs = fs if fs is not None else OsFileSystem()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        db = settee.Database(path, fs=fs, **options)
    torn = [_TORN.match(str(w.message)) for w in seen if issubclass(w.category, TornTailWarning)]
    if not any(torn):
        return db
    db.close()
    for found in filter(None, torn):
        handle = fs.open(found[1], create=False)
        try:
            handle.truncate(int(found[2]))
            handle.fsync()
        finally:
            handle.close()
    return settee.Database(path, fs=fs, **options)


def keys_corruption_as_not_found(path: str, fs: Any = None, **options: Any) -> Any:
    """settee's engine whose key lookups (``all_docs(keys=...)``) take a damaged by_id
    leaf for an absent one: each key it holds answers ``not_found`` instead of
    ``CorruptionError`` (a lookup that "tolerates" what it cannot read)."""
    from settee import views

    db = settee.Database(path, fs=fs, **options)
    all_docs = db.all_docs

    def quiet_all_docs(*args: Any, **kwargs: Any) -> Any:
        key_rows = views._key_rows
        views._key_rows = lambda snaps, query: key_rows([_QuietSnap(s) for s in snaps], query)
        try:
            return all_docs(*args, **kwargs)
        finally:
            views._key_rows = key_rows

    db.all_docs = quiet_all_docs
    return db


class _QuietTree:
    """A B+tree whose ``get_many`` answers None for every key when a node is damaged."""

    def __init__(self, tree: Any) -> None:
        self.tree = tree

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tree, name)

    def get_many(self, wanted: Any) -> Any:
        try:
            return self.tree.get_many(wanted)
        except settee.CorruptionError:
            return [None] * len(wanted)


class _QuietSnap:
    def __init__(self, snap: Any) -> None:
        self.snap = snap
        self.by_id = _QuietTree(snap.by_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.snap, name)


#: Mutants that change the engine itself rather than its io layer: name -> factory.
ENGINE_MUTANTS: dict[str, Factory] = {
    "publish_before_header_fsync": publish_before_header_fsync,
    "spin_on_torn_tail": spin_on_torn_tail,
    "older_header_after_torn_tail": older_header_after_torn_tail,
    "chunk_crc_unchecked": chunk_crc_unchecked,
    "truncate_torn_tail": truncate_torn_tail,
    "keys_corruption_as_not_found": keys_corruption_as_not_found,
}

#: Every mutant of this module: name -> engine factory.
MUTANTS: dict[str, Factory] = {
    **{name: tracking(cls) for name, cls in IO_MUTANTS.items()},
    **ENGINE_MUTANTS,
}

globals().update(MUTANTS)
