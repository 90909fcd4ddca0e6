"""spec/format.py: frames, headers and block layout, as pure functions."""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from settee.spec import format as fmt
from settee.spec.errors import CorruptionError

B = fmt.BLOCK_SIZE
# Up to three blocks of payload, so frames cross zero, one, two or three boundaries.
payloads = st.binary(max_size=3 * B + 16)
offsets = st.integers(min_value=0, max_value=4 * B)

BIG_SIZES = [0, 1, B - 9, B - 8, B - 1, B, B + 1, 2 * B - 1, 10 * B + 7, 1 << 20]


def test_struct_sizes_match_format_md() -> None:
    assert struct.calcsize(fmt.FRAME.format) == fmt.FRAME_SIZE == 8
    assert struct.calcsize(fmt.HEADER.format) == fmt.HEADER_SIZE == 20
    assert fmt.FRAME.format.startswith("<") and fmt.HEADER.format.startswith("<")
    assert (fmt.BLOCK_DATA, fmt.BLOCK_HEADER, fmt.BLOCK_SIZE) == (0, 1, 4096)


@given(payloads)
def test_frame_round_trip(payload: bytes) -> None:
    frame = fmt.encode_frame(payload)
    assert len(frame) == fmt.FRAME_SIZE + len(payload)
    assert fmt.frame_size(frame[: fmt.FRAME_SIZE]) == len(frame)
    assert fmt.decode_frame(frame) == payload


@pytest.mark.parametrize("size", BIG_SIZES)
def test_frame_round_trip_big(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert fmt.decode_frame(fmt.encode_frame(payload)) == payload


def test_frame_every_bit_flip_is_detected() -> None:
    frame = fmt.encode_frame(fmt.encode_payload({"k": "value", "n": [1, 2, 3]}))
    for bit in range(len(frame) * 8):
        damaged = bytearray(frame)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptionError):
            fmt.decode_frame(bytes(damaged), path="p", offset=7)


def test_decode_frame_reports_path_and_offset() -> None:
    with pytest.raises(CorruptionError) as info:
        fmt.decode_frame(b"\x00" * 8, path="some/file", offset=123)
    assert (info.value.path, info.value.offset) == ("some/file", 123)


def test_decode_frame_rejects_length_mismatch_and_short_input() -> None:
    frame = fmt.encode_frame(b"abc")
    for bad in (frame[:-1], frame + b"x", frame[:5]):
        with pytest.raises(CorruptionError):
            fmt.decode_frame(bad)


def test_decode_frame_rejects_a_length_field_its_crc_covers_but_the_bytes_disagree_with() -> None:
    """The crc covers the length field, but only the bytes read say how long the frame
    is: a frame whose length field lies, crc computed over the lie (a writer bug), is
    refused for the length, not returned as a payload of another size."""
    payload = b"\xa3abc"
    length_field = struct.pack("<I", len(payload) + 2)
    crc = crc32c.crc32c(payload, crc32c.crc32c(length_field))
    frame = length_field + struct.pack("<I", crc) + payload
    with pytest.raises(CorruptionError, match="disagrees"):
        fmt.decode_frame(frame)


def test_encode_frame_rejects_payload_beyond_u32() -> None:
    class Huge(bytes):
        def __len__(self) -> int:
            return fmt.MAX_PAYLOAD + 1

    with pytest.raises(ValueError, match="u32"):
        fmt.encode_frame(Huge())


@given(payloads, st.integers(min_value=0, max_value=2**32 - 1))
def test_header_round_trip(payload: bytes, version: int) -> None:
    logical = fmt.encode_header(payload, version)
    assert logical[:8] == fmt.MAGIC
    assert fmt.header_size(logical[: fmt.HEADER_SIZE]) == len(logical)
    assert fmt.decode_header(logical) == (version, payload)


def test_header_every_bit_flip_is_detected() -> None:
    logical = fmt.encode_header(fmt.encode_payload({"root": [1, 2]}))
    for bit in range(len(logical) * 8):
        damaged = bytearray(logical)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptionError):
            fmt.decode_header(bytes(damaged))


def test_header_size_rejects_wrong_magic() -> None:
    logical = b"NOTMAGIC" + fmt.encode_header(b"x")[8:]
    with pytest.raises(CorruptionError, match="magic"):
        fmt.header_size(logical[: fmt.HEADER_SIZE])


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**64 - 1)
        | st.text()
        | st.binary()
        | st.floats(allow_nan=False),
        lambda c: st.lists(c) | st.dictionaries(st.text() | st.integers(0, 99), c),
        max_leaves=20,
    )
)
def test_payload_round_trip(obj: object) -> None:
    assert fmt.decode_payload(fmt.encode_payload(obj)) == obj


def test_payload_keeps_str_and_bytes_apart() -> None:
    assert fmt.decode_payload(fmt.encode_payload(["a", b"a", {1: 2}])) == ["a", b"a", {1: 2}]


@given(payloads, offsets)
@example(b"x" * (B - 1), B)
@example(b"x" * B, B - 1)
@example(b"", 0)
def test_lay_out_round_trip(data: bytes, start: int) -> None:
    laid = fmt.lay_out(data, start)
    assert len(laid) == fmt.laid_out_size(start, len(data))
    logical, markers = fmt.strip_markers(laid, start)
    assert logical == data
    assert markers == bytes(len(markers))
    # A marker sits at exactly each block boundary the laid-out bytes cover.
    boundaries = [o for o in range(start, start + len(laid)) if o % B == 0]
    assert len(markers) == len(boundaries)
    assert all(laid[o - start] == fmt.BLOCK_DATA for o in boundaries)


@given(payloads, st.integers(0, 4).map(lambda k: k * B))
def test_lay_out_header_marker_opens_the_block(data: bytes, start: int) -> None:
    laid = fmt.lay_out(data, start, first_marker=fmt.BLOCK_HEADER)
    if data:
        assert laid[0] == fmt.BLOCK_HEADER
        logical, markers = fmt.strip_markers(laid, start)
        assert logical == data and markers[0] == fmt.BLOCK_HEADER
        assert markers[1:] == bytes(len(markers) - 1)


@given(st.integers(0, 10 * B), st.integers(0, 10 * B))
def test_laid_out_size_matches_lay_out(start: int, n: int) -> None:
    assert fmt.laid_out_size(start, n) == len(fmt.lay_out(bytes(n), start))


@pytest.mark.parametrize("size", BIG_SIZES)
def test_lay_out_big(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    for start in (0, 1, B - 1, 5 * B + 100):
        laid = fmt.lay_out(data, start)
        assert len(laid) == fmt.laid_out_size(start, size)
        assert fmt.strip_markers(laid, start)[0] == data


@given(st.integers(0, 10 * B))
def test_term_position_and_padding(eof: int) -> None:
    pos = fmt.term_position(eof)
    assert pos % B != 0 and pos - eof in (0, 1)
    assert (eof + fmt.padding_size(eof)) % B == 0 and 0 <= fmt.padding_size(eof) < B


@given(payloads, st.integers(0, 4 * B))
def test_term_position_is_where_the_frame_starts(payload: bytes, eof: int) -> None:
    frame = fmt.encode_frame(payload)
    laid = fmt.lay_out(frame, eof)
    pos = fmt.term_position(eof)
    assert laid[pos - eof : pos - eof + 1] == frame[:1]
    # A frame never starts on a boundary, so its position's laid-out size from pos is the rest.
    assert fmt.laid_out_size(pos, len(frame)) == len(laid) - (pos - eof)


# -- the shard header payload (FORMAT.md "Shard header payload") --------------------------------

OFFSET = 5 * B  # where the header under test sits
VALID: dict[str, object] = {
    "db": "9f1c6e0a4b2d4e8f8a7b3c2d1e0f5a6b",
    "shard": 1,
    "shards": 3,
    "seq": 7,
    "by_id": [B + 5, [2, 1, 300]],
    "by_seq": [B + 9, 3],
    "data_start": 4 * B + 100,
    "prev": 4 * B,
}


def test_format_version_is_5() -> None:
    assert fmt.FORMAT_VERSION == 5


@st.composite
def shard_headers(draw: st.DrawFn) -> tuple[fmt.ShardHeader, int]:
    """A valid header and the offset it sits at."""
    offset = draw(st.integers(0, 1000)) * B
    shards = draw(st.integers(1, 64))
    data_start = draw(st.integers(0, offset))
    prevs = st.none()
    if data_start:
        prevs |= st.integers(0, (data_start - 1) // B).map(lambda k: k * B)
    positions = st.integers(1, max(1, offset - 1)).filter(lambda p: p % B and p < offset)
    reductions = st.integers(0, 2**40) | st.lists(st.integers(0, 2**40), max_size=3)
    roots = st.none() | st.tuples(positions, reductions).map(fmt.as_root) if offset else st.none()
    header = fmt.ShardHeader(
        db=draw(st.text(max_size=40)),
        shard=draw(st.integers(0, shards - 1)),
        shards=shards,
        seq=draw(st.integers(0, 2**63)),
        by_id=draw(roots),
        by_seq=draw(roots),
        data_start=data_start,
        prev=draw(prevs),
    )
    return header, offset


@given(shard_headers())
def test_shard_header_round_trip(case: tuple[fmt.ShardHeader, int]) -> None:
    header, offset = case
    assert fmt.ShardHeader.parse(header.encode(), path="p", offset=offset) == header


def test_shard_header_is_a_frozen_record_of_tuples() -> None:
    header = fmt.ShardHeader.parse(fmt.encode_payload(VALID), offset=OFFSET)
    assert header.by_id == (B + 5, (2, 1, 300)) and header.by_seq == (B + 9, 3)
    assert hash(header) == hash(fmt.ShardHeader.parse(header.encode(), offset=OFFSET))
    with pytest.raises(AttributeError):
        header.seq = 8  # type: ignore[misc]


def test_shard_header_encodes_the_documented_map() -> None:
    header = fmt.ShardHeader.parse(fmt.encode_payload(VALID), offset=OFFSET)
    decoded = fmt.decode_payload(header.encode())
    assert decoded == VALID and list(decoded) == list(VALID)  # keys in FORMAT.md's order


def _without(key: str) -> dict[str, object]:
    return {k: v for k, v in VALID.items() if k != key}


MALFORMED = {
    "not msgpack": b"\xc1",
    "not a map": fmt.encode_payload([1, 2]),
    "unknown key": fmt.encode_payload({**VALID, "extra": 1}),
    **{f"missing {k}": fmt.encode_payload(_without(k)) for k in VALID},
    "db not str": fmt.encode_payload({**VALID, "db": b"bytes"}),
    "shard a bool": fmt.encode_payload({**VALID, "shard": True}),
    "shards a float": fmt.encode_payload({**VALID, "shards": 3.0}),
    "seq negative": fmt.encode_payload({**VALID, "seq": -1}),
    "seq a str": fmt.encode_payload({**VALID, "seq": "7"}),
    "shard not below shards": fmt.encode_payload({**VALID, "shard": 3}),
    "no shards": fmt.encode_payload({**VALID, "shard": 0, "shards": 0}),
    "data_start negative": fmt.encode_payload({**VALID, "data_start": -1, "prev": None}),
    "data_start beyond the header": fmt.encode_payload({**VALID, "data_start": OFFSET + 1}),
    "data_start nil": fmt.encode_payload({**VALID, "data_start": None}),
    "prev negative": fmt.encode_payload({**VALID, "prev": -B}),
    "prev at the header": fmt.encode_payload({**VALID, "prev": OFFSET, "data_start": OFFSET}),
    "prev past data_start": fmt.encode_payload({**VALID, "prev": 4 * B, "data_start": 4 * B}),
    "prev off a block boundary": fmt.encode_payload({**VALID, "prev": 4 * B + 1}),
    "prev a str": fmt.encode_payload({**VALID, "prev": "4096"}),
    "root not an array": fmt.encode_payload({**VALID, "by_id": {"pos": B + 5}}),
    "root of three": fmt.encode_payload({**VALID, "by_id": [B + 5, 1, 2]}),
    "root pos a str": fmt.encode_payload({**VALID, "by_seq": ["4101", 3]}),
    "root pos a bool": fmt.encode_payload({**VALID, "by_seq": [True, 3]}),
    "root pos zero": fmt.encode_payload({**VALID, "by_seq": [0, 3]}),
    "root pos on a boundary": fmt.encode_payload({**VALID, "by_seq": [2 * B, 3]}),
    "root pos past the header": fmt.encode_payload({**VALID, "by_id": [OFFSET + 5, 3]}),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_shard_header_raises_corruption(name: str) -> None:
    with pytest.raises(CorruptionError, match="malformed shard header") as info:
        fmt.ShardHeader.parse(MALFORMED[name], path="some/file", offset=OFFSET)
    assert (info.value.path, info.value.offset) == ("some/file", OFFSET)


values = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5)
values |= st.floats() | st.lists(st.integers(-2, 3 * B), max_size=3)


@given(st.dictionaries(st.sampled_from([*VALID, "x"]), values), st.booleans())
def test_any_map_either_parses_to_a_valid_header_or_raises_corruption(
    fields: dict[str, object], over_valid: bool
) -> None:
    payload = fmt.encode_payload({**VALID, **fields} if over_valid else fields)
    try:
        header = fmt.ShardHeader.parse(payload, offset=OFFSET)
    except CorruptionError:
        return
    assert 0 <= header.shard < header.shards and 0 <= header.data_start <= OFFSET
    assert header.prev is None or (header.prev < header.data_start and header.prev % B == 0)
    assert fmt.ShardHeader.parse(header.encode(), offset=OFFSET) == header


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_parse_into_anything_but_a_header_or_corruption(
    payload: bytes,
) -> None:
    with contextlib.suppress(CorruptionError):
        fmt.ShardHeader.parse(payload, offset=OFFSET)
