"""HEADS: where each shard's newest durable commit is, for readers in other processes.

``<path>/HEADS`` holds one slot per shard at offset ``SLOT_SIZE * index``
(FORMAT.md "HEADS"): the file offset of the shard file's newest header whose
fsync has returned, that header's seq, the generation of the file (a number
the writer changes whenever a compaction puts a new file at the path: the
copy's header may sit at an offset the old file's header once had, so a reader
checks the seq of what it finds there), and a crc32c of them. The
writer process rewrites a shard's slot after every commit's header fsync,
before the commit is published or acknowledged, and after opening and after a
compaction swap. A process that
opened the database with ``readonly=True`` reads the slots on each call and
reads up to the commit a slot names, never past it: a commit whose fsync has
not returned stays invisible to it, as it does to the writer's own readers.

The file is a hint, never fsynced and never trusted alone. A slot that fails
its crc is read again until two reads agree (a read racing the writer's
``pwrite`` tears it about once in a hundred on ext4); a slot that is missing,
still fails after ``READ_TRIES`` reads, or names no valid header of the shard
file, sends the reader back to the newest valid header it finds by scanning
the file (what ``settee.open`` does). Nothing else reads it; deleting it loses nothing.

A reader whose HEADS was deleted and recreated by a writer that reopened notices
within ``RECHECK_SECONDS`` and reopens it; until then it may lag behind.

It lives on the real file system only (``OsFileSystem``): other processes are
what it is for. A database on another ``FileSystem`` (the proof's simulated
disks) publishes nothing, and its readonly readers scan. A failed ``pwrite``
of a slot does not fail the commit, which is already durable; the writer
retries on the next commit, and until then readers in other processes may
lag behind by the commits since the last slot that reached the file.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
from typing import NamedTuple

import crc32c

from settee.io import open_regular
from settee.spec.errors import SetteeError

__all__ = ["HEADS_NAME", "SLOT_SIZE", "HeadsFile", "Slot"]

HEADS_NAME = "HEADS"
#: How often a reader checks that its open HEADS is still the one at the path.
RECHECK_SECONDS = 0.2
# u64 LE header offset, u64 LE the header's seq, u32 LE file generation, 8 zero
# bytes, u32 LE crc32c of the 28 bytes before it: 32 bytes, so no slot straddles
# a page (a read racing a write tears less often; a torn slot fails its crc).
_SLOT = struct.Struct("<QQI8xI")
SLOT_SIZE = _SLOT.size
# Offsets a pread can take.
_MAX_OFFSET = 2**63 - 1


class Slot(NamedTuple):
    """One shard's newest durable commit, as its writer published it."""

    #: The file at the shard's path: random when the writer opens, +1 per compaction swap.
    generation: int
    #: Where the commit's header starts in that file.
    offset: int
    #: The commit's update seq: a header at ``offset`` with another seq is not this commit.
    seq: int


#: Reads of the slots ``read`` and ``read_all`` make at most, looking for two that
#: agree (a slot read while the writer rewrites it can come out torn).
READ_TRIES = 8


class HeadsFile:
    """The HEADS file of one database directory, open for publishing or for reading."""

    def __init__(self, path: str, *, writer: bool) -> None:
        self.path = os.path.join(path, HEADS_NAME)
        self._writer = writer
        self._fd: int | None = None
        self._open_lock = threading.Lock()  # readers open the file lazily, once
        self._closed = False
        # Descriptors of replaced HEADS files (and the open one, after close()),
        # closed once no pread is in flight (``_readers``): a number closed under a
        # pread could be reused by another open and read from the wrong file.
        self._retired: list[int] = []
        self._readers = 0
        self._checked = time.monotonic()
        if writer:
            self._fd = _open_for_publishing(self.path)

    def publish(self, index: int, slot: Slot) -> None:
        """Name ``slot`` shard ``index``'s newest durable commit (writer only)."""
        assert self._writer and self._fd is not None  # invariant: only the writer publishes
        fields = _SLOT.pack(slot.offset, slot.seq, slot.generation, 0)[:-4]  # crc last
        raw = fields + crc32c.crc32c(fields).to_bytes(4, "little")
        with contextlib.suppress(OSError):  # a hint: see the module docstring
            os.pwrite(self._fd, raw, SLOT_SIZE * index)

    def read(self, index: int) -> Slot | None:
        """Shard ``index``'s slot, or None when there is no valid slot (no HEADS file,
        a short slot, a crc mismatch that two reads agree on)."""
        raw = self._pread(SLOT_SIZE, SLOT_SIZE * index)
        slot = None if raw is None else _slot(raw, 0)
        if slot is None and raw:
            # Torn by a write in flight, or garbage: garbage reads the same twice.
            [slot], _ = self._agreed(SLOT_SIZE, SLOT_SIZE * index, raw)
        return slot

    def read_all(self, count: int) -> list[Slot | None]:
        """The slots of shards ``0 .. count-1`` as of one instant (``read`` of each).

        One ``pread`` is not atomic against the writer's ``pwrite`` s, so the
        slots are read until two reads agree: a slot only ever moves forward
        (offsets grow, a swap changes the generation), so each slot held its
        value from the first read to the second, and all of them at the
        instant between. A writer publishing again within every two preads
        for ``READ_TRIES`` reads is not waited for: the last read is used, its
        torn slots read again one by one, and the cut may then not be one instant."""
        first = self._pread(SLOT_SIZE * count, 0)
        if first is None:
            return [None] * count
        slots, agreed = self._agreed(SLOT_SIZE * count, 0, first)
        if agreed:
            return slots
        return [self.read(i) if slot is None else slot for i, slot in enumerate(slots)]

    def _agreed(self, size: int, offset: int, raw: bytes) -> tuple[list[Slot | None], bool]:
        """The slots in ``size`` bytes at ``offset``, read (after ``raw``) until two
        reads agree, and whether two did."""
        agreed = False
        for _ in range(READ_TRIES):
            again = self._pread(size, offset)
            if again is None:
                break
            agreed, raw = again == raw, again
            if agreed:
                break
        return [_slot(raw, at) for at in range(0, size, SLOT_SIZE)], agreed

    def _pread(self, size: int, offset: int) -> bytes | None:
        fd = self._enter()
        if fd is None:
            return None  # no writer has published yet: readers scan the file
        try:
            return os.pread(fd, size, offset)
        except OSError:  # not a readable file (a directory, an I/O error): no slot
            return None
        finally:
            self._leave()

    def _enter(self) -> int | None:
        """The descriptor to read, held open until ``_leave``; None without one."""
        if self._fd is not None and time.monotonic() - self._checked > RECHECK_SECONDS:
            self._retire_if_replaced()
        with self._open_lock:
            if self._fd is None and not self._closed:  # never reopened after close()
                try:
                    # Never blocking: a FIFO here made a readonly open wait forever.
                    self._fd = open_regular(self.path, os.O_RDONLY)
                except OSError:
                    return None
            if self._fd is not None:
                self._readers += 1
            return self._fd

    def _leave(self) -> None:
        with self._open_lock:
            self._readers -= 1
            self._close_retired()

    def _retire_if_replaced(self) -> None:
        """Retire the open HEADS when the path now holds another file (deleted and
        recreated by a writer that reopened): the old one is never written again."""
        self._checked = time.monotonic()
        with self._open_lock:
            fd = self._fd
            if fd is None:
                return
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except OSError:
                same = False
            if not same:
                self._retired.append(fd)
                self._fd = None
                self._close_retired()

    def _close_retired(self) -> None:
        """Close the retired descriptors once no pread is in flight (under the lock)."""
        if not self._readers:
            for fd in self._retired:
                os.close(fd)
            self._retired.clear()

    def close(self) -> None:
        with self._open_lock:
            self._closed = True
            if self._fd is not None:
                self._retired.append(self._fd)
                self._fd = None
            self._close_retired()


def _open_for_publishing(path: str) -> int:
    """The writer's descriptor of the HEADS file at ``path``, created if missing.

    Never through a symlink (``O_NOFOLLOW``): the writer rewrites slots in place,
    so a HEADS linked to a shard file had its slots written over that shard's
    first bytes, and a dangling link made a file wherever it pointed (found by
    probing damaged directories). The link is left as it is: SetteeError, and
    the writer goes on without publishing (readers scan the shard files). A HEADS
    with another name (a hard link, to a shard file say) is left alone the same way."""
    try:
        fd = open_regular(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW)
    except OSError as exc:
        if os.path.islink(path):
            raise SetteeError(
                f"{path} is a symlink, which the writer does not write through; "
                "remove it to let readonly readers follow the writer"
            ) from exc
        raise SetteeError(f"{path}: cannot open for writing: {exc}") from exc
    try:
        links = os.fstat(fd).st_nlink
    except OSError as exc:
        os.close(fd)
        raise SetteeError(f"{path}: cannot open for writing: {exc}") from exc
    if links > 1:
        os.close(fd)
        raise SetteeError(
            f"{path} has {links} names (a hard link), so its slots would be written into "
            "another file too; remove it to let readonly readers follow the writer"
        )
    return fd


def _slot(raw: bytes, at: int) -> Slot | None:
    """The slot at ``raw[at:]``, or None when it is short or fails its crc."""
    fields = raw[at : at + SLOT_SIZE]
    if len(fields) != SLOT_SIZE:
        return None
    offset, seq, generation, crc = _SLOT.unpack(fields)
    if crc32c.crc32c(fields[:-4]) != crc or offset > _MAX_OFFSET:
        return None
    return Slot(generation, offset, seq)
