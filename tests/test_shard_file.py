"""impl/file.py: ShardFile round trips, exact positions, damage handling, concurrency.

The ``test_damage_<row>`` tests are the rows of the damage table in spec/FORMAT.md.
"""

from __future__ import annotations

import os
import random
import re
import struct
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import crc32c
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

import settee
from settee.btree import NodeCache
from settee.file import (
    COALESCE_BYTES,
    READ_AHEAD,
    SPILL_BYTES,
    ShardFile,
    TermBatch,
    TornTailWarning,
)
from settee.io import CountingFileSystem, MemoryFileSystem, OsFileSystem
from settee.snapshot import by_id_tree
from settee.spec import format as fmt
from settee.spec.errors import CorruptionError, SetteeError
from settee.spec.format import ShardHeader, as_root

B = fmt.BLOCK_SIZE
PATH = "/db/shard"


@dataclass
class Commit:
    """One committed header as written: where it is and what it carries."""

    offset: int
    end: int
    header: ShardHeader


def hdr(seq: int, pad: int = 0) -> ShardHeader:
    """A header carrying ``seq``; ``pad`` lengthens it (for headers spanning blocks)."""
    return ShardHeader(db="d" + "x" * pad, shard=0, shards=1, seq=seq, by_id=None, by_seq=None)


def open_quietly(fs: MemoryFileSystem | OsFileSystem, path: str = PATH) -> ShardFile:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TornTailWarning)
        return ShardFile.open(fs, path, create=False)


def commit(shard: ShardFile, terms: list[Any], header: ShardHeader) -> tuple[list[int], Commit]:
    """The writer's durability order: batch, sync, header, sync."""
    batch = shard.new_batch()
    positions = [batch.add(t) for t in terms]
    shard.write_batch(batch)
    shard.sync()
    shard.write_header(header)
    shard.sync()
    assert shard.header_offset is not None and shard.header is not None
    return positions, Commit(shard.header_offset, shard.size(), shard.header)


def damaged(data: bytes, offset: int, xor: int) -> bytes:
    out = bytearray(data)
    out[offset] ^= xor
    return bytes(out)


@pytest.fixture
def memfs() -> MemoryFileSystem:
    return MemoryFileSystem()


# -- round trips --------------------------------------------------------------------------------


def test_new_file_has_no_header(memfs: MemoryFileSystem) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        assert (shard.header, shard.header_offset, shard.size(), shard.created) == (
            None,
            None,
            0,
            True,
        )
    with ShardFile.open(memfs, PATH, create=True) as shard:
        assert shard.created is False


def test_round_trip_across_reopen(tmp_path: Path) -> None:
    fs, path = OsFileSystem(), str(tmp_path / "s")
    terms = [None, 1, "x", b"\x00" * 5000, {"a": [1, 2, {"b": "c" * 9000}]}, list(range(3000))]
    with ShardFile.open(fs, path, create=True) as shard:
        positions, first = commit(shard, terms, hdr(1))
        root = [positions[1], [3, 0, [5, 6]]]  # lists and tuples compare alike once stored
        more, second = commit(shard, ["after"], replace(hdr(2), by_id=as_root(root)))
        assert shard.header == second.header and shard.header.by_id == (
            positions[1],
            (3, 0, (5, 6)),
        )
    with ShardFile.open(fs, path, create=False) as shard:
        assert shard.header == second.header
        assert (shard.header.prev, shard.header.data_start) == (first.offset, first.end)
        assert shard.header_offset == second.offset and shard.size() == second.end
        assert [shard.read_term(p) for p in positions + more] == [*terms, "after"]


def test_header_is_padded_to_a_block_boundary(memfs: MemoryFileSystem) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        _, c = commit(shard, ["abc"], hdr(1))
    data = memfs.contents(PATH)
    assert c.offset == B and data[c.offset] == fmt.BLOCK_HEADER
    assert set(data[len(fmt.lay_out(fmt.encode_frame(fmt.encode_payload("abc")), 0)) : B]) == {0}


def test_multi_block_header_round_trip(memfs: MemoryFileSystem) -> None:
    big = hdr(1, pad=3 * B)
    with ShardFile.open(memfs, PATH, create=True) as shard:
        commit(shard, [1], big)
        pos, _ = commit(shard, [2], hdr(2))
        _, last = commit(shard, [3], big)
    with open_quietly(memfs) as shard:
        assert shard.header == last.header and shard.header_offset == last.offset
        assert shard.read_term(pos[0]) == 2


@given(
    st.lists(st.lists(st.integers(0, 3 * B), min_size=1, max_size=6), min_size=1, max_size=4),
    st.integers(0, B),
)
def test_batch_positions_are_real_positions(batches: list[list[int]], lead: int) -> None:
    fs = MemoryFileSystem()
    fs.set_contents(PATH, b"")
    with ShardFile.open(fs, PATH, create=False) as shard:
        shard.write_header(hdr(0, pad=lead))  # starts the batches at an arbitrary offset
        written: list[tuple[int, bytes]] = []
        for sizes in batches:
            batch = shard.new_batch()
            for size in sizes:
                payload = bytes([size % 251]) * size
                written.append((batch.add(payload), payload))
            shard.write_batch(batch)
            assert shard.size() == batch.end == len(fs.contents(PATH))
        data = fs.contents(PATH)
        for pos, payload in written:
            frame = fmt.encode_frame(fmt.encode_payload(payload))
            laid = data[pos : pos + fmt.laid_out_size(pos, len(frame))]
            assert fmt.strip_markers(laid, pos)[0] == frame
            assert shard.read_term(pos) == payload


def test_stale_batch_is_refused(memfs: MemoryFileSystem) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        first, second = shard.new_batch(), shard.new_batch()
        first.add("a")
        second.add("b")
        shard.write_batch(first)
        with pytest.raises(SetteeError, match="stale batch"):
            shard.write_batch(second)


def test_a_large_batch_appends_early_and_holds_at_most_one_spill_of_bytes() -> None:
    """A batch bigger than SPILL_BYTES reaches the file as it is built (an
    attachment-heavy commit is never in memory whole), its positions unchanged."""
    fs = CountingFileSystem(MemoryFileSystem())
    term = os.urandom(100_000)
    with ShardFile.open(fs, PATH, create=True) as shard:
        fs.reset()
        batch = shard.new_batch()
        positions = []
        for _ in range(40):
            positions.append(batch.add(term))
            assert len(batch.data()) < SPILL_BYTES + fmt.laid_out_size(0, len(term) + 64)
        assert fs.counts["append"] >= 3 and shard.size() > batch.start
        shard.write_batch(batch)
        assert shard.size() == batch.end
        shard.write_header(hdr(1))
    with ShardFile.open(fs, PATH, create=False) as reopened:
        assert reopened.header is not None and reopened.header.seq == 1
        assert all(reopened.read_term(pos) == term for pos in positions)


def test_a_batch_made_before_an_early_append_is_stale(memfs: MemoryFileSystem) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        first, second = shard.new_batch(), shard.new_batch()
        second.add("b")
        while shard.size() == first.start:
            first.add(os.urandom(50_000))  # until it appends early
        with pytest.raises(SetteeError, match="stale batch"):
            shard.write_batch(second)
        shard.write_batch(first)


def test_small_term_is_one_pread_and_batch_is_one_append() -> None:
    fs = CountingFileSystem(MemoryFileSystem())
    with ShardFile.open(fs, PATH, create=True) as shard:
        fs.reset()
        positions, _ = commit(shard, [{"n": i, "body": "b" * 300} for i in range(50)], hdr(0))
        assert fs.counts["append"] == 2 and fs.counts["pwrite"] == 0  # batch + header
        fs.reset()
        assert shard.read_term(positions[7]) == {"n": 7, "body": "b" * 300}
        assert fs.counts["pread"] == 1 and fs.counts["size"] == 0


def test_adjacent_sized_reads_are_one_pread_whether_or_not_terms_straddle_a_block() -> None:
    """Bodies one after another in the file (a commit's, read in id order) come in
    one coalesced pread, up to COALESCE_BYTES a read: a pread per body was a
    quarter of a range read."""
    fs = CountingFileSystem(MemoryFileSystem())
    terms = [{"n": i, "body": "b" * 300} for i in range(400)]  # ~125 KiB
    with ShardFile.open(fs, PATH, create=True) as shard:
        positions, _ = commit(shard, terms, hdr(0))
        pointers = [
            (pos, len(fmt.encode_payload(t))) for pos, t in zip(positions, terms, strict=True)
        ]
        straddling = [p for p, n in pointers if p // B != (p + fmt.FRAME_SIZE + n - 1) // B]
        assert straddling, "the batch must lay some term across a block boundary"
        fs.reset()
        assert shard.read_sized(pointers[:50]) == terms[:50]
        assert fs.counts["pread"] == 1
        fs.reset()
        assert shard.read_sized(pointers) == terms
        span = pointers[-1][0] - pointers[0][0]
        assert fs.counts["pread"] == -(-span // COALESCE_BYTES)
        fs.reset()
        # Out of file order, nothing is coalesced, and nothing is read twice either.
        assert shard.read_sized(pointers[10::-2]) == terms[10::-2]
        assert fs.counts["pread"] == len(terms[10::-2])


def test_forty_megabyte_term_is_one_append_and_two_preads(tmp_path: Path) -> None:
    fs = CountingFileSystem(OsFileSystem())
    blob = bytes(range(256)) * (40 * 2**20 // 256)
    with ShardFile.open(fs, str(tmp_path / "big"), create=True) as shard:
        fs.reset()
        batch = shard.new_batch()
        pos = batch.add(blob)
        shard.write_batch(batch)
        assert fs.counts["append"] == 1
        fs.reset()
        assert shard.read_term(pos) == blob
        assert fs.counts["pread"] == 2
        assert fs.bytes_read == fmt.laid_out_size(pos, fmt.FRAME_SIZE + 5 + len(blob))


def test_open_never_writes(memfs: MemoryFileSystem) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        commit(shard, ["a"], hdr(1))
        shard.write_batch(_batch_of(shard, ["torn"]))
    before = memfs.contents(PATH)
    fs = CountingFileSystem(memfs)
    with pytest.warns(TornTailWarning):
        ShardFile.open(fs, PATH, create=True).close()
    assert not {"append", "pwrite", "truncate", "fsync"} & set(fs.counts)
    assert memfs.contents(PATH) == before


def _batch_of(shard: ShardFile, terms: list[Any]) -> Any:
    batch = shard.new_batch()
    for t in terms:
        batch.add(t)
    return batch


def test_open_missing_file_without_create_is_clear(memfs: MemoryFileSystem) -> None:
    with pytest.raises(SetteeError, match="create=True"):
        ShardFile.open(memfs, PATH, create=False)


def test_closed_shard_file_refuses_reads(memfs: MemoryFileSystem) -> None:
    shard = ShardFile.open(memfs, PATH, create=True)
    (pos,), _ = commit(shard, ["x"], hdr(1))
    shard.close()
    shard.close()
    with pytest.raises(SetteeError, match="closed"):
        shard.read_term(pos)


# -- truncation and bit flips, exhaustively -----------------------------------------------------


def _history(fs: MemoryFileSystem, big_last_header: bool) -> list[Commit]:
    with ShardFile.open(fs, PATH, create=True) as shard:
        commits = [commit(shard, ["a", "b" * 100], hdr(0))[1]]
        commits.append(commit(shard, ["c" * 3000], hdr(1))[1])
        commits.append(commit(shard, ["d"], hdr(2))[1])
        last = hdr(3, pad=5000 if big_last_header else 10)
        commits.append(commit(shard, ["e" * 200], last)[1])
    return commits


@pytest.mark.parametrize("big_last_header", [False, True])
def test_truncation_at_every_offset_of_last_two_blocks(big_last_header: bool) -> None:
    fs = MemoryFileSystem()
    commits = _history(fs, big_last_header)
    data = fs.contents(PATH)
    for cut in range(max(0, len(data) - 2 * B), len(data) + 1):
        fs.set_contents(PATH, data[:cut])
        complete = [c for c in commits if c.end <= cut]
        expected = complete[-1] if complete else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            shard = ShardFile.open(fs, PATH, create=False)
        assert shard.header == (expected.header if expected else None), cut
        tail = cut - (expected.end if expected else 0)
        messages = [str(w.message) for w in caught if w.category is TornTailWarning]
        assert len(messages) == (1 if tail else 0), (cut, messages)
        assert all(f"ignoring {tail} bytes" in m for m in messages), (cut, messages)
        shard.close()


def _file_with_straddling_term(fs: MemoryFileSystem, term: Any) -> tuple[int, int]:
    """A committed file whose ``term`` crosses a block boundary; returns (pos, laid-out span)."""
    with ShardFile.open(fs, PATH, create=True) as shard:
        commit(shard, ["first"], hdr(0))
        filler = 2 * B - 6 - shard.size() - fmt.FRAME_SIZE - 5
        batch = shard.new_batch()
        batch.add(b"f" * filler)
        pos = batch.add(term)
        shard.write_batch(batch)
        shard.write_header(hdr(1))
    frame = fmt.encode_frame(fmt.encode_payload(term))
    span = fmt.laid_out_size(pos, len(frame))
    assert pos < 2 * B < pos + span, "term must straddle the boundary at 2 * B"
    return pos, span


@pytest.mark.parametrize("sized", [False, True])
def test_every_bit_flip_in_a_term_raises_corruption(sized: bool) -> None:
    """Both ways of reading a term that straddles a block boundary: by its own
    length, and by a stored size (``read_sized``'s fast path, which drops the
    marker byte itself)."""
    fs = MemoryFileSystem()
    term = {"k": "small"}
    pos, span = _file_with_straddling_term(fs, term)
    size = len(fmt.encode_payload(term)) if sized else None
    data = fs.contents(PATH)
    with open_quietly(fs) as shard:
        assert shard.read_term(pos, size) == term
    for bit in range(span * 8):
        fs.set_contents(PATH, damaged(data, pos + bit // 8, 1 << (bit % 8)))
        with open_quietly(fs) as shard:
            assert shard.header is not None and shard.header.seq == 1
            with pytest.raises(CorruptionError):
                shard.read_term(pos, size)


@given(st.binary(min_size=0, max_size=3 * B), st.data())
def test_random_bit_flip_in_any_term_raises_corruption(payload: bytes, data: st.DataObject) -> None:
    fs = MemoryFileSystem()
    with ShardFile.open(fs, PATH, create=True) as shard:
        (pos,), _ = commit(shard, [payload], hdr(0))
    span = fmt.laid_out_size(pos, fmt.FRAME_SIZE + len(fmt.encode_payload(payload)))
    bit = data.draw(st.integers(0, span * 8 - 1))
    fs.set_contents(PATH, damaged(fs.contents(PATH), pos + bit // 8, 1 << (bit % 8)))
    with open_quietly(fs) as shard, pytest.raises(CorruptionError):
        shard.read_term(pos)


@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=20),
    st.integers(-(2**64), 2**64),
    st.data(),
)
def test_a_size_hint_never_gives_a_wrong_term(
    terms: list[bytes], hint: int, data: st.DataObject
) -> None:
    """``read_term(pos, payload_size)`` trusts the hint only to choose its reads (the
    one-block fast path for document bodies): any hint gives the term, and a flipped
    bit under a right hint is still caught."""
    fs = MemoryFileSystem()
    with ShardFile.open(fs, PATH, create=True) as shard:
        positions, _ = commit(shard, terms, hdr(0))
    index = data.draw(st.integers(0, len(terms) - 1))
    pos, term = positions[index], terms[index]
    size = len(fmt.encode_payload(term))
    with open_quietly(fs) as shard:
        assert shard.read_term(pos, hint) == term
        assert shard.read_term(pos, size) == term
    bit = data.draw(st.integers(0, (fmt.FRAME_SIZE + size) * 8 - 1))
    fs.set_contents(PATH, damaged(fs.contents(PATH), pos + bit // 8, 1 << (bit % 8)))
    with open_quietly(fs) as shard, pytest.raises(CorruptionError):
        shard.read_term(pos, size)


@given(st.lists(st.binary(max_size=2 * B), min_size=1, max_size=24), st.data())
def test_a_batch_of_sized_reads_gives_every_term_or_names_the_damage(
    terms: list[bytes], data: st.DataObject
) -> None:
    """``read_sized`` cuts many frames from one coalesced pread: in any order, with
    repeats, with wrong sizes among right ones, every pointer gets its own term;
    a flipped bit in any frame of the batch, or a file cut short inside one, is a
    CorruptionError, never another frame's term."""
    fs = MemoryFileSystem()
    with ShardFile.open(fs, PATH, create=True) as shard:
        positions, _ = commit(shard, terms, hdr(0))
    sizes = [len(fmt.encode_payload(t)) for t in terms]
    picks = data.draw(st.lists(st.integers(0, len(terms) - 1), min_size=1, max_size=40))
    wrong = st.integers(-(2**64), 2**64) | st.sampled_from([None, 0, 1])
    hints = [data.draw(st.just(sizes[i]) | wrong) for i in picks]
    with open_quietly(fs) as shard:
        assert shard.read_sized([(positions[i], h) for i, h in zip(picks, hints, strict=True)]) == [
            terms[i] for i in picks
        ]
    pointers = [(positions[i], sizes[i]) for i in picks]
    victim = data.draw(st.sampled_from(picks))
    span = fmt.laid_out_size(positions[victim], fmt.FRAME_SIZE + sizes[victim])
    original = fs.contents(PATH)
    if data.draw(st.booleans(), label="truncate"):
        fs.set_contents(PATH, original[: positions[victim] + data.draw(st.integers(0, span - 1))])
    else:
        bit = data.draw(st.integers(0, span * 8 - 1))
        fs.set_contents(PATH, damaged(original, positions[victim] + bit // 8, 1 << (bit % 8)))
    with open_quietly(fs) as shard, pytest.raises(CorruptionError):
        shard.read_sized(pointers)


@pytest.mark.parametrize("hint", [-1, 0, 3, 2**32, 2**64, None, 5.0, "5", True, float("nan")])
def test_a_wild_size_hint_on_a_real_file_still_reads_the_term(tmp_path: Path, hint: Any) -> None:
    """A size comes from a stored pointer; whatever a writer bug left there, the term
    is read by its own length (found by review: a None size was a raw TypeError)."""
    path = str(tmp_path / "shard")
    with ShardFile.open(OsFileSystem(), path, create=True) as shard:
        (pos,), _ = commit(shard, [{"k": "v"}], hdr(0))
    with open_quietly(OsFileSystem(), path) as shard:
        assert shard.read_sized([(pos, hint), (pos, 7)]) == [{"k": "v"}, {"k": "v"}]
        if isinstance(hint, int):
            assert shard.read_term(pos, hint) == {"k": "v"}


@pytest.mark.parametrize("pos", [None, "8", 8.0, True])
def test_a_position_that_is_not_an_int_is_corruption(memfs: MemoryFileSystem, pos: Any) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        commit(shard, [{"k": "v"}], hdr(0))
    with open_quietly(memfs) as shard, pytest.raises(CorruptionError):
        shard.read_sized([(pos, 7)])


def _two_headers(fs: MemoryFileSystem, last_header: ShardHeader) -> tuple[Commit, Commit]:
    with ShardFile.open(fs, PATH, create=True) as shard:
        _, older = commit(shard, ["a"], hdr(1))
        _, newer = commit(shard, ["b"], last_header)
    return older, newer


def test_every_bit_flip_in_newest_header_falls_back_to_previous() -> None:
    fs = MemoryFileSystem()
    older, newer = _two_headers(fs, hdr(2))
    data = fs.contents(PATH)
    for bit in range((newer.end - newer.offset) * 8):
        fs.set_contents(PATH, damaged(data, newer.offset + bit // 8, 1 << (bit % 8)))
        with pytest.warns(TornTailWarning), ShardFile.open(fs, PATH, create=False) as shard:
            assert shard.header == older.header, bit
            assert shard.header_offset == older.offset


def test_bit_flips_in_multi_block_header_fall_back_to_previous() -> None:
    fs = MemoryFileSystem()
    older, newer = _two_headers(fs, hdr(2, pad=2 * B))
    data = fs.contents(PATH)
    rng = random.Random(1234)
    size = newer.end - newer.offset
    marker_bits = [8 * (B + k) for k in range(8)]  # the continuation block's marker byte
    bits = list(range(64 * 8)) + marker_bits + rng.sample(range(size * 8), 200)
    for bit in bits:
        fs.set_contents(PATH, damaged(data, newer.offset + bit // 8, 1 << (bit % 8)))
        with open_quietly(fs) as shard:
            assert shard.header == older.header, bit


# -- the damage table of FORMAT.md, one test per row --------------------------------------------


def test_damage_empty_file(memfs: MemoryFileSystem) -> None:
    memfs.set_contents(PATH, b"")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ShardFile.open(memfs, PATH, create=False) as shard:
            assert shard.header is None and shard.size() == 0


def test_damage_torn_tail(memfs: MemoryFileSystem) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        (pos,), c = commit(shard, ["kept"], hdr(1))
        batch = _batch_of(shard, ["uncommitted" * 50])
        shard.write_batch(batch)
    torn = memfs.contents(PATH)[: c.end + 300]
    memfs.set_contents(PATH, torn)
    with pytest.warns(TornTailWarning, match="ignoring 300 bytes"):
        shard = ShardFile.open(memfs, PATH, create=False)
    assert shard.header == c.header and shard.read_term(pos) == "kept"
    assert memfs.contents(PATH) == torn  # bytes kept
    (more,), after = commit(shard, ["next"], hdr(2))  # appends go after the tail
    assert more >= len(torn) and shard.read_term(more) == "next"
    # The next header records where its data began: after the kept tail, not at c.end.
    assert (after.header.data_start, after.header.prev) == (len(torn), c.offset)
    shard.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert open_quietly(memfs).header == after.header


def test_damage_torn_header(memfs: MemoryFileSystem) -> None:
    older, newer = _two_headers(memfs, hdr(2, pad=100))
    memfs.set_contents(PATH, memfs.contents(PATH)[: newer.end - 1])
    with pytest.warns(TornTailWarning):
        assert ShardFile.open(memfs, PATH, create=False).header == older.header


def test_damage_bad_crc_in_header(memfs: MemoryFileSystem) -> None:
    older, newer = _two_headers(memfs, hdr(2))
    crc_offset = newer.offset + 1 + fmt.HEADER_SIZE - 4
    memfs.set_contents(PATH, damaged(memfs.contents(PATH), crc_offset, 0xFF))
    with pytest.warns(TornTailWarning):
        assert ShardFile.open(memfs, PATH, create=False).header == older.header


def test_damage_bad_marker_in_header(memfs: MemoryFileSystem) -> None:
    older, newer = _two_headers(memfs, hdr(2, pad=B))
    memfs.set_contents(PATH, damaged(memfs.contents(PATH), newer.offset + B, 0x02))
    with pytest.warns(TornTailWarning):
        assert ShardFile.open(memfs, PATH, create=False).header == older.header


def test_damage_wrong_magic(memfs: MemoryFileSystem) -> None:
    older, newer = _two_headers(memfs, hdr(2))
    # A data block whose marker flipped to HEADER is a candidate with the wrong magic.
    with ShardFile.open(memfs, PATH, create=False) as shard:
        shard.write_batch(_batch_of(shard, ["w" * (2 * B)]))
        (pos,), last = commit(shard, ["z"], hdr(3))
    flipped_block = newer.end // B * B + B
    data = damaged(memfs.contents(PATH), flipped_block, fmt.BLOCK_HEADER)
    data = damaged(data, newer.offset + 1, 0x40)  # newer's magic too
    memfs.set_contents(PATH, data)
    with open_quietly(memfs) as shard:
        assert shard.header == last.header and shard.read_term(pos) == "z"
    memfs.set_contents(PATH, data[: flipped_block + 100])  # now the bad block is the newest
    with pytest.warns(TornTailWarning):
        assert ShardFile.open(memfs, PATH, create=False).header == older.header


def test_damage_wrong_version(memfs: MemoryFileSystem) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        commit(shard, ["a"], hdr(1))
    data = memfs.contents(PATH)
    future = fmt.lay_out(fmt.encode_header(b"\xc0", version=fmt.FORMAT_VERSION + 1), B, 1)
    memfs.set_contents(PATH, data[:B] + future)
    expected = rf"format version {fmt.FORMAT_VERSION + 1}.*reads version {fmt.FORMAT_VERSION} only"
    with pytest.raises(SetteeError, match=expected):
        ShardFile.open(memfs, PATH, create=False)


def test_version_1_shard_file_is_refused_with_dump_and_load_advice(memfs: MemoryFileSystem) -> None:
    """A file written before headers chained (format 1) is refused, not misread."""
    v1_payload = fmt.encode_payload({"db": "d", "shard": 0, "shards": 1, "seq": 0})
    old = b"\x00" + bytes(B - 1) + fmt.lay_out(fmt.encode_header(v1_payload, version=1), B, 1)
    memfs.set_contents(PATH, old)
    with pytest.raises(SetteeError, match="format version 1") as info:
        ShardFile.open(memfs, PATH, create=False)
    assert "`settee dump`" in str(info.value) and "`settee load`" in str(info.value)
    assert memfs.contents(PATH) == old  # refused, never rewritten


def test_version_1_database_metadata_is_refused_with_dump_and_load_advice(tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    settee.open(path, shards=1).close()
    meta = tmp_path / "db" / "settee.meta"
    info = fmt.decode_payload(fmt.decode_frame(meta.read_bytes()))
    meta.write_bytes(fmt.encode_frame(fmt.encode_payload({**info, "format": 1})))
    with pytest.raises(SetteeError, match="format version 1") as info:
        settee.open(path)
    assert "`settee dump`" in str(info.value) and "`settee load`" in str(info.value)


def test_damage_malformed_header_payload(memfs: MemoryFileSystem) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        commit(shard, ["a"], hdr(1))
    data = memfs.contents(PATH)
    data += bytes(fmt.padding_size(len(data)))
    bad = fmt.encode_payload({"db": "d", "shard": 0, "shards": 1, "seq": 0})  # no roots etc.
    memfs.set_contents(PATH, data + fmt.lay_out(fmt.encode_header(bad), len(data), 1))
    with pytest.raises(CorruptionError, match="malformed shard header") as info:
        ShardFile.open(memfs, PATH, create=False)
    assert info.value.offset == len(data)


def test_write_header_refuses_a_malformed_header_before_writing(memfs: MemoryFileSystem) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        _, c = commit(shard, ["a"], hdr(1))
        with pytest.raises(CorruptionError, match="shard 1 is not below"):
            shard.write_header(replace(hdr(2), shard=1))
        assert shard.size() == c.end and shard.header == c.header
    assert len(memfs.contents(PATH)) == c.end


def test_every_damage_row_of_format_md_has_its_test() -> None:
    text = (Path(fmt.__file__).parent / "FORMAT.md").read_text()
    table = text.split("## Damaged files")[1].split("\n## ")[0]
    rows = re.findall(r"^\| `(\w+)`", table, re.M)
    here = Path(__file__).parent
    tests = (here / "test_shard_file.py").read_text() + (here / "test_walker.py").read_text()
    assert len(rows) >= 18
    assert [r for r in rows if f"def test_damage_{r}(" not in tests] == []


@pytest.mark.parametrize("start", [b"\x00", b"\x01", b"\x01" + fmt.MAGIC[:5], b"\x00" * 9000])
def test_damage_no_valid_header(memfs: MemoryFileSystem, start: bytes) -> None:
    memfs.set_contents(PATH, start)
    with pytest.warns(TornTailWarning, match=f"ignoring {len(start)} bytes"):
        shard = ShardFile.open(memfs, PATH, create=False)
    assert shard.header is None and shard.size() == len(start)
    _, c = commit(shard, ["fresh"], hdr(1))
    assert open_quietly(memfs).header == c.header and c.offset == -(-len(start) // B) * B
    assert (c.header.prev, c.header.data_start) == (None, len(start))  # the tail is kept


@pytest.mark.parametrize("content", [b"hello world\n", b"\x01NOTMAGIC" + bytes(100), b"\xff"])
def test_damage_not_a_settee_file(memfs: MemoryFileSystem, content: bytes) -> None:
    memfs.set_contents(PATH, content)
    with pytest.raises(SetteeError, match="not a settee shard file"):
        ShardFile.open(memfs, PATH, create=False)
    assert memfs.contents(PATH) == content


def test_damage_bad_crc_in_term(memfs: MemoryFileSystem) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        (pos, other), _ = commit(shard, ["victim", "bystander"], hdr(1))
    memfs.set_contents(PATH, damaged(memfs.contents(PATH), pos + fmt.FRAME_SIZE + 2, 0x01))
    with ShardFile.open(memfs, PATH, create=False) as shard:
        with pytest.raises(CorruptionError, match="crc") as info:
            shard.read_term(pos)
        assert (info.value.path, info.value.offset) == (PATH, pos)
        assert shard.read_term(other) == "bystander"


def test_damage_bad_marker_in_term() -> None:
    fs = MemoryFileSystem()
    pos, _ = _file_with_straddling_term(fs, {"k": "small"})
    fs.set_contents(PATH, damaged(fs.contents(PATH), 2 * B, 0x80))
    with ShardFile.open(fs, PATH, create=False) as shard:
        with pytest.raises(CorruptionError, match="marker") as info:
            shard.read_term(pos)
        assert info.value.offset == 2 * B


@pytest.mark.parametrize("size", [10, READ_AHEAD * 3])
def test_damage_truncated_term(memfs: MemoryFileSystem, size: int) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        commit(shard, ["a"], hdr(1))
        batch = _batch_of(shard, [])
        pos = batch.add(b"t" * size)
        shard.write_batch(batch)
    memfs.set_contents(PATH, memfs.contents(PATH)[:-1])
    with open_quietly(memfs) as shard, pytest.raises(CorruptionError, match="past end of file"):
        shard.read_term(pos)


def test_damage_length_past_eof() -> None:
    mem = MemoryFileSystem()
    fs = CountingFileSystem(mem)
    with ShardFile.open(fs, PATH, create=True) as shard:
        (pos,), _ = commit(shard, [b"p" * 20_000], hdr(1))
    mem.set_contents(PATH, damaged(mem.contents(PATH), pos + 3, 0x80))  # length += 2**31
    with ShardFile.open(fs, PATH, create=False) as shard:
        fs.reset()
        with pytest.raises(CorruptionError, match="past end of file"):
            shard.read_term(pos)
        assert fs.counts["pread"] == 1  # the 2 GiB length was never read or allocated


@pytest.mark.parametrize("pos", [0, -3, B, 7 * B])
def test_damage_position_on_block_boundary(memfs: MemoryFileSystem, pos: int) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        commit(shard, ["a"], hdr(1))
        with pytest.raises(CorruptionError, match="not a term position"):
            shard.read_term(pos)


def test_damage_undecodable_payload(memfs: MemoryFileSystem) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        batch = shard.new_batch()
        pos = batch.add_encoded(b"\xc1")  # 0xc1 is never valid msgpack
        shard.write_batch(batch)
        shard.write_header(hdr(1))
        with pytest.raises(CorruptionError, match="undecodable"):
            shard.read_term(pos)


def test_damage_malformed_by_id_value(memfs: MemoryFileSystem) -> None:
    """A by_id leaf holding a value that is not six fields of their types: every read
    of the leaf from the file is CorruptionError naming the document (an honest
    neighbour's read too); ``settee check``'s unchecked tree reads it as stored."""
    honest = (1, False, "1-" + "a" * 32, 3, b"\x92\x80\x80", (4100, 3))
    with ShardFile.open(memfs, PATH, create=True) as shard:
        batch = shard.new_batch()
        written = by_id_tree(shard, None, NodeCache()).modify(
            batch, [("a", honest), ("b", honest[:5])], []
        )
        shard.write_batch(batch)
        shard.write_header(replace(hdr(1), by_id=as_root(written.root)))
        with pytest.raises(CorruptionError, match="'b' is malformed"):
            by_id_tree(shard, written.root, NodeCache()).get("a")
        unchecked = by_id_tree(shard, written.root, NodeCache(), checked=False)
        assert unchecked.get_many(["a", "b"]) == [honest, honest[:5]]


# -- FORMAT.md matches the bytes ----------------------------------------------------------------


def _tiny_unlay(data: bytes, pos: int, n: int) -> tuple[bytes, list[int], int]:
    """Read n logical bytes from pos, collecting the marker at each block boundary."""
    out, markers = bytearray(), []
    while len(out) < n:
        if pos % fmt.BLOCK_SIZE == 0:
            markers.append(data[pos])
        else:
            out.append(data[pos])
        pos += 1
    return bytes(out), markers, pos


def _tiny_read_term(data: bytes, pos: int) -> Any:
    prefix, m1, after = _tiny_unlay(data, pos, 8)
    length, crc = struct.unpack(fmt.FRAME.format, prefix)
    payload, m2, _ = _tiny_unlay(data, after, length)
    assert set(m1 + m2) <= {fmt.BLOCK_DATA}
    assert crc32c.crc32c(prefix[:4] + payload) == crc
    return msgpack.unpackb(payload, raw=False, strict_map_key=False)


def _tiny_newest_header(data: bytes) -> tuple[int, Any]:
    for block in range((len(data) - 1) // fmt.BLOCK_SIZE * fmt.BLOCK_SIZE, -1, -fmt.BLOCK_SIZE):
        if data[block] != fmt.BLOCK_HEADER:
            continue
        fields, _, after = _tiny_unlay(data, block + 1, fmt.HEADER_SIZE)
        magic, version, length, crc = struct.unpack(fmt.HEADER.format, fields)
        payload, markers, _ = _tiny_unlay(data, after, length)
        if magic == fmt.MAGIC and crc32c.crc32c(fields[:16] + payload) == crc:
            assert version == fmt.FORMAT_VERSION and set(markers) <= {fmt.BLOCK_DATA}
            return block, msgpack.unpackb(payload, raw=False, strict_map_key=False)
    raise AssertionError("no header")


def test_independent_decoder_reads_fresh_file(memfs: MemoryFileSystem) -> None:
    terms = ["x" * n for n in (0, 1, 100, B - 20, B, 3 * B + 5)] + [{"k": [1, 2]}] * 30
    with ShardFile.open(memfs, PATH, create=True) as shard:
        positions, first = commit(shard, terms[:4], hdr(1))
        root = as_root([positions[0], 4])
        more, last = commit(shard, terms[4:], replace(hdr(2), by_seq=root))
    data = memfs.contents(PATH)
    assert [_tiny_read_term(data, p) for p in positions + more] == terms
    payload = {"db": "d", "shard": 0, "shards": 1, "seq": 2, "by_id": None}
    payload |= {"by_seq": [positions[0], 4], "data_start": first.end, "prev": first.offset}
    assert _tiny_newest_header(data) == (last.offset, payload)
    # Every block boundary holds a marker: HEADER exactly where headers start.
    header_blocks = [b for b in range(0, len(data), B) if data[b] == fmt.BLOCK_HEADER]
    assert set(data[::B]) <= {fmt.BLOCK_DATA, fmt.BLOCK_HEADER} and last.offset in header_blocks


def _format_md_example() -> bytes:
    text = (Path(fmt.__file__).parent / "FORMAT.md").read_text()
    block = re.search(r"```hex\n(.*?)```", text, re.S)
    assert block, "FORMAT.md lost its worked example"
    out, last = bytearray(), b""
    repeat = False
    for line in block.group(1).splitlines():
        if line.strip() == "*":
            repeat = True
            continue
        offset, _, hexbytes = line.partition("  ")
        while repeat and len(out) < int(offset, 16):
            out += last
        repeat, last = False, bytes.fromhex(hexbytes)
        assert len(out) == int(offset, 16), line
        out += last
    return bytes(out)


def test_format_md_worked_example_matches_bytes(memfs: MemoryFileSystem) -> None:
    with ShardFile.open(memfs, PATH, create=True) as shard:
        batch = shard.new_batch()
        assert [batch.add("hello"), batch.add([1, 2])] == [1, 15]
        shard.write_batch(batch)
        shard.write_header(ShardHeader("9f1c6e0a4b2d4e8f8a7b3c2d1e0f5a6b", 0, 1, 0, None, None))
    assert memfs.contents(PATH) == _format_md_example()


# -- concurrency --------------------------------------------------------------------------------


def test_concurrent_readers_while_writer_appends(tmp_path: Path) -> None:
    fs, path = OsFileSystem(), str(tmp_path / "c")
    shard = ShardFile.open(fs, path, create=True)
    published: list[tuple[int, Any]] = []
    done = threading.Event()
    failures: list[str] = []
    reads_while_writing = [0, 0, 0]

    def writer() -> None:
        rng = random.Random(7)
        for n in range(300):
            time.sleep(0)  # let readers run between appends
            terms = [[n, i, "v" * rng.choice([0, 10, 900, B, 3 * B])] for i in range(8)]
            batch = _batch_of(shard, [])
            positions = [batch.add(t) for t in terms]
            shard.write_batch(batch)
            if n % 10 == 0:
                shard.write_header(hdr(n))
            published.extend(zip(positions, terms, strict=True))  # only after the write
        done.set()

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not done.is_set():
            if published:
                reads_while_writing[seed] += 1
                pos, expected = published[rng.randrange(len(published))]
                try:
                    if shard.read_term(pos) != expected:
                        failures.append(f"wrong data at {pos}")
                except CorruptionError as exc:
                    failures.append(str(exc))

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader, args=(s,)) for s in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert min(reads_while_writing) > 20, reads_while_writing
    assert all(shard.read_term(pos) == term for pos, term in published)
    shard.close()


@pytest.fixture(autouse=True)
def _no_stray_threads() -> Iterator[None]:
    before = threading.active_count()
    yield
    assert threading.active_count() == before


@given(
    start=st.integers(0, 3 * fmt.BLOCK_SIZE),
    sizes=st.lists(st.integers(0, fmt.BLOCK_SIZE + 20), min_size=1, max_size=4),
)
def test_a_batch_lays_out_its_frames_as_the_format_says(start: int, sizes: list[int]) -> None:
    """``TermBatch.add_encoded`` builds a frame that fits in its block inline; every
    frame, inline or not, is ``lay_out(encode_frame(payload))`` at ``term_position``."""
    batch = TermBatch(start, start)
    want, end = [], start
    for n, size in enumerate(sizes):
        payload = bytes([n]) * size
        assert batch.add_encoded(payload) == fmt.term_position(end)
        laid = fmt.lay_out(fmt.encode_frame(payload), end)
        want.append(laid)
        end += len(laid)
    assert batch.data() == b"".join(want) and batch.end == end
