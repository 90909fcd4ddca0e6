"""Every on-disk constant and struct layout of a settee shard file, in one place.

``spec/FORMAT.md`` describes these bytes in prose and tables; this module is
its executable twin. Nothing else in settee declares a magic number, a block
size or a struct layout: the engine, the checker, the tools and the tests all
import them from here. The functions are pure (bytes in, bytes out), carry
PEP 316 ``pre:``/``post:`` contracts for CrossHair, and never touch a file.

Vocabulary (see FORMAT.md):

* *logical bytes* are a frame or header as encoded, with no block markers;
* *laid-out bytes* are what lands in the file: the logical bytes with a
  one-byte marker inserted at every block boundary they cross.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c
import msgpack

from settee.spec.errors import CorruptionError

__all__ = [
    "BLOCK_DATA",
    "BLOCK_HEADER",
    "BLOCK_SIZE",
    "FORMAT_VERSION",
    "FRAME",
    "FRAME_SIZE",
    "HEADER",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_PAYLOAD",
    "Root",
    "ShardHeader",
    "as_root",
    "decode_frame",
    "decode_header",
    "decode_node_payload",
    "decode_payload",
    "encode_frame",
    "encode_header",
    "encode_payload",
    "frame_size",
    "header_size",
    "laid_out_size",
    "lay_out",
    "padding_size",
    "strip_markers",
    "term_position",
]

# -- constants (FORMAT.md "Blocks") -------------------------------------------------------------

#: Every file is a sequence of blocks of this many bytes; byte 0 of each is a marker.
BLOCK_SIZE = 4096
#: Marker of a block that starts with data (or continues a frame or header).
BLOCK_DATA = 0x00
#: Marker of a block that starts with a header.
BLOCK_HEADER = 0x01

#: Bumped on any change to the bytes described here; readers refuse other versions.
#: 2: shard headers carry ``data_start`` and ``prev`` (the commit chain a checker walks).
FORMAT_VERSION = 5

#: First field of every header. The 0x89 byte catches 7-bit transports; "\n" catches
#: newline translation (the trick PNG uses).
MAGIC = b"\x89SETTEE\n"

# -- frame (FORMAT.md "Frames") -----------------------------------------------------------------

#: Frame prefix, little-endian: payload length (u32), crc32c of (length field + payload) (u32).
FRAME = struct.Struct("<II")
FRAME_SIZE = 8

# -- header (FORMAT.md "Headers") ---------------------------------------------------------------

#: Header fields after the marker, little-endian: magic (8 bytes), format version (u32),
#: payload length (u32), crc32c of (magic + version + length + payload) (u32).
HEADER = struct.Struct("<8sIII")
HEADER_SIZE = 20

#: Largest payload a u32 length field can describe.
MAX_PAYLOAD = 2**32 - 1

assert FRAME.size == FRAME_SIZE, "frame prefix layout changed without FORMAT.md"
assert HEADER.size == HEADER_SIZE, "header layout changed without FORMAT.md"
assert len(MAGIC) == 8, "magic is the header's first 8-byte field"
# The scan reads a header's fixed fields from its first block alone.
assert 1 + HEADER_SIZE < BLOCK_SIZE, "header fields must fit in the header's first block"
assert BLOCK_DATA != BLOCK_HEADER

_DATA_MARKER = bytes([BLOCK_DATA])


# -- payloads -----------------------------------------------------------------------------------


def encode_payload(obj: Any) -> bytes:
    """msgpack with the options every settee module must use (str stays str, bytes stay bytes).

    Raises ``TypeError`` (or ``ValueError``/``OverflowError``) for values msgpack cannot hold.
    """
    # packb's bytes, from a Packer kept per thread (a Packer is not thread-safe, and
    # writers of different shards pack at once): packb builds a Packer per call, which
    # cost more than packing a by_id value. A pack that raises leaves it empty.
    try:
        pack = _PACKERS.pack
    except AttributeError:
        pack = _PACKERS.pack = msgpack.Packer(use_bin_type=True).pack
    return pack(obj)  # type: ignore[no-any-return]


_PACKERS = threading.local()


def decode_payload(data: bytes) -> Any:
    """Inverse of ``encode_payload``; maps may have non-str keys (e.g. int seqs)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def decode_node_payload(data: bytes) -> Any:
    """``decode_payload`` with arrays as tuples: how B+tree nodes are read. A node of
    tuples, strs, ints and bytes is immutable and invisible to the cyclic collector."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=False)


# -- frames -------------------------------------------------------------------------------------


def _frame_crc(length_field: bytes, payload: bytes) -> int:
    # The crc covers the length too, so a flipped length bit cannot go unnoticed.
    return crc32c.crc32c(payload, crc32c.crc32c(length_field))


def encode_frame(payload: bytes) -> bytes:
    """The logical frame of ``payload``: ``[u32 length][u32 crc32c][payload]``.

    pre: len(payload) <= MAX_PAYLOAD
    post: len(__return__) == FRAME_SIZE + len(payload)
    post: decode_frame(__return__) == payload
    """
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds the u32 frame length field")
    length_field = struct.pack("<I", len(payload))
    return FRAME.pack(len(payload), _frame_crc(length_field, payload)) + payload


def frame_size(prefix: bytes) -> int:
    """Total logical size of the frame whose first ``FRAME_SIZE`` bytes are ``prefix``.

    pre: len(prefix) >= FRAME_SIZE
    post: __return__ >= FRAME_SIZE
    """
    length, _ = FRAME.unpack_from(prefix)
    return FRAME_SIZE + length


def decode_frame(frame: bytes, *, path: str = "", offset: int = 0) -> bytes:
    """The payload of one complete logical frame, after checking its length and crc.

    ``path`` and ``offset`` only label the ``CorruptionError`` raised on any mismatch.

    pre: len(frame) >= FRAME_SIZE
    post: len(__return__) == len(frame) - FRAME_SIZE
    """
    if len(frame) < FRAME_SIZE:
        raise CorruptionError(path, offset, f"frame of {len(frame)} bytes is shorter than prefix")
    length, crc = FRAME.unpack_from(frame)
    if FRAME_SIZE + length != len(frame):
        raise CorruptionError(
            path, offset, f"frame length field {length} disagrees with {len(frame)} frame bytes"
        )
    payload = frame[FRAME_SIZE:]
    if _frame_crc(frame[:4], payload) != crc:
        raise CorruptionError(path, offset, "frame crc32c mismatch")
    return payload


# -- headers ------------------------------------------------------------------------------------


def _header_crc(fields: bytes, payload: bytes) -> int:
    # fields = magic + version + length: everything before the crc field.
    return crc32c.crc32c(payload, crc32c.crc32c(fields))


def encode_header(payload: bytes, version: int = FORMAT_VERSION) -> bytes:
    """The logical header (everything after the HEADER marker byte) carrying ``payload``.

    pre: len(payload) <= MAX_PAYLOAD
    pre: 0 <= version < 2**32
    post: len(__return__) == HEADER_SIZE + len(payload)
    post: decode_header(__return__) == (version, payload)
    """
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"header payload of {len(payload)} bytes exceeds the u32 length field")
    fields = MAGIC + struct.pack("<II", version, len(payload))
    return HEADER.pack(MAGIC, version, len(payload), _header_crc(fields, payload)) + payload


def header_size(prefix: bytes, *, path: str = "", offset: int = 0) -> int:
    """Total logical size of the header whose first ``HEADER_SIZE`` bytes are ``prefix``.

    Raises ``CorruptionError`` when the magic is wrong (the bytes are not a header).

    pre: len(prefix) >= HEADER_SIZE
    post: __return__ >= HEADER_SIZE
    """
    magic, _, length, _ = HEADER.unpack_from(prefix)
    if magic != MAGIC:
        raise CorruptionError(path, offset, f"bad header magic {magic.hex()}")
    return HEADER_SIZE + length


def decode_header(logical: bytes, *, path: str = "", offset: int = 0) -> tuple[int, bytes]:
    """``(version, payload)`` of one complete logical header, after checking magic and crc.

    The version is returned, not checked: the caller decides what an unknown version means.

    pre: len(logical) >= HEADER_SIZE
    post: len(__return__[1]) == len(logical) - HEADER_SIZE
    """
    if len(logical) < HEADER_SIZE:
        raise CorruptionError(path, offset, "header shorter than its fixed fields")
    if header_size(logical[:HEADER_SIZE], path=path, offset=offset) != len(logical):
        raise CorruptionError(path, offset, "header length field disagrees with header bytes")
    _, version, _, crc = HEADER.unpack_from(logical)
    payload = logical[HEADER_SIZE:]
    if _header_crc(logical[: HEADER_SIZE - 4], payload) != crc:
        raise CorruptionError(path, offset, "header crc32c mismatch")
    return version, payload


# -- the shard header payload (FORMAT.md "Shard header payload") ------------------------------

#: A B+tree root as a header holds it: (position of the root node's frame, reduction), or
#: None for an empty tree. On disk it is the msgpack array ``[pos, reduction]`` or nil.
Root = tuple[int, Any] | None

_HEADER_KEYS = ("db", "shard", "shards", "seq", "by_id", "by_seq", "data_start", "prev")


def _frozen(value: Any) -> Any:
    # A frozen dataclass freezes only its own fields: turn nested arrays into tuples.
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def as_root(value: Sequence[Any] | None) -> Root:
    """A tree's root pointer (``BTree.root``: ``[pos, reduction]`` or None) as a header holds it.

    post: __return__ is None or isinstance(__return__, tuple)
    """
    return None if value is None else (value[0], _frozen(value[1]))


@dataclass(frozen=True, slots=True)
class ShardHeader:
    """One commit of a shard file: the payload of its header (FORMAT.md "Shard header payload").

    Built and parsed only here. ``data_start`` and ``prev`` describe the file itself and are
    filled in by ``ShardFile.write_header``; callers leave them at their defaults.
    """

    #: Identity, repeated by every header: the database uuid, this shard's index, the count.
    db: str
    shard: int
    shards: int
    #: The shard's update seq: the number of committed document changes.
    seq: int
    #: Roots of the by_id and by_seq B+trees.
    by_id: Root
    by_seq: Root
    #: File offset where this commit's data begins: the file's end when the commit started.
    #: It equals the previous header's end unless a torn tail was kept in between.
    data_start: int = 0
    #: File offset of the previous header of this file; None for the file's first header.
    prev: int | None = None

    def encode(self) -> bytes:
        """The msgpack payload (a map with the keys in ``_HEADER_KEYS`` order)."""
        roots = [None if r is None else [r[0], r[1]] for r in (self.by_id, self.by_seq)]
        fields = [self.db, self.shard, self.shards, self.seq, *roots, self.data_start, self.prev]
        return encode_payload(dict(zip(_HEADER_KEYS, fields, strict=True)))

    @classmethod
    def parse(cls, payload: bytes, *, path: str = "", offset: int) -> ShardHeader:
        """The header whose payload is ``payload``, read from the header at file ``offset``.

        Raises ``CorruptionError(path, offset, ...)`` on any malformed field: ``offset`` is
        needed because ``data_start``, ``prev`` and the roots must all lie before it.
        """

        def bad(what: str) -> CorruptionError:
            return CorruptionError(path, offset, f"malformed shard header: {what}")

        try:
            fields = decode_payload(payload)
        except Exception as exc:  # the crc held: a writer bug or a crc collision
            raise bad(f"undecodable payload: {exc}") from exc
        if not isinstance(fields, dict) or set(fields) != set(_HEADER_KEYS):
            raise bad(f"expected a map with keys {list(_HEADER_KEYS)}, got {fields!r}")
        _check_fields(fields, offset, bad)
        return cls(
            db=fields["db"],
            shard=fields["shard"],
            shards=fields["shards"],
            seq=fields["seq"],
            by_id=_root(fields["by_id"], offset, bad),
            by_seq=_root(fields["by_seq"], offset, bad),
            data_start=fields["data_start"],
            prev=fields["prev"],
        )


def _check_fields(
    fields: dict[Any, Any], offset: int, bad: Callable[[str], CorruptionError]
) -> None:
    """The identity, seq and chain fields of a header at ``offset``: types and order."""
    if not isinstance(fields["db"], str):
        raise bad(f"db is {fields['db']!r}, not a str")
    for name in ("shard", "shards", "seq", "data_start"):
        if type(fields[name]) is not int or fields[name] < 0:
            raise bad(f"{name} is {fields[name]!r}, not a non-negative int")
    if fields["shard"] >= fields["shards"]:
        raise bad(f"shard {fields['shard']} is not below the shard count {fields['shards']}")
    data_start, prev = fields["data_start"], fields["prev"]
    if data_start > offset:
        raise bad(f"data_start {data_start} is beyond the header itself")
    # The previous header ends at or before this commit's data: it starts strictly before.
    if prev is not None and not (type(prev) is int and 0 <= prev < data_start):
        raise bad(f"prev {prev!r} is not an offset before data_start {data_start}")
    if prev is not None and prev % BLOCK_SIZE:
        raise bad(f"prev {prev} is not on a block boundary")


def _root(value: Any, offset: int, bad: Callable[[str], CorruptionError]) -> Root:
    """A stored root after a light shape check: its node is a term before the header."""
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and type(value[0]) is int):
        raise bad(f"root {value!r} is not [pos, reduction] or nil")
    if not 0 < value[0] < offset or value[0] % BLOCK_SIZE == 0:
        raise bad(f"root position {value[0]} is not a term position before the header")
    return as_root(value)


# -- laying bytes out over blocks ---------------------------------------------------------------


def term_position(eof: int) -> int:
    """File offset where a frame appended at ``eof`` starts (after a marker if at a boundary).

    pre: eof >= 0
    post: __return__ % BLOCK_SIZE != 0
    post: __return__ - eof in (0, 1)
    """
    return eof + 1 if eof % BLOCK_SIZE == 0 else eof


def padding_size(eof: int) -> int:
    """Zero bytes to append at ``eof`` so that the next byte starts a block.

    pre: eof >= 0
    post: (eof + __return__) % BLOCK_SIZE == 0
    post: 0 <= __return__ < BLOCK_SIZE
    """
    return -eof % BLOCK_SIZE


def laid_out_size(start: int, n: int) -> int:
    """File bytes that ``n`` logical bytes occupy when laid out from file offset ``start``.

    Equals ``len(lay_out(data, start))`` for any ``data`` of length ``n``.

    pre: start >= 0 and n >= 0
    post: n <= __return__ <= n + n // (BLOCK_SIZE - 1) + 1
    post: n > 0 or __return__ == 0
    """
    if n == 0:
        return 0
    offset = start % BLOCK_SIZE
    if offset == 0:
        return 1 + laid_out_size(start + 1, n)
    room = BLOCK_SIZE - offset
    if n <= room:
        return n
    rest = n - room
    # Each further block holds BLOCK_SIZE - 1 logical bytes after its marker.
    return room + rest + -(-rest // (BLOCK_SIZE - 1))


def lay_out(data: bytes, start: int, first_marker: int = BLOCK_DATA) -> bytes:
    """The bytes to write at file offset ``start`` so ``data`` skips every block's marker byte.

    A marker is inserted at each block boundary the write crosses; ``first_marker`` is used
    when ``start`` itself is a boundary (HEADER for a header), DATA everywhere else.

    pre: start >= 0
    post: len(__return__) == laid_out_size(start, len(data))
    post: strip_markers(__return__, start)[0] == data
    """
    if not data:
        return b""
    parts: list[bytes] = []
    pos, i = start, 0
    if pos % BLOCK_SIZE == 0:
        parts.append(bytes([first_marker]))
        pos += 1
    while True:
        take = min(BLOCK_SIZE - pos % BLOCK_SIZE, len(data) - i)
        parts.append(data[i : i + take])
        i += take
        pos += take
        if i == len(data):
            return b"".join(parts)
        # pos is now on a block boundary and more data follows.
        parts.append(_DATA_MARKER)
        pos += 1


def strip_markers(raw: bytes, start: int) -> tuple[bytes, bytes]:
    """Split laid-out bytes read from file offset ``start`` into (logical bytes, markers).

    ``markers`` holds the byte found at each block boundary in ``raw``, in file order.

    pre: start >= 0
    post: len(__return__[0]) + len(__return__[1]) == len(raw)
    """
    first = -start % BLOCK_SIZE  # index in raw of the first block boundary
    if first >= len(raw):
        return raw, b""
    # The marker of each boundary is one byte; the logical bytes run between them.
    parts = [raw[:first]]
    parts.extend(raw[i + 1 : i + BLOCK_SIZE] for i in range(first, len(raw), BLOCK_SIZE))
    return b"".join(parts), raw[first::BLOCK_SIZE]
