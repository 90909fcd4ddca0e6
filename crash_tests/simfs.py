"""A simulated file system that can crash: page cache versus durable storage.

``SimFS`` implements settee's io layer (``settee.io.FileSystem``) in memory and
keeps, for every file, two contents: what readers see (the page cache) and what
survives a crash (the durable bytes). The durability rules are the pessimistic
ones of ext4/XFS without ``auto_da_alloc``, as catalogued by ALICE (Pillai et
al., "All File Systems Are Not Created Equal", OSDI'14):

* ``fsync(file)`` makes that file's bytes durable, nothing else;
* a new directory entry (file creation), a rename and a removal are durable only
  after ``fsync_dir`` of the directory holding them;
* ``makedirs`` is durable at once (``strict_mkdir=False``, the default) or, with
  ``strict_mkdir=True``, like any other directory entry.

Every mutating call is one **op** (``Op``), applied in a global order and kept
in ``SimFS.trace``. Unsynced ops stay in a pending list, in issue order, until an
fsync covers them. A crash turns the pending list into a durable image in one of
the ``KINDS`` (``CrashState`` names one exactly, so every image replays):

=============== ===================================================================
``drop``         every unsynced write and directory operation is lost
``prefix``       the first ``keep`` pending ops survive, in issue order
``torn_byte``    ``prefix`` plus the first ``cut`` bytes of the next write
``torn_sector``  the same, torn at a 512-byte sector boundary of the file
``pages``        each touched 4 KiB page keeps its new or old bytes independently
                 (write-back reordering); the size is the old or the new one;
                 a seeded prefix of the directory ops survives
``garble``       the unsynced bytes of each touched 512-byte sector are new, old
                 or random (a quarter garbled, as SQLite's crash VFS does);
                 durable bytes sharing the sector stay intact (powersafe overwrite)
``undo_dirs``    every write reached the disk, no unsynced directory op did
=============== ===================================================================

``SimFS(crash_at=N)`` raises ``SimulatedCrash`` (a ``BaseException``, so engine
code cannot swallow it as an error) from op ``N`` on and from every call after
that, so that every engine thread stops touching the "disk".

``SimFS(fail_fsync_at=K)`` makes the K-th file fsync (counting from 0) fail with
EIO the way Linux's does ("fsyncgate", PostgreSQL 2018): the file's unsynced
writes are never written back (their pages are marked clean), yet readers still
see them, and a later fsync that succeeds does not bring them back: a crash
leaves zeros where they were (or the bytes durable before them). An engine that
retries the fsync and acknowledges the commit has lost it. ``SimFS.replay``
rebuilds the page cache and durable state after any prefix of a trace, which is
how the checker visits every crash point of one recorded run.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from settee.io import FileHandle, FileSystem

__all__ = [
    "KINDS",
    "PAGE_SIZE",
    "SECTOR_SIZE",
    "CrashState",
    "Image",
    "Op",
    "SimFS",
    "SimulatedCrash",
]

PAGE_SIZE = 4096
SECTOR_SIZE = 512
#: Fraction of unsynced sectors a ``garble`` crash fills with random bytes (SQLite crash VFS).
GARBLE_FRACTION = 0.25

KINDS = ("drop", "prefix", "torn_byte", "torn_sector", "pages", "garble", "undo_dirs")

#: Op kinds that change directory entries; the rest change file bytes or sync.
_DIR_OPS = frozenset({"create", "rename", "remove", "mkdir"})
_DATA_OPS = frozenset({"write", "truncate"})


class SimulatedCrash(BaseException):
    """The simulated machine lost power: raised by every call from the crash on."""


@dataclass(frozen=True, slots=True)
class Op:
    """One mutating call. ``ino`` names the file's inode; ``path``/``dst`` its names.

    kinds: ``create``, ``write`` (``offset``, ``data``), ``truncate`` (``offset`` is
    the size), ``fsync``, ``fsync_failed`` (an fsync that failed: the file's unsynced
    writes are lost to the disk), ``rename`` (``path`` -> ``dst``), ``remove``,
    ``mkdir``, ``fsync_dir`` (``path`` is the directory).
    """

    kind: str
    path: str = ""
    ino: int = -1
    offset: int = 0
    data: bytes = b""
    dst: str = ""
    #: What the engine was doing (shard step, compaction, creation); only for reports.
    label: str = ""

    def dirs(self) -> set[str]:
        """Directories whose entries this op changes."""
        if self.kind == "rename":
            return {_parent(self.path), _parent(self.dst)}
        if self.kind in _DIR_OPS:
            return {_parent(self.path)}
        return set()

    def describe(self) -> str:
        where = f"{os.path.basename(self.path) or self.path}"
        if self.kind == "write":
            what = f"write {len(self.data)} bytes at {self.offset} to {where}"
        elif self.kind == "rename":
            what = f"rename {where} -> {os.path.basename(self.dst)}"
        else:
            what = f"{self.kind} {where}"
        return f"{what} [{self.label}]" if self.label else what


@dataclass(frozen=True, slots=True)
class CrashState:
    """One crash outcome, exactly: ``kind`` plus the parameters it needs."""

    kind: str
    #: prefix/torn: pending ops kept whole.
    keep: int = 0
    #: torn: bytes kept of the write after the kept ones.
    cut: int = 0
    #: pages/garble: seed of the per-page (per-sector) choices.
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown crash kind {self.kind!r}; use one of {KINDS}")

    def describe(self) -> str:
        if self.kind == "prefix":
            return f"prefix(keep={self.keep})"
        if self.kind in ("torn_byte", "torn_sector"):
            return f"{self.kind}(keep={self.keep}, cut={self.cut})"
        if self.kind in ("pages", "garble"):
            return f"{self.kind}(seed={self.seed})"
        return self.kind


@dataclass(frozen=True, slots=True)
class Image:
    """What a disk holds: files by path, and directories."""

    files: dict[str, bytes]
    dirs: frozenset[str] = frozenset()

    def digest(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        for path in sorted(self.files):
            h.update(path.encode() + b"\0" + len(self.files[path]).to_bytes(8, "little"))
            h.update(self.files[path])
        for d in sorted(self.dirs):
            h.update(b"d" + d.encode() + b"\0")
        return h.hexdigest()


def _parent(path: str) -> str:
    return os.path.dirname(path.rstrip("/")) or "/"


def _ancestors(path: str) -> list[str]:
    """``path`` and its parents, outermost first, without the root."""
    out = []
    path = path.rstrip("/")
    while path and path != "/":
        out.append(path)
        path = os.path.dirname(path)
    return out[::-1]


def _write_into(buf: bytearray, offset: int, data: bytes) -> None:
    if offset > len(buf):
        buf.extend(bytes(offset - len(buf)))
    buf[offset : offset + len(data)] = data


def _truncate(buf: bytearray, size: int) -> None:
    if size <= len(buf):
        del buf[size:]
    else:
        buf.extend(bytes(size - len(buf)))


@dataclass(slots=True)
class _Inode:
    data: bytearray = field(default_factory=bytearray)
    durable: bytearray = field(default_factory=bytearray)
    #: Byte ranges ``[lo, hi)`` whose writes a failed fsync lost: never written back.
    lost: list[tuple[int, int]] = field(default_factory=list)

    def sync(self) -> None:
        """What an fsync that succeeds makes durable: the page cache, but the lost
        ranges as the disk held them (zeros past its old end)."""
        durable = bytearray(self.data)
        for lo, hi in self.lost:
            hi = min(hi, len(durable))
            old = self.durable[lo:hi]
            durable[lo:hi] = old + bytes(max(0, hi - lo - len(old)))
        self.durable = durable

    def rewritten(self, lo: int, hi: int) -> None:
        """A write over ``[lo, hi)`` dirties those bytes again: no longer lost."""
        kept: list[tuple[int, int]] = []
        for a, b in self.lost:
            kept.extend((x, y) for x, y in ((a, min(b, lo)), (max(a, hi), b)) if x < y)
        self.lost = kept


class _Disk:
    """The state a trace builds: inodes, names, directories, pending ops."""

    def __init__(self, image: Image | None, strict_mkdir: bool) -> None:
        self.strict_mkdir = strict_mkdir
        self.inodes: dict[int, _Inode] = {}
        self.names: dict[str, int] = {}
        self.durable_names: dict[str, int] = {}
        self.dirs: set[str] = {"/"}
        self.durable_dirs: set[str] = {"/"}
        self.pending: list[Op] = []
        if image is not None:
            for d in image.dirs:
                self.dirs.update(_ancestors(d))
            for path, data in sorted(image.files.items()):
                ino = len(self.inodes)
                self.inodes[ino] = _Inode(bytearray(data), bytearray(data))
                self.names[path] = ino
                self.dirs.update(_ancestors(_parent(path)))
            self.durable_names = dict(self.names)
            self.durable_dirs = set(self.dirs)

    def next_ino(self) -> int:
        return len(self.inodes)

    def apply(self, op: Op) -> None:
        kind = op.kind
        if kind == "create":
            self.inodes[op.ino] = _Inode()
            self.names[op.path] = op.ino
        elif kind == "write":
            _write_into(self.inodes[op.ino].data, op.offset, op.data)
            if self.inodes[op.ino].lost:
                self.inodes[op.ino].rewritten(op.offset, op.offset + len(op.data))
        elif kind == "truncate":
            _truncate(self.inodes[op.ino].data, op.offset)
        elif kind == "rename":
            del self.names[op.path]
            self.names[op.dst] = op.ino
        elif kind == "remove":
            del self.names[op.path]
        elif kind == "mkdir":
            self.dirs.add(op.path)
            if not self.strict_mkdir:
                self.durable_dirs.add(op.path)
                return
        if kind in ("fsync", "fsync_failed"):
            inode = self.inodes[op.ino]
            if kind == "fsync":
                inode.sync()
            else:
                inode.lost.extend(
                    (p.offset, p.offset + len(p.data))
                    for p in self.pending
                    if p.ino == op.ino and p.kind == "write"
                )
            self.pending = [
                p for p in self.pending if not (p.kind in _DATA_OPS and p.ino == op.ino)
            ]
        elif kind == "fsync_dir":
            synced = [p for p in self.pending if p.kind in _DIR_OPS and op.path in p.dirs()]
            for p in synced:
                _apply_dir(p, self.durable_names, self.durable_dirs)
            done = {id(p) for p in synced}
            self.pending = [p for p in self.pending if id(p) not in done]
        else:
            self.pending.append(op)

    # -- crash images ---------------------------------------------------------------------

    def image(self, state: CrashState) -> Image:
        """The disk after a crash in ``state``; this disk is not changed."""
        data = {ino: bytearray(inode.durable) for ino, inode in self.inodes.items()}
        names = dict(self.durable_names)
        dirs = set(self.durable_dirs)
        kind = state.kind
        if kind in ("prefix", "torn_byte", "torn_sector"):
            for op in self.pending[: state.keep]:
                _apply_any(op, data, names, dirs)
            if kind != "prefix" and state.keep < len(self.pending):
                torn = self.pending[state.keep]
                _write_into(data[torn.ino], torn.offset, torn.data[: state.cut])
        elif kind in ("pages", "garble"):
            rng = random.Random(state.seed)
            for ino in sorted({p.ino for p in self.pending if p.kind in _DATA_OPS}):
                data[ino] = self._reordered(ino, kind, rng)
            dir_ops = [p for p in self.pending if p.kind in _DIR_OPS]
            for op in dir_ops[: rng.randint(0, len(dir_ops))]:
                _apply_dir(op, names, dirs)
        elif kind == "undo_dirs":
            for op in self.pending:
                if op.kind in _DATA_OPS:
                    _apply_data(op, data)
        # A file whose directory's own entry never became durable is lost with it.
        files = {
            path: bytes(data[ino])
            for path, ino in names.items()
            if all(d in dirs for d in _ancestors(_parent(path)))
        }
        return Image(files, frozenset(dirs))

    def _reordered(self, ino: int, kind: str, rng: random.Random) -> bytearray:
        """File ``ino`` after its unsynced pages (sectors) reached the disk in any order.

        Only bytes that unsynced ops changed are at stake: writing part of a sector
        never damages the rest of it (the "powersafe overwrite" property SQLite
        assumes of modern disks), so durable bytes sharing a sector stay intact.
        """
        old = self.inodes[ino].durable
        new = self.inodes[ino].data
        unit = PAGE_SIZE if kind == "pages" else SECTOR_SIZE
        dirty: list[tuple[int, int]] = []
        for op in self.pending:
            if op.ino == ino and op.kind == "write":
                dirty.append((op.offset, op.offset + len(op.data)))
            elif op.ino == ino and op.kind == "truncate":
                dirty.append((min(op.offset, len(old)), max(op.offset, len(old), len(new))))
        size = len(new) if kind == "garble" or rng.random() < 0.5 else len(old)
        out = bytearray(old[:size])
        out.extend(bytes(size - len(out)))
        units = sorted({u for lo, hi in dirty for u in range(lo // unit, -(-hi // unit))})
        for index in units:
            garbled = kind == "garble" and rng.random() < GARBLE_FRACTION
            keep_new = not garbled and rng.random() < 0.5
            if not (garbled or keep_new):
                continue
            for lo, hi in dirty:
                lo, hi = max(lo, index * unit), min(hi, (index + 1) * unit, size)
                if lo < hi:
                    chunk = rng.randbytes(hi - lo) if garbled else new[lo:hi]
                    out[lo : lo + len(chunk)] = chunk
        return out


def _apply_data(op: Op, data: dict[int, bytearray]) -> None:
    if op.kind == "write":
        _write_into(data[op.ino], op.offset, op.data)
    elif op.kind == "truncate":
        _truncate(data[op.ino], op.offset)


def _apply_dir(op: Op, names: dict[str, int], dirs: set[str]) -> None:
    if op.kind == "create":
        names[op.path] = op.ino
    elif op.kind == "rename":
        if names.get(op.path) == op.ino:
            del names[op.path]
        names[op.dst] = op.ino
    elif op.kind == "remove":
        if names.get(op.path) == op.ino:
            del names[op.path]
    elif op.kind == "mkdir":
        dirs.add(op.path)


def _apply_any(op: Op, data: dict[int, bytearray], names: dict[str, int], dirs: set[str]) -> None:
    if op.kind in _DATA_OPS:
        _apply_data(op, data)
    else:
        _apply_dir(op, names, dirs)


# -- the FileSystem ---------------------------------------------------------------------------


class SimFS(FileSystem):
    """settee's io layer over a simulated disk that can crash (see the module docstring).

    Thread-safe: one lock orders every call, which also gives the trace its order.
    ``labeler`` (if set) is called on every op to name what the engine was doing.
    """

    def __init__(
        self,
        image: Image | None = None,
        *,
        crash_at: int | None = None,
        strict_mkdir: bool = False,
        fail_fsync_at: int | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._disk = _Disk(image, strict_mkdir)
        self.base = image if image is not None else Image({})
        self.strict_mkdir = strict_mkdir
        self.trace: list[Op] = []
        self.crash_at = crash_at
        self.crashed = False
        self.fail_fsync_at = fail_fsync_at
        #: File fsyncs asked for so far (the failing one included).
        self.fsyncs = 0
        self.labeler: Callable[[], str] | None = None

    @classmethod
    def replay(cls, base: Image, ops: Iterable[Op], *, strict_mkdir: bool = False) -> SimFS:
        """A file system in the state ``ops`` (a trace prefix) left ``base`` in."""
        fs = cls(base, strict_mkdir=strict_mkdir)
        for op in ops:
            fs.advance(op)
        return fs

    def advance(self, op: Op) -> None:
        """Apply one more op of a recorded trace (as ``replay`` does)."""
        with self._lock:
            self._disk.apply(op)
            self.trace.append(op)

    # -- crashing --------------------------------------------------------------------------

    @property
    def op_count(self) -> int:
        """Ops applied so far: a crash now is a crash "at step ``op_count``"."""
        with self._lock:
            return len(self.trace)

    @property
    def pending(self) -> list[Op]:
        """Ops not yet durable, in issue order."""
        with self._lock:
            return list(self._disk.pending)

    def halt(self) -> None:
        """Crash now: every later call raises ``SimulatedCrash``."""
        with self._lock:
            self.crashed = True

    def image(self, state: CrashState | None = None) -> Image:
        """The durable image after a crash in ``state`` (default: ``drop``)."""
        with self._lock:
            return self._disk.image(state or CrashState("drop"))

    def crash(self, state: CrashState | str, rng: random.Random | None = None) -> SimFS:
        """Halt this file system and return a new one holding the crash image.

        ``state`` is a ``CrashState`` or a kind, whose parameters are then drawn
        from ``rng``.
        """
        if isinstance(state, str):
            state = self.random_state(state, rng or random.Random(0))
        self.halt()
        return SimFS(self.image(state), strict_mkdir=self.strict_mkdir)

    def random_state(self, kind: str, rng: random.Random) -> CrashState:
        """One crash state of ``kind`` with parameters drawn from ``rng``."""
        states = self.crash_states(kind, rng, samples=1)
        return rng.choice(states)

    def crash_states(self, kind: str, rng: random.Random, *, samples: int) -> list[CrashState]:
        """Crash states of ``kind`` worth checking now.

        ``prefix``: every prefix; torn kinds: for every pending write, ``samples``
        cut points (always including the first and last byte or sector); ``pages``
        and ``garble``: ``samples`` seeds; ``drop``/``undo_dirs``: the one state.
        """
        pending = self.pending
        if kind in ("drop", "undo_dirs"):
            return [CrashState(kind)]
        if kind == "prefix":
            return [CrashState(kind, keep=k) for k in range(len(pending) + 1)]
        if kind in ("pages", "garble"):
            if not any(p.kind in _DATA_OPS for p in pending):
                return [CrashState(kind, seed=0)]
            return [CrashState(kind, seed=rng.getrandbits(32)) for _ in range(samples)]
        states = []
        for keep, op in enumerate(pending):
            if op.kind != "write" or len(op.data) < 2:
                continue
            for cut in _cuts(op, kind, rng, samples):
                states.append(CrashState(kind, keep=keep, cut=cut))
        return states or [CrashState("drop")]

    # -- ops -------------------------------------------------------------------------------

    def _check(self) -> None:
        if self.crashed:
            raise SimulatedCrash("the simulated machine crashed")

    def _do(self, op: Op) -> None:
        with self._lock:
            self._check()
            if self.crash_at is not None and len(self.trace) >= self.crash_at:
                self.crashed = True
                raise SimulatedCrash(f"crash at step {len(self.trace)}: {op.describe()}")
            if self.labeler is not None:
                op = Op(op.kind, op.path, op.ino, op.offset, op.data, op.dst, self.labeler())
            self._disk.apply(op)
            self.trace.append(op)

    def open(self, path: str, *, create: bool) -> FileHandle:
        with self._lock:
            self._check()
            ino = self._disk.names.get(path)
            if ino is None:
                if not create or _parent(path) not in self._disk.dirs:
                    raise FileNotFoundError(path)
                ino = self._disk.next_ino()
                self._do(Op("create", path, ino))
            return SimHandle(self, path, ino)

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            self._check()
            if src not in self._disk.names:
                raise FileNotFoundError(src)
            self._do(Op("rename", src, self._disk.names[src], dst=dst))

    def remove(self, path: str) -> None:
        with self._lock:
            self._check()
            if path not in self._disk.names:
                raise FileNotFoundError(path)
            self._do(Op("remove", path, self._disk.names[path]))

    def listdir(self, path: str) -> list[str]:
        with self._lock:
            self._check()
            path = path.rstrip("/") or "/"
            entries = [*self._disk.names, *self._disk.dirs]
        return sorted({os.path.basename(p) for p in entries if p != "/" and _parent(p) == path})

    def fsync_dir(self, path: str) -> None:
        self._do(Op("fsync_dir", path.rstrip("/") or "/"))

    def file_identity(self, path: str) -> Hashable:
        with self._lock:
            self._check()
            if path not in self._disk.names:
                raise FileNotFoundError(path)
            return self._disk.names[path]  # its inode number

    def exists(self, path: str) -> bool:
        with self._lock:
            self._check()
            path = path.rstrip("/") or "/"
            return path in self._disk.names or path in self._disk.dirs

    def makedirs(self, path: str) -> None:
        with self._lock:
            self._check()
            for d in _ancestors(path):
                if d in self._disk.names:
                    raise FileExistsError(d)
                if d not in self._disk.dirs:
                    self._do(Op("mkdir", d))

    # -- used by SimHandle -----------------------------------------------------------------

    def _fsync(self, path: str, ino: int) -> None:
        with self._lock:
            self._check()
            n, self.fsyncs = self.fsyncs, self.fsyncs + 1
            if n != self.fail_fsync_at:
                self._do(Op("fsync", path, ino))
                return
            self._do(Op("fsync_failed", path, ino))
        raise OSError(errno.EIO, os.strerror(errno.EIO), path)

    def _read(self, ino: int, offset: int, size: int) -> bytes:
        with self._lock:
            self._check()
            return bytes(self._disk.inodes[ino].data[offset : offset + size])

    def _size(self, ino: int) -> int:
        with self._lock:
            self._check()
            return len(self._disk.inodes[ino].data)

    def _append(self, path: str, ino: int, data: bytes) -> int:
        with self._lock:
            self._check()
            start = len(self._disk.inodes[ino].data)
            self._do(Op("write", path, ino, start, bytes(data)))
            return start


class SimHandle(FileHandle):
    """An open file of a ``SimFS``: it names an inode, so renames do not affect it."""

    def __init__(self, fs: SimFS, path: str, ino: int) -> None:
        self.path = path
        self._fs = fs
        self._ino = ino

    def pread(self, offset: int, size: int) -> bytes:
        return self._fs._read(self._ino, offset, size)

    def append(self, data: bytes) -> int:
        return self._fs._append(self.path, self._ino, data)

    def pwrite(self, offset: int, data: bytes) -> None:
        self._fs._do(Op("write", self.path, self._ino, offset, bytes(data)))

    def fsync(self) -> None:
        self._fs._fsync(self.path, self._ino)

    def truncate(self, size: int) -> None:
        self._fs._do(Op("truncate", self.path, self._ino, size))

    def size(self) -> int:
        return self._fs._size(self._ino)

    def file_identity(self) -> Hashable:
        return self._ino

    def close(self) -> None:
        # Closing releases nothing on disk, so it works even after a crash: the
        # engine's cleanup after a SimulatedCrash must not fail a second time.
        pass


def _cuts(op: Op, kind: str, rng: random.Random, samples: int) -> list[int]:
    """Byte counts of ``op``'s data to keep when it is torn: ``samples`` of them,
    the first and last possible cut always among them when ``samples >= 2``."""
    n = len(op.data)
    if kind == "torn_byte":
        bounds: list[int] | range = range(1, n)
    else:
        first = (op.offset // SECTOR_SIZE + 1) * SECTOR_SIZE - op.offset
        bounds = range(first, n, SECTOR_SIZE)
    if len(bounds) <= samples:
        return list(bounds)
    if samples == 1:
        return [rng.choice(bounds)]
    return sorted({bounds[0], bounds[-1], *rng.sample(bounds, samples - 2)})
