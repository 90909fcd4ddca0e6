"""ShardFile: an append-only file of checksummed terms and headers (spec/FORMAT.md).

The writer appends batches of terms and then a header (a ``ShardHeader``)
pointing at them; readers read terms by position from any thread. Opening finds
the newest header whose checksum holds by scanning block boundaries backwards
from the end, as CouchDB's ``couch_file`` does (``settee.walker``). Bytes after
that header (a torn or uncommitted tail) are ignored with a ``TornTailWarning``
and never truncated or overwritten: they may be the only copy of something a
person wants back. The next header records where its commit's data began
(``data_start``, after any such tail) and where the previous header is
(``prev``), so the checker can walk every commit without mistaking a kept tail
for damage.

The ShardFile has no opinion on durability: the writer calls
``write_batch, sync, write_header, sync`` in that order.
"""

from __future__ import annotations

import itertools
import operator
import struct
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from crc32c import crc32c
from msgpack import unpackb

from settee.cache import BODY_ENTRY_OVERHEAD, BodyCache
from settee.io import FileHandle, FileSystem
from settee.spec.errors import CorruptionError, SetteeError
from settee.spec.format import (
    BLOCK_DATA,
    BLOCK_HEADER,
    BLOCK_SIZE,
    FORMAT_VERSION,
    FRAME,
    FRAME_SIZE,
    HEADER_SIZE,
    MAGIC,
    MAX_PAYLOAD,
    ShardHeader,
    decode_frame,
    decode_node_payload,
    decode_payload,
    encode_frame,
    encode_header,
    encode_payload,
    frame_size,
    laid_out_size,
    lay_out,
    padding_size,
    strip_markers,
    term_position,
)
from settee.walker import newest_header, read_header_at

__all__ = ["READ_AHEAD", "LostCommitWarning", "ShardFile", "TermBatch", "TornTailWarning"]

#: Bytes the first pread of ``read_term`` asks for. Tree nodes are ~4 KiB and most
#: bodies are smaller, so nearly every term arrives in one pread; longer terms need one more.
READ_AHEAD = 2 * BLOCK_SIZE

#: How ``read_sized``'s fast path and the body cache decode a payload: msgpack's
#: ``unpackb`` with its defaults (msgpack >= 1.0: ``raw=False``, ``strict_map_key=True``),
#: a sixth cheaper per body than ``decode_payload``'s keyword options. Equal to
#: ``decode_payload`` on every term read by size (document bodies, whose keys are
#: JSON's strs, and attachment chunks, which are bytes); a term with other map keys
#: (a writer bug the crc cannot see) raises here and the general path decodes it
#: with ``decode_payload``, so the answer is the same.
_decode_body = unpackb
_payload_of = operator.itemgetter(0)
_ONLY_INT = {int}

#: A frame's length field, as ``spec.format.encode_frame`` packs it for the crc.
_LENGTH = struct.Struct("<I")

#: ``read_sized``'s mark for a term its fast path leaves to the general one.
_MISSED = object()
#: The marker byte of a block that continues a frame.
_DATA_MARKER = bytes([BLOCK_DATA])


#: How a frame's payload becomes an object: ``decode_payload`` or ``decode_node_payload``.
Decode = Callable[[bytes], Any]


class TornTailWarning(UserWarning):
    """Opening ignored bytes after the newest valid header (an uncommitted or torn tail)."""


class LostCommitWarning(TornTailWarning):
    """The newest valid header is older than a commit HEADS names as durable, whose
    header is there but damaged: the commits after it are lost (FORMAT.md
    ``bad_crc_in_header``), and only a backup has them."""


#: Bytes a batch made by ``ShardFile.new_batch`` buffers before it appends them
#: early: a commit carrying a large attachment (or a compaction copying many) is
#: written as it is built, never held whole in memory. Early bytes are part of the
#: commit's data like the rest; until its header is written they are an
#: uncommitted tail, exactly as if the batch had been written in one piece.
SPILL_BYTES = 1 << 20

#: How a batch appends its early bytes: ``(offset they must land at, bytes)``.
Spill = Callable[[int, bytes], None]


@dataclass(slots=True)
class TermBatch:
    """Terms to append in one write. ``add`` returns each term's final file position.

    A batch is made for the file's current end; writing another batch first makes
    this one stale (``write_batch`` refuses it). With a ``spill`` the batch appends
    what it holds whenever that reaches ``SPILL_BYTES``; ``pending_from`` is where
    the bytes it still holds begin.
    """

    start: int
    end: int
    spill: Spill | None = None
    pending_from: int = -1
    _parts: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.pending_from < 0:
            self.pending_from = self.start

    def add(self, obj: Any) -> int:
        """Queue ``obj`` (anything msgpack holds); return the position it will have."""
        return self.add_encoded(encode_payload(obj))

    def add_encoded(self, payload: bytes) -> int:
        """Queue a payload already made by ``encode_payload``; return its position."""
        end = self.end
        offset = end % BLOCK_SIZE
        if offset and offset + FRAME_SIZE + len(payload) <= BLOCK_SIZE:
            # encode_frame and lay_out, inline, for a frame that ends in the block it
            # begins in (most bodies, every node that fits): no marker to insert, and
            # the call pair was a tenth of a commit's writer time.
            n = len(payload)
            laid = FRAME.pack(n, crc32c(payload, crc32c(_LENGTH.pack(n)))) + payload
            pos = end
        else:
            laid = lay_out(encode_frame(payload), end)
            pos = term_position(end)
        self._parts.append(laid)
        self.end = end + len(laid)
        if self.spill is not None and self.end - self.pending_from >= SPILL_BYTES:
            self.spill(self.pending_from, self.data())
            self._parts.clear()
            self.pending_from = self.end
        return pos

    def __len__(self) -> int:
        """Bytes this batch appends in all (early ones included)."""
        return self.end - self.start

    def data(self) -> bytes:
        """The exact bytes still to append, at ``pending_from``."""
        return b"".join(self._parts)


class ShardFile:
    """One shard's append-only file. Reads are lock-free; one thread writes."""

    path: str
    #: The newest valid header; None for a file with no header yet.
    header: ShardHeader | None
    #: File offset of the newest valid header (its HEADER marker), or None.
    header_offset: int | None
    #: True when ``open`` created the file; the caller should then fsync the directory.
    created: bool

    def __init__(self, handle: FileHandle, *, created: bool) -> None:
        """Use ``ShardFile.open``; this wraps an already open handle without scanning it."""
        self.path = handle.path
        self._handle = handle
        self._end = handle.size()
        # Where the next commit's data begins: the end of the file as the last header
        # (or opening) left it, after any kept tail.
        self._data_start = self._end
        self._closed = False
        self._reads = _ReadsInFlight()
        self.header = None
        self.header_offset = None
        self.created = created
        #: Checked body payloads ``read_sized`` keeps, or None; set by the file's owner
        #: (a shard, a readonly follower), which sizes it (``body_cache_bytes``).
        self.body_cache: BodyCache | None = None

    @classmethod
    def open(
        cls, fs: FileSystem, path: str, *, create: bool, tail_warning: bool = True
    ) -> ShardFile:
        """Open ``path``, find its newest valid header. Never writes to the file.

        Raises ``SetteeError`` when the file is missing (and not ``create``), is not a
        settee file, or has another FORMAT_VERSION. ``tail_warning=False`` for a
        reader following a live writer, whose uncommitted tail is no news.
        """
        try:
            handle, created = fs.open(path, create=False), False
        except FileNotFoundError:
            if not create:
                raise SetteeError(
                    f"{path}: no such shard file; pass create=True to make one"
                ) from None
            handle, created = _open(fs, path, create=True), True
        except OSError as exc:  # out of descriptors, permissions, ...
            raise SetteeError(f"{path}: cannot open the shard file: {exc}") from exc
        shard = cls(handle, created=created)
        try:
            tail_start = shard._load_newest_header()
        except OSError as exc:
            shard.close()
            raise SetteeError(f"{path}: reading the file failed: {exc}") from exc
        except BaseException:
            shard.close()
            raise
        if shard._end > tail_start and tail_warning:
            warnings.warn(
                TornTailWarning(
                    f"{path}: ignoring {shard._end - tail_start} bytes after offset "
                    f"{tail_start} (uncommitted or torn tail); the bytes are kept, not truncated"
                ),
                stacklevel=2,
            )
        return shard

    # -- reading --------------------------------------------------------------------------------

    def read_body(self, pos: int, size: int) -> Any:
        """``read_sized`` of one pointer, its body-cache hit inline: a plain get reads
        one body, and ``read_sized``'s lists and loop for it were a tenth of the get.
        A miss (or a size the cached payload disagrees with) takes ``read_sized``."""
        cache = self.body_cache
        if cache is not None and type(pos) is int:  # else the loop names the position
            hit = cache._entries.get(pos)
            if hit is not None and len(hit[0]) == size:
                reads = self._reads
                reads.enter(self.path)  # a closed file refuses, cached or not
                try:
                    term = _decode_body(hit[0])
                finally:
                    reads.leave()
                cache._referenced.add(pos)
                return term
        return self.read_sized([(pos, size)])[0]

    def read_term(self, pos: int, payload_size: int | None = None) -> Any:
        """The object stored at ``pos``; raises ``CorruptionError`` on any mismatch.

        Thread-safe without locks (pread only). One pread when the term fits in
        ``READ_AHEAD`` bytes (or in ``payload_size``, when the caller knows the
        payload's length: a body's pointer does), else exactly two. A wrong
        ``payload_size`` costs a second pread, never a wrong answer. An OS error
        (EIO, ...) becomes a ``SetteeError`` naming the file and offset.
        """
        if payload_size is None:
            return self.read_frame(pos)[0]
        return self.read_sized(((pos, payload_size),))[0]

    def read_sized(self, pointers: Iterable[tuple[int, int]]) -> list[Any]:
        """``read_term(pos, payload_size)`` of each pointer, in order: how document
        bodies are read. A frame the size puts within one block, or across one
        block boundary (its marker byte dropped), is cut from a coalesced pread:
        frames that lie one after another in the file (a commit writes its bodies
        in id order, so a range's bodies mostly do) are read in one pread of up to
        ``COALESCE_BYTES`` (``_run_end``), and ``decode_frame``'s checks are done
        inline (the crc as ``spec.format`` computes it) before the decode, all the
        pointers under one read registration: a pread per body cost a quarter of a
        range read. Anything that disagrees (a size no frame can have, a short read,
        a marker that is not a data block's, a failed check) goes to the general
        path, which reads the frame again and names the fault, so a wrong size is
        never a wrong answer."""
        if type(pointers) is not list:
            pointers = list(pointers)
        if self.body_cache is not None and len(pointers) > 1:  # one: the loop is as quick
            every = self._all_cached(self.body_cache, pointers)
            if every is not None:
                return every
        pread = self._handle.pread
        unpack_prefix = FRAME.unpack_from
        terms = []
        last = len(pointers) - 1
        buf, base, top = b"", 0, 0  # the last coalesced read: file bytes [base, top)
        pos = 0  # named by the error message
        cache = self.body_cache
        # BodyCache.get, inline (its two C calls): a hit is every hot body read.
        cached = refer = None
        if cache is not None:
            cached, refer = cache._entries.get, cache._referenced.add
        admitted: dict[int, tuple[bytes, int]] = {}
        admitted_bytes = 0
        self._reads.enter(self.path)
        try:
            for index, (pos, size) in enumerate(pointers):
                if type(pos) is not int:  # crc held: a writer bug
                    raise CorruptionError(self.path, 0, f"term position {pos!r} is not an int")
                if cached is not None:
                    hit = cached(pos)
                    # A size the pointer disagrees with goes the general way, as below.
                    if hit is not None and len(hit[0]) == size:
                        refer(pos)  # type: ignore[misc]  # set with cached
                        terms.append(_decode_body(hit[0]))
                        continue
                term = _MISSED
                # _fast_laid_out, inline: this loop is every body read.
                laid = 0
                if type(size) is int and 0 <= size <= MAX_PAYLOAD and pos > 0:
                    span, room = FRAME_SIZE + size, BLOCK_SIZE - pos % BLOCK_SIZE
                    if room == BLOCK_SIZE:
                        laid = 0
                    elif span <= room:
                        laid = span
                    elif span - room < BLOCK_SIZE:
                        laid = span + 1
                if laid:
                    if pos < base or pos + laid > top:
                        base, end = pos, pos + laid
                        if index < last:
                            # Coalesce only when the next frame follows this one.
                            following = pointers[index + 1][0]
                            if type(following) is int and 0 <= following - end <= _COALESCE_GAP:
                                end = _run_end(pointers, index, end)
                        buf = pread(pos, end - pos)
                        top = pos + len(buf)
                    frame, at = buf, pos - base
                    if laid != span:
                        # One marker byte inside, where the next block begins: cut it out.
                        frame = b""
                        if pos + laid <= top and buf[at + room] == BLOCK_DATA:
                            frame = buf[at : at + room] + buf[at + room + 1 : at + laid]
                        at = 0
                    # decode_frame's checks, inline: this loop is every body read.
                    if at + span <= len(frame):
                        length, crc = unpack_prefix(frame, at)
                        payload = frame[at + FRAME_SIZE : at + span]
                        if length == size and crc32c(payload, crc32c(frame[at : at + 4])) == crc:
                            try:
                                term = _decode_body(payload)
                            except Exception:  # crc held: left to the general path
                                term = _MISSED
                            else:
                                if cached is not None:
                                    charge = len(payload) + BODY_ENTRY_OVERHEAD
                                    admitted[pos] = (payload, charge)
                                    admitted_bytes += charge
                if term is _MISSED:
                    term = self._read_frame(pos, decode_payload, self._ahead(pos, size))[0]
                terms.append(term)
        except OSError as exc:
            raise SetteeError(f"{self.path}: read at offset {pos} failed: {exc}") from exc
        finally:
            self._reads.leave()
        if admitted:
            cache.admit(admitted, admitted_bytes)  # type: ignore[union-attr]  # only with a cache
        return terms

    def _all_cached(self, cache: BodyCache, pointers: list[tuple[int, int]]) -> list[Any] | None:
        """Every pointer's term from the body cache, or None when one is not cached
        (``read_sized``'s loop then reads the rest). In C calls but for the list of
        positions: on a hot range this was half of each body's cost. A pointer's
        size is not compared with the cached payload: the general path reads a
        frame whatever size its pointer claims, so its answer would be the same."""
        positions = [pos for pos, _ in pointers]
        if set(map(type, positions)) != _ONLY_INT:  # the loop names a bad position
            return None
        return self.cached_bodies(positions)

    def cached_bodies(self, positions: list[int]) -> list[Any] | None:
        """The terms of the bodies at ``positions`` (ints, as a checked by_id leaf
        holds them) when every one is in the body cache, else None (the caller
        then reads them with ``read_sized``): a range's bodies without a pointer
        tuple each, nor a check of each position's type."""
        cache = self.body_cache
        if cache is None:
            return None
        try:  # a miss is None, which _payload_of cannot index: no search for it
            payloads = list(map(_payload_of, map(cache._entries.get, positions)))
        except TypeError:
            return None
        self._reads.enter(self.path)  # a closed file refuses, cached or not
        try:
            terms = list(map(_decode_body, payloads))
        finally:
            self._reads.leave()
        cache._referenced.update(positions)
        return terms

    def _ahead(self, pos: int, size: Any) -> int:
        """What the general path's first pread asks for a pointer's frame: all of it
        when the size is one a frame can have, but never past the file's end (a
        size a writer bug made huge must not allocate gigabytes)."""
        if type(size) is not int or not 0 <= size <= MAX_PAYLOAD:
            return READ_AHEAD
        laid = laid_out_size(pos, FRAME_SIZE + size)
        if laid <= READ_AHEAD:
            return laid
        return max(READ_AHEAD, min(laid, self._handle.size() - pos))

    def read_node(self, pos: int) -> tuple[Any, int]:
        """``read_term`` for a B+tree node, and the bytes its frame occupies: arrays
        decode as tuples (FORMAT.md "B+tree nodes"), so a cached node holds nothing
        the collector tracks, and the node cache budgets what it holds in bytes."""
        node, end = self.read_frame(pos, decode=decode_node_payload)
        return node, end - pos

    def read_frame(
        self, pos: int, *, decode: Decode = decode_payload, ahead: int = READ_AHEAD
    ) -> tuple[Any, int]:
        """``read_term(pos)`` and the file offset where that frame's laid-out bytes end."""
        self._reads.enter(self.path)
        try:
            return self._read_frame(pos, decode, ahead)
        except OSError as exc:
            raise SetteeError(f"{self.path}: read at offset {pos} failed: {exc}") from exc
        finally:
            self._reads.leave()

    def _read_frame(self, pos: int, decode: Decode, ahead: int) -> tuple[Any, int]:
        if pos <= 0 or pos % BLOCK_SIZE == 0:
            raise CorruptionError(self.path, pos, "not a term position (block boundary or < 1)")
        asked = max(ahead, 1 + FRAME_SIZE)  # at least a frame prefix and a marker
        raw = self._handle.pread(pos, asked)
        room = BLOCK_SIZE - pos % BLOCK_SIZE
        if room >= FRAME_SIZE and len(raw) >= FRAME_SIZE:
            # Fast path: a frame that ends before the next block boundary has no
            # marker bytes inside it, so its laid-out bytes are its logical bytes.
            span = FRAME_SIZE + FRAME.unpack_from(raw)[0]
            if span <= room and span <= len(raw):
                return self._decode(raw[:span], pos, decode), pos + span
        prefix_span = laid_out_size(pos, FRAME_SIZE)
        if len(raw) < prefix_span:
            raise CorruptionError(self.path, pos, "frame prefix extends past end of file")
        span = laid_out_size(pos, frame_size(self._logical(raw[:prefix_span], pos)))
        if span > len(raw):
            raw = self._read_rest(pos, raw, span, asked)
        return self._decode(self._logical(raw[:span], pos), pos, decode), pos + span

    def _decode(self, frame: bytes, pos: int, decode: Decode) -> Any:
        payload = decode_frame(frame, path=self.path, offset=pos)
        try:
            return decode(payload)
        except Exception as exc:  # crc held, so this is a writer bug or a crc collision
            raise CorruptionError(self.path, pos, f"undecodable payload: {exc}") from exc

    def _read_rest(self, pos: int, raw: bytes, span: int, asked: int) -> bytes:
        # A short first read already proved the file ends inside this frame; otherwise
        # check the size before asking for a length that a flipped bit may have inflated.
        if len(raw) < asked or pos + span > self._handle.size():
            raise CorruptionError(self.path, pos, f"frame of {span} bytes extends past end of file")
        rest = self._handle.pread(pos + len(raw), span - len(raw))
        if len(raw) + len(rest) < span:
            raise CorruptionError(self.path, pos, f"frame of {span} bytes is truncated")
        return raw + rest

    def _logical(self, raw: bytes, pos: int) -> bytes:
        """The frame bytes in ``raw`` (read at ``pos``), after checking every marker is DATA."""
        data, markers = strip_markers(raw, pos)
        if markers.count(BLOCK_DATA) != len(markers):
            bad = next(i for i, m in enumerate(markers) if m != BLOCK_DATA)
            offset = (pos // BLOCK_SIZE + 1 + bad) * BLOCK_SIZE
            raise CorruptionError(self.path, offset, f"bad block marker {markers[bad]:#04x}")
        return data

    # -- writing --------------------------------------------------------------------------------

    def new_batch(self) -> TermBatch:
        """An empty batch positioned at the current end of the file; it appends
        early whenever it holds ``SPILL_BYTES``."""
        return TermBatch(start=self._end, end=self._end, spill=self._append_at)

    def write_batch(self, batch: TermBatch) -> None:
        """Append the terms of ``batch`` not yet appended early, with one append call."""
        self._append_at(batch.pending_from, batch.data())

    def _append_at(self, offset: int, data: bytes) -> None:
        if offset != self._end:
            raise SetteeError(
                f"{self.path}: stale batch: its bytes belong at offset {offset}, the file "
                f"now ends at {self._end}; make a new batch after each write"
            )
        if not data:
            return
        written = self._handle.append(data)
        # Invariant: this object is the file's only writer, so the end cannot move under it.
        assert written == offset, (written, offset)
        self._end = offset + len(data)

    def write_header(self, header: ShardHeader) -> None:
        """Pad to the next block boundary and append ``header``, a commit of the data
        written since the previous header (or since opening).

        The file fills in ``data_start`` and ``prev`` itself (whatever ``header`` says).
        """
        start = self._end + padding_size(self._end)
        chained = replace(header, data_start=self._data_start, prev=self.header_offset)
        encoded = chained.encode()
        # Parse what is about to be written: a malformed header must fail here, not
        # on the next open, and both views then agree (tuples and lists alike).
        parsed = ShardHeader.parse(encoded, path=self.path, offset=start)
        laid = lay_out(encode_header(encoded), start, first_marker=BLOCK_HEADER)
        offset = self._handle.append(bytes(start - self._end) + laid)
        assert offset == self._end, (offset, self._end)  # same single-writer invariant
        self._end = self._data_start = start + len(laid)
        self.header, self.header_offset = parsed, start

    def sync(self) -> None:
        """fsync the file: everything written so far becomes durable."""
        self._handle.fsync()

    def size(self) -> int:
        """Bytes in the file, including any ignored tail."""
        return self._end

    @property
    def handle(self) -> FileHandle:
        """The open handle (the checker walks raw bytes; the shard closes it late)."""
        return self._handle

    def refuse_reads(self) -> None:
        """Make every later ``read_term`` fail with SetteeError and wait for the reads
        in flight, so the handle can then be closed by someone else (a reader may
        still hold a snapshot of this file)."""
        self._reads.stop()
        self._closed = True

    def read_header_at(self, offset: int) -> tuple[int, int, bytes] | None:
        """``(end, version, payload)`` of a complete, verified header at ``offset``, or None."""
        self._reads.enter(self.path)
        try:
            found = read_header_at(self._handle, offset, self._end)
        finally:
            self._reads.leave()
        return None if found is None else (found.end, found.version, found.payload)

    def close(self) -> None:
        """Close the file once the reads in flight are done; idempotent."""
        self._reads.stop()
        if not self._closed:
            self._closed = True
            self._handle.close()

    def __enter__(self) -> ShardFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- finding the newest header --------------------------------------------------------------

    def _load_newest_header(self) -> int:
        """Set ``header`` from the newest valid header; return where the ignored tail starts."""
        found = newest_header(self._handle, self._end)
        if found is not None:
            self._check_version(found.offset, found.version)
            self.header = ShardHeader.parse(found.payload, path=self.path, offset=found.offset)
            self.header_offset = found.offset
            return found.end
        if self._end and not self._looks_like_settee():
            raise CorruptionError(
                self.path,
                0,
                "not a settee shard file (no valid header and the first block does not "
                "start with a settee marker): check the path, or restore the file from a backup",
            )
        return 0

    def adopt(self, header: ShardHeader, offset: int) -> None:
        """Make ``header`` (read by ``header_at(offset)``) this file's header, for a
        reader following a writer in another process. The writer's own
        ``ShardFile`` never calls it."""
        self.header, self.header_offset, self._end = header, offset, self._handle.size()

    def header_at(self, offset: int, size: int | None = None) -> ShardHeader | None:
        """The valid header of this format at ``offset`` (of a file ``size`` bytes long,
        by default its size now), or None; changes nothing."""
        self._reads.enter(self.path)
        try:
            found = read_header_at(
                self._handle, offset, self._handle.size() if size is None else size
            )
        finally:
            self._reads.leave()
        if found is None or found.version != FORMAT_VERSION:
            return None
        try:
            return ShardHeader.parse(found.payload, path=self.path, offset=offset)
        except CorruptionError:
            return None

    def lost_commit(self, offset: int, seq: int) -> str | None:
        """Why the commit at ``offset`` with ``seq`` (a HEADS slot: its header was
        fsynced before the slot was written) is not this file's newest valid
        header although the file reaches past it (the reason, without the file's
        path), or None when nothing is lost: the commit is not newer, the file's
        newest header is not before the offset (a HEADS of another file history,
        e.g. a shard restored from a backup), or the header reads; a file that ends
        before the header is one that lost its end. A flipped bit in the newest header looked
        like a torn tail: opening fell back a commit and lost acknowledged writes
        with no word of it (found in review)."""
        newest = -1 if self.header is None else self.header.seq
        if seq <= newest or offset <= 0 or offset % BLOCK_SIZE:
            return None
        if self.header_offset is not None and self.header_offset >= offset:
            # This file's newest commit is at or past the offset: HEADS of another
            # file history (a shard restored from a backup older than a compaction,
            # found in review), not a commit this file lost.
            return None
        size = self._handle.size()
        if offset + 1 + HEADER_SIZE > size:
            # The header was fsynced before HEADS named it: a file that ends before
            # it lost its end (found in review: a truncated shard reopened at an older
            # commit with only a torn-tail warning, and settee check said OK).
            return (
                f"the file ends at {size} bytes, before the header at offset {offset} of "
                f"commit {seq}, which HEADS names as durable: the file was cut short or "
                f"replaced by an older copy, and the writes of the commits after "
                f"{newest} are lost. Restore the shard file from a backup before a "
                "writer opens it"
            )
        if self.header_at(offset) is not None:
            return None
        return (
            f"the header at offset {offset}, of commit {seq}, which HEADS names "
            f"as durable, is damaged: opened at commit {newest}, so the writes of the "
            "commits after it are lost. Restore the shard file from a backup before a "
            "writer opens it (a writer appends its commits past the damage)"
        )

    def _check_version(self, offset: int, version: int) -> None:
        if version != FORMAT_VERSION:
            raise SetteeError(
                f"{self.path}: header at offset {offset} has format version {version}; this "
                f"settee reads version {FORMAT_VERSION} only: run `settee dump` with the settee "
                "that wrote it, then `settee load` into a new database with this one"
            )

    def _looks_like_settee(self) -> bool:
        """Whether byte 0 could start a settee file whose first header never completed."""
        first = self._handle.pread(0, 1 + len(MAGIC))
        if first[0] == BLOCK_DATA:
            return True
        return first[0] == BLOCK_HEADER and MAGIC.startswith(first[1:])


class _ReadsInFlight:
    """Counts the reads in progress on one file, so that its descriptor is closed
    only after the last of them: a ``pread`` racing with ``close()`` would fail with
    EBADF, or read whatever file had meanwhile been opened on the same number.

    Every read enters and leaves, so both are list operations, atomic under the
    GIL, instead of a lock pair (which cost as much as the pread). A read appends
    before it looks at ``_stopped`` and ``stop()`` sets it before it looks at the
    count, so either the read sees the stop and backs out or ``stop()`` sees the
    read and waits; the last read to leave after a stop wakes it.
    """

    __slots__ = ("_drained", "_inflight", "_stopped")

    def __init__(self) -> None:
        self._inflight: list[None] = []
        self._stopped = False
        self._drained = threading.Event()

    def enter(self, path: str) -> None:
        self._inflight.append(None)
        if self._stopped:
            self.leave()
            raise SetteeError(
                f"{path}: the database is closed; open it again with settee.open(path)"
            )

    def leave(self) -> None:
        self._inflight.pop()
        if self._stopped and not self._inflight:
            self._drained.set()

    def stop(self) -> None:
        self._stopped = True
        if self._inflight:
            self._drained.wait()


def _open(fs: FileSystem, path: str, *, create: bool) -> FileHandle:
    try:
        return fs.open(path, create=create)
    except OSError as exc:
        raise SetteeError(f"{path}: cannot open the shard file: {exc}") from exc


#: The most one coalesced pread of ``read_sized`` asks for, and the widest gap
#: between two frames it reads through rather than issue another pread (bytes
#: read for nothing cost less than a system call up to about this much).
COALESCE_BYTES = 64 * 1024
_COALESCE_GAP = 1024


def _fast_laid_out(pos: Any, size: Any) -> int:
    """The file bytes of the frame at ``pos`` whose payload is ``size`` bytes, if
    ``read_sized``'s fast path can cut it from a read (it starts inside a block
    and crosses at most one block boundary); else 0."""
    if type(size) is not int or not 0 <= size <= MAX_PAYLOAD or pos <= 0:
        return 0
    room = BLOCK_SIZE - pos % BLOCK_SIZE
    span = FRAME_SIZE + size
    if room == BLOCK_SIZE:
        return 0
    if span <= room:
        return span
    return span + 1 if span - room < BLOCK_SIZE else 0


def _run_end(pointers: Sequence[tuple[Any, Any]], index: int, end: int) -> int:
    """Where the coalesced pread for ``pointers[index]`` (whose frame ends at
    ``end``) should stop: after every following frame that begins at most
    ``_COALESCE_GAP`` bytes after the previous one ends, while the read stays within
    ``COALESCE_BYTES``."""
    start = pointers[index][0]
    for pos, size in itertools.islice(pointers, index + 1, None):
        if type(pos) is not int or not 0 <= pos - end <= _COALESCE_GAP:
            break
        laid = _fast_laid_out(pos, size)
        if not laid or pos + laid - start > COALESCE_BYTES:
            break
        end = pos + laid
    return end
