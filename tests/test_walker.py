"""impl/walker.py: every commit of a shard file, oldest to newest, and what lies between.

The ``test_damage_<row>`` tests here are the rows of the damage table in spec/FORMAT.md
about walking commits (the rows about opening and reading are in test_shard_file.py).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

import settee
from settee.check import check_database
from settee.file import ShardFile, TornTailWarning
from settee.io import MemoryFileSystem
from settee.layout import shard_path
from settee.spec import format as fmt
from settee.spec.format import ShardHeader
from settee.walker import Commit, Finding, walk

B = fmt.BLOCK_SIZE
PATH = "/db/shard"


@dataclass
class Written:
    """One commit as the test wrote it."""

    positions: list[int]
    offset: int
    end: int
    header: ShardHeader


def hdr(seq: int) -> ShardHeader:
    return ShardHeader(db="d", shard=0, shards=1, seq=seq, by_id=None, by_seq=None)


def commit(shard: ShardFile, terms: list[Any], seq: int) -> Written:
    batch = shard.new_batch()
    positions = [batch.add(t) for t in terms]
    shard.write_batch(batch)
    shard.write_header(hdr(seq))
    assert shard.header is not None and shard.header_offset is not None
    return Written(positions, shard.header_offset, shard.size(), shard.header)


def reopen(fs: MemoryFileSystem) -> ShardFile:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TornTailWarning)
        return ShardFile.open(fs, PATH, create=False)


def walked(fs: MemoryFileSystem) -> tuple[list[Commit], list[Finding], list[Finding]]:
    """(commits, problems, notes) of the file at PATH."""
    with reopen(fs) as shard:
        items = list(walk(shard))
    commits = [i for i in items if isinstance(i, Commit)]
    findings = [i for i in items if isinstance(i, Finding)]
    return (
        commits,
        [f for f in findings if f.kind == "problem"],
        [f for f in findings if f.kind == "note"],
    )


def flip(fs: MemoryFileSystem, offset: int, mask: int = 0x01) -> None:
    data = bytearray(fs.contents(PATH))
    data[offset] ^= mask
    fs.set_contents(PATH, bytes(data))


def three_commits(fs: MemoryFileSystem) -> list[Written]:
    with ShardFile.open(fs, PATH, create=True) as shard:
        return [commit(shard, [f"{n}" * 50, "x" * (n * 3000 + 100)], n) for n in range(3)]


# -- the regression that made the walker -------------------------------------------------------


def test_check_accepts_a_recovered_torn_tail_after_later_commits(tmp_path: Path) -> None:
    """settee check walked frames from offset 0 and called the kept tail damage."""
    path = str(tmp_path / "db")
    with settee.open(path, shards=1) as db:
        db.bulk_docs([{"_id": f"d{i}", "n": i} for i in range(30)])
    with open(shard_path(path, 0), "ab") as f:
        f.write(b"\x07" * 5)  # a torn tail
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TornTailWarning)
        with settee.open(path) as db:
            db.put({"_id": "after"})
    notes: list[str] = []
    assert list(check_database(path, notes=notes.append)) == []
    assert len(notes) == 1 and "5 bytes of kept torn tail" in notes[0], notes


# -- walking healthy files ----------------------------------------------------------------------


def test_walk_yields_every_commit_oldest_to_newest_with_its_frames() -> None:
    fs = MemoryFileSystem()
    written = three_commits(fs)
    commits, problems, notes = walked(fs)
    assert problems == notes == []
    assert [(c.offset, c.end, c.header) for c in commits] == [
        (w.offset, w.end, w.header) for w in written
    ]
    assert [[f.pos for f in c.frames] for c in commits] == [w.positions for w in written]
    assert [c.header.prev for c in commits] == [None] + [w.offset for w in written[:-1]]
    assert [c.header.data_start for c in commits] == [0] + [w.end for w in written[:-1]]


def test_walk_of_a_file_without_header_is_empty() -> None:
    fs = MemoryFileSystem()
    ShardFile.open(fs, PATH, create=True).close()
    assert walked(fs) == ([], [], [])


@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 2 * B), max_size=4), st.integers(0, 2 * B)),
        min_size=1,
        max_size=5,
    ),
)
# A one-byte tail is a tail too (mutant: a note only for gaps of two bytes or more
# passed, the derandomized draws never tearing one byte).
@example([([1], 1), ([2], 0)])
def test_walk_finds_every_commit_and_every_kept_tail(steps: list[tuple[list[int], int]]) -> None:
    """Commits with torn tails (kept by a reopen) between them: all commits, one note per
    tail, no problem."""
    fs = MemoryFileSystem()
    fs.set_contents(PATH, b"")
    written: list[Written] = []
    tails: list[int] = []
    for sizes, tail in steps:
        with reopen(fs) as shard:
            written.append(commit(shard, [b"t" * size for size in sizes], len(written)))
        if tail:
            fs.set_contents(PATH, fs.contents(PATH) + b"\x07" * tail)
            tails.append(written[-1].end)
    commits, problems, notes = walked(fs)
    assert problems == []
    assert [c.header for c in commits] == [w.header for w in written]
    assert [[f.pos for f in c.frames] for c in commits] == [w.positions for w in written]
    assert [n.offset for n in notes] == tails


# -- the damage table of FORMAT.md, walking rows ------------------------------------------------


def test_damage_kept_torn_tail() -> None:
    fs = MemoryFileSystem()
    with ShardFile.open(fs, PATH, create=True) as shard:
        first = commit(shard, ["a"], 1)
        shard.write_batch(_batch(shard, ["torn" * 100]))
    fs.set_contents(PATH, fs.contents(PATH)[: first.end + 123])  # crash mid-batch
    with reopen(fs) as shard:
        second = commit(shard, ["b"], 2)
    fs.set_contents(PATH, fs.contents(PATH) + b"\x09" * 7)  # and a tail after the newest
    commits, problems, notes = walked(fs)
    assert problems == []
    assert [c.offset for c in commits] == [first.offset, second.offset]
    assert second.header.data_start == first.end + 123
    assert [(n.offset, n.what.split()[0]) for n in notes] == [(first.end, "123"), (second.end, "7")]


def test_damage_bad_frame_in_old_commit() -> None:
    fs = MemoryFileSystem()
    written = three_commits(fs)
    victim = written[0].positions[1]  # the second frame of the oldest commit
    pristine = fs.contents(PATH)
    for offset in range(victim, victim + 40):
        fs.set_contents(PATH, pristine)
        flip(fs, offset, 1 << (offset % 8))
        commits, problems, notes = walked(fs)
        assert [p.offset for p in problems] == [victim], (offset, problems)
        assert "frame does not verify" in problems[0].what
        # The walk went on: every commit, the later ones with all their frames.
        assert [c.offset for c in commits] == [w.offset for w in written]
        assert [f.pos for f in commits[0].frames] == written[0].positions[:1]
        assert [[f.pos for f in c.frames] for c in commits[1:]] == [
            w.positions for w in written[1:]
        ]
        assert notes == []


def test_damage_bad_prev_header() -> None:
    fs = MemoryFileSystem()
    written = three_commits(fs)
    flip(fs, written[1].offset + 1 + fmt.HEADER_SIZE - 1)  # the middle header's crc
    with reopen(fs) as shard:
        assert shard.header == written[2].header  # open is unaffected
    commits, problems, notes = walked(fs)
    assert [p.offset for p in problems] == [written[1].offset]
    assert "does not verify" in problems[0].what
    # The backward scan found the oldest commit; both it and the newest were walked.
    assert [c.offset for c in commits] == [written[0].offset, written[2].offset]
    assert [[f.pos for f in c.frames] for c in commits] == [
        written[0].positions,
        written[2].positions,
    ]
    assert notes == []


def test_a_prev_header_of_another_format_version_is_a_problem() -> None:
    """A header in the chain whose crc holds but whose format version is not this
    settee's is reported, not walked as if it were one (FORMAT.md: a version this
    settee does not read). Mutant: _verified without its version check walked it
    silently."""
    fs = MemoryFileSystem()
    written = three_commits(fs)
    middle = written[1]
    other = fmt.encode_header(middle.header.encode(), fmt.FORMAT_VERSION + 1)
    laid = fmt.lay_out(other, middle.offset, 1)
    data = bytearray(fs.contents(PATH))
    assert len(laid) == middle.end - middle.offset  # same payload, same layout
    data[middle.offset : middle.end] = laid
    fs.set_contents(PATH, bytes(data))
    commits, problems, _ = walked(fs)
    assert [p.offset for p in problems] == [middle.offset]
    assert f"(header of format version {fmt.FORMAT_VERSION + 1})" in problems[0].what
    assert middle.offset not in [c.offset for c in commits]


def test_damaged_prev_header_with_an_older_damaged_header_block_reports_both() -> None:
    fs = MemoryFileSystem()
    with ShardFile.open(fs, PATH, create=True) as shard:
        written = [commit(shard, [str(n)], n) for n in range(4)]
    flip(fs, written[2].offset + 5)
    flip(fs, written[1].offset + 5)
    commits, problems, _ = walked(fs)
    assert [p.offset for p in problems] == [written[1].offset, written[2].offset]
    assert [c.offset for c in commits] == [written[0].offset, written[3].offset]


# -- damage the writer could cause --------------------------------------------------------------


def _append_header(fs: MemoryFileSystem, header: ShardHeader, at: int) -> None:
    """Write ``header`` at block ``at`` (cutting the file there), bypassing ShardFile."""
    data = fs.contents(PATH)[:at]
    data += bytes(at - len(data))
    fs.set_contents(PATH, data + fmt.lay_out(fmt.encode_header(header.encode()), at, 1))


def test_walker_reports_a_region_overlapping_the_previous_header() -> None:
    fs = MemoryFileSystem()
    with ShardFile.open(fs, PATH, create=True) as shard:
        first = commit(shard, ["a"], 1)
    overlapping = ShardHeader("d", 0, 1, 2, None, None, data_start=first.end - 3, prev=first.offset)
    _append_header(fs, overlapping, first.offset + B)
    commits, problems, _ = walked(fs)
    assert [p.offset for p in problems] == [first.end - 3]
    assert "overlaps the previous header" in problems[0].what
    assert len(commits) == 2


def test_walker_reports_a_frame_running_into_the_header() -> None:
    fs = MemoryFileSystem()
    with ShardFile.open(fs, PATH, create=True) as shard:
        first = commit(shard, ["a"], 1)
        batch = shard.new_batch()
        pos = batch.add(b"long" * 1500)
        shard.write_batch(batch)
    assert pos < 2 * B < shard.size()
    header = ShardHeader("d" * 2 * B, 0, 1, 2, None, None, data_start=first.end, prev=first.offset)
    _append_header(fs, header, 2 * B)  # in the middle of the frame
    _, problems, _ = walked(fs)
    assert [p.offset for p in problems] == [pos]
    assert "bad block marker 0x01" in problems[0].what


def test_walker_reports_a_bad_marker_of_the_block_a_frame_starts_after() -> None:
    """The marker of the block a commit's data begins at (offset 0 here: the frame
    itself starts at 1) is checked like any other; a read of the frame never looks
    at it, so only the walk (settee check) can see it. Mutant: a walk that checked
    markers only inside frames passed."""
    fs = MemoryFileSystem()
    written = three_commits(fs)
    assert written[0].positions[0] == 1
    flip(fs, 0, 0x80)
    commits, problems, _ = walked(fs)
    assert [(p.offset, p.what) for p in problems] == [(0, "bad block marker 80")]
    assert len(commits) == 3


def test_walker_reports_bytes_in_the_padding() -> None:
    fs = MemoryFileSystem()
    with ShardFile.open(fs, PATH, create=True) as shard:
        first = commit(shard, ["a"], 1)
        second = commit(shard, ["b"], 2)
    flip(fs, second.offset - 10)
    _, problems, _ = walked(fs)
    (pos,) = second.positions
    padding = pos + fmt.laid_out_size(pos, fmt.FRAME_SIZE + len(fmt.encode_payload("b")))
    assert [p.offset for p in problems] == [padding]
    assert first.end < padding < second.offset - 10


def _batch(shard: ShardFile, terms: list[Any]) -> Any:
    batch = shard.new_batch()
    for t in terms:
        batch.add(t)
    return batch
