"""The commit walker: how settee finds and follows the commits of a shard file.

Every reader of commits goes through here (spec/FORMAT.md "Finding the newest
valid header" and "Walking the commits"):

* ``newest_header`` is the backward scan of block markers that
  ``ShardFile.open`` uses to find the newest header whose crc holds;
* ``walk`` yields every commit of a file oldest to newest by following each
  header's ``prev`` back from the newest one, with the frames of each
  commit's data region ``[data_start, header offset)``, and *findings* on the
  way: a **problem** is damage, a **note** is a torn tail that recovery kept
  (bytes between one header's end and the next commit's ``data_start``, or
  after the newest header). As LevelDB's log reader, the walker reports
  damaged bytes and goes on: a bad frame ends its own region only, and a
  ``prev`` header that does not verify is reported and replaced by the
  backward marker scan from there.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from settee.io import FileHandle
from settee.spec.errors import CorruptionError
from settee.spec.format import (
    BLOCK_DATA,
    BLOCK_HEADER,
    BLOCK_SIZE,
    FORMAT_VERSION,
    HEADER_SIZE,
    ShardHeader,
    decode_header,
    header_size,
    laid_out_size,
    padding_size,
    strip_markers,
    term_position,
)

if TYPE_CHECKING:
    from settee.file import ShardFile

__all__ = [
    "Commit",
    "Finding",
    "Frame",
    "RawHeader",
    "header_candidates",
    "newest_header",
    "read_header_at",
    "walk",
]

#: The backwards header scan reads markers in windows growing to this many blocks, so
#: the common case (header in the last block) costs one small pread, and a long torn tail
#: costs a few large ones rather than one per block.
_SCAN_MAX_BLOCKS = 256


@dataclass(frozen=True, slots=True)
class RawHeader:
    """A complete header whose crc holds: where it is, its version, its payload bytes."""

    offset: int
    end: int
    version: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Frame:
    """One verified frame: its term position and the file offset after its laid-out bytes."""

    pos: int
    end: int


@dataclass(frozen=True, slots=True)
class Commit:
    """One commit: its header at ``offset`` (ending at ``end``) and its data region's frames."""

    header: ShardHeader
    offset: int
    end: int
    frames: tuple[Frame, ...]


@dataclass(frozen=True, slots=True)
class Finding:
    """Something the walker saw: damage (``problem``) or a kept torn tail (``note``)."""

    kind: Literal["problem", "note"]
    path: str
    offset: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.offset}: {self.what}"


# -- finding headers ----------------------------------------------------------------------------


def read_header_at(handle: FileHandle, offset: int, size: int) -> RawHeader | None:
    """The complete header at ``offset`` of a file of ``size`` bytes, if its crc holds."""
    if offset + 1 + HEADER_SIZE > size:
        # No header fits there. Decided before reading: a HEADS slot can name any
        # offset below 2**63, and a pread reaching past that is EINVAL, not b"".
        return None
    raw = handle.pread(offset, BLOCK_SIZE)
    if len(raw) < 1 + HEADER_SIZE or raw[0] != BLOCK_HEADER:
        return None  # torn inside the fixed fields, or not a header block
    try:
        span = 1 + laid_out_size(offset + 1, header_size(raw[1 : 1 + HEADER_SIZE]))
    except CorruptionError:
        return None  # wrong magic: a flipped marker, not a header
    if offset + span > size:
        return None  # torn: the header runs past the end of the file
    if span > len(raw):
        raw += handle.pread(offset + len(raw), span - len(raw))
    logical, markers = strip_markers(raw[1:span], offset + 1)
    if markers.count(BLOCK_DATA) != len(markers):
        return None
    try:
        version, payload = decode_header(logical, path=handle.path, offset=offset)
    except CorruptionError:
        return None
    return RawHeader(offset, offset + span, version, payload)


def header_candidates(handle: FileHandle, size: int, below: int | None = None) -> Iterator[int]:
    """Offsets of blocks whose marker is HEADER, newest first, starting before ``below``.
    A hole at the end of the file reads as zeros, so the scan starts where its data
    ends (``FileHandle.data_end``)."""
    hi = -(-handle.data_end(size if below is None else below) // BLOCK_SIZE) * BLOCK_SIZE
    blocks = 1
    while hi > 0:
        lo = max(0, hi - blocks * BLOCK_SIZE)
        window = handle.pread(lo, hi - lo)
        for offset in range(hi - BLOCK_SIZE, lo - 1, -BLOCK_SIZE):
            if offset - lo < len(window) and window[offset - lo] == BLOCK_HEADER:
                yield offset
        hi, blocks = lo, min(2 * blocks, _SCAN_MAX_BLOCKS)


def newest_header(handle: FileHandle, size: int) -> RawHeader | None:
    """The newest header of the file whose crc holds (of any version), or None."""
    for offset in header_candidates(handle, size):
        found = read_header_at(handle, offset, size)
        if found is not None:
            return found
    return None


# -- walking the commits ------------------------------------------------------------------------


def walk(file: ShardFile) -> Iterator[Commit | Finding]:
    """Every commit of ``file`` oldest to newest, with the findings between them in file order.

    Starts from the header ``ShardFile.open`` found (a file without one is all tail).
    """
    size = file.size()
    newest = None if file.header_offset is None else _verified(file, file.header_offset, size)
    if isinstance(newest, Finding):
        yield newest
        return
    last_end: int | None = 0  # where the previous header ends; None after a damaged one
    for link in reversed(list(_chain(file, newest, size))):
        if isinstance(link, Finding):
            yield link
            last_end = None
            continue
        yield from _walk_commit(file, link, last_end)
        last_end = link.end
    if last_end is not None and size > last_end:
        yield _note(file, last_end, size, "after the newest header")


def _chain(file: ShardFile, link: Commit | None, size: int) -> Iterator[Commit | Finding]:
    """Commits (without frames) newest to oldest by ``prev``, the scan filling in damage."""
    while link is not None:
        yield link
        prev = link.header.prev
        if prev is None:
            return
        found = _verified(file, prev, size)
        if isinstance(found, Commit):
            link = found
            continue
        yield Finding(
            "problem",
            file.path,
            prev,
            f"previous header of the header at {link.offset} does not verify "
            f"({found.what}); the data of its commit is not checked",
        )
        link = yield from _scan_below(file, prev, size)


def _scan_below(file: ShardFile, below: int, size: int) -> Generator[Finding, None, Commit | None]:
    """The fallback after a damaged ``prev``: a finding for each damaged header block before
    ``below``, newest first; returns the newest header there that verifies, or None."""
    for offset in header_candidates(file.handle, size, below):
        found = _verified(file, offset, size)
        if isinstance(found, Commit):
            return found
        yield found
    return None


def _verified(file: ShardFile, offset: int, size: int) -> Commit | Finding:
    """The header at ``offset`` as a frameless Commit, or the problem that stops it."""
    raw = read_header_at(file.handle, offset, size)
    if raw is None:
        return Finding("problem", file.path, offset, "header block whose header does not verify")
    if raw.version != FORMAT_VERSION:
        return Finding("problem", file.path, offset, f"header of format version {raw.version}")
    try:
        header = ShardHeader.parse(raw.payload, path=file.path, offset=offset)
    except CorruptionError as exc:
        return Finding("problem", file.path, offset, exc.detail)
    return Commit(header, raw.offset, raw.end, ())


def _walk_commit(file: ShardFile, link: Commit, last_end: int | None) -> Iterator[Commit | Finding]:
    """Findings before and inside ``link``'s data region, then the commit with its frames."""
    start = link.header.data_start
    if last_end is not None and start < last_end:
        what = f"data_start {start} of the header at {link.offset} overlaps the previous header"
        yield Finding("problem", file.path, start, f"{what} (which ends at {last_end})")
        yield link
        return
    if last_end is not None and start > last_end:
        yield _note(file, last_end, start, f"before the commit of the header at {link.offset}")
    frames: list[Frame] = []
    for item in _frames(file, start, link.offset):
        if isinstance(item, Frame):
            frames.append(item)
        else:
            yield item
    yield Commit(link.header, link.offset, link.end, tuple(frames))


def _frames(file: ShardFile, start: int, stop: int) -> Iterator[Frame | Finding]:
    """The frames of the data region ``[start, stop)``, contiguous from ``term_position(start)``
    up to the zero padding before the header at ``stop``; the first damage ends the region.

    A frame cannot verify past ``stop``: it would cross the header's HEADER marker."""
    pos = start
    while pos < stop and not _is_padding(file.handle, pos, stop):
        if pos % BLOCK_SIZE == 0:
            marker = file.handle.pread(pos, 1)
            if marker != bytes([BLOCK_DATA]):
                yield Finding("problem", file.path, pos, f"bad block marker {marker.hex()}")
                return
        term = term_position(pos)
        try:
            pos = file.read_frame(term)[1]
        except CorruptionError as exc:
            # Name the frame that fails: a damaged length field makes the reader
            # trip over a marker far from the flipped bit.
            where = "" if exc.offset == term else f" (noticed at offset {exc.offset})"
            yield Finding("problem", file.path, term, f"frame does not verify: {exc.detail}{where}")
            return
        yield Frame(term, pos)


def _is_padding(handle: FileHandle, pos: int, stop: int) -> bool:
    """Zeros from ``pos`` up to the header at ``stop``, the next block boundary: the pad
    ``write_header`` adds. (No frame starts with 8 zero bytes: its crc would be wrong.)"""
    if pos % BLOCK_SIZE == 0 or pos + padding_size(pos) != stop:
        return False
    return handle.pread(pos, stop - pos) == bytes(stop - pos)


def _note(file: ShardFile, start: int, end: int, where: str) -> Finding:
    what = f"{end - start} bytes of kept torn tail {where} (ignored by recovery, never truncated)"
    return Finding("note", file.path, start, what)
