"""``settee.open(path, readonly=True)``: readers beside the one writer (issue 16).

A readonly handle takes no lock, creates nothing, refuses every write, and on
each call sees the newest commit the writer has made durable: never one whose
header fsync has not returned (``settee.heads``), always one that was
acknowledged before the call began, across a compaction's file swap, and in
another process.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

import settee
import settee.heads
import settee.reference
from settee.file import LostCommitWarning
from settee.heads import HEADS_NAME, SLOT_SIZE
from tests.test_engine import assert_reads_refused_beside_another_database


def _writer(path: Path, **options: Any) -> settee.Database:
    return settee.open(str(path), **{"shards": 2, **options})


def _state(db: Any) -> tuple[Any, Any]:
    rows = db.all_docs(include_docs=True)["rows"]
    return [(r["id"], r["value"]["rev"], r["doc"]) for r in rows], db.info()["doc_count"]


@pytest.mark.parametrize("engine", ["settee", "reference"])
def test_readonly_on_a_missing_path_creates_nothing(tmp_path: Path, engine: str) -> None:
    opener = settee.open if engine == "settee" else settee.reference.open
    with pytest.raises(settee.SetteeError, match=r"readonly|no settee database|check the path"):
        opener(str(tmp_path / "nothing"), readonly=True)
    assert not (tmp_path / "nothing").exists()


@pytest.mark.parametrize("engine", ["settee", "reference"])
def test_every_write_is_refused_and_changes_nothing(tmp_path: Path, engine: str) -> None:
    opener = settee.open if engine == "settee" else settee.reference.open
    with opener(str(tmp_path / "db")) as db:
        rev = db.put({"_id": "a", "v": 1})["rev"]
    with opener(str(tmp_path / "db"), readonly=True) as ro:
        before = _state(ro)
        for call in (
            lambda: ro.put({"_id": "b"}),
            lambda: ro.put({"_id": "a", "_rev": rev, "v": 2}),
            lambda: ro.delete("a", rev),
            lambda: ro.bulk_docs([{"_id": "c"}]),
            lambda: ro.bulk_docs("not a list"),  # refused as readonly first, like put
            ro.compact,
        ):
            with pytest.raises(settee.SetteeError, match="readonly"):
                call()
        assert _state(ro) == before
        assert ro.get("a")["v"] == 1


def test_reader_sees_each_acknowledged_write_at_once(tmp_path: Path) -> None:
    with _writer(tmp_path / "db") as db, settee.open(str(tmp_path / "db"), readonly=True) as ro:
        assert ro.all_docs()["rows"] == []
        revs = {}
        for i in range(40):
            doc_id = f"d{i:02d}"
            revs[doc_id] = db.put({"_id": doc_id, "i": i})["rev"]
            assert ro.get(doc_id)["_rev"] == revs[doc_id]
            assert ro.info()["doc_count"] == i + 1
        db.delete("d00", revs["d00"])
        with pytest.raises(settee.NotFound):
            ro.get("d00")
        assert _state(ro) == _state(db)
        assert ro.changes()["last_seq"] == db.changes()["last_seq"]


def test_reader_never_sees_a_commit_before_its_header_fsync_returns(tmp_path: Path) -> None:
    """The header of the commit is in the file, its fsync has not returned: a
    reader that scanned for the newest header would show it; HEADS does not."""
    with _writer(tmp_path / "db") as db:
        db.put({"_id": "old"})
        ro = settee.open(str(tmp_path / "db"), readonly=True)
        parked, release = threading.Event(), threading.Event()
        shard = db.shards[0]
        for s in db.shards:

            def hook(step: str, s: Any = s) -> None:
                if step == "before_header_fsync" and s is shard:
                    parked.set()
                    release.wait(10)

            s.step_hook = hook
        target = next(f"new{i}" for i in range(1000) if db._shard(f"new{i}") is shard)
        writer = threading.Thread(target=db.put, args=({"_id": target},))
        writer.start()
        try:
            assert parked.wait(10)
            with pytest.raises(settee.NotFound):
                ro.get(target)
            assert [r["id"] for r in ro.all_docs()["rows"]] == ["old"]
        finally:
            release.set()
            writer.join(10)
        assert ro.get(target)["_id"] == target  # acknowledged now: visible
        ro.close()


def test_reader_follows_a_compaction_and_keeps_reading(tmp_path: Path) -> None:
    with _writer(tmp_path / "db") as db, settee.open(str(tmp_path / "db"), readonly=True) as ro:
        for i in range(200):
            rev = db.put({"_id": f"d{i:03d}", "v": 0})["rev"]
            db.put({"_id": f"d{i:03d}", "_rev": rev, "v": 1})
        held = ro.all_docs(include_docs=True)
        inodes = [os.stat(s.path).st_ino for s in db.shards]
        db.compact()
        assert [os.stat(s.path).st_ino for s in db.shards] != inodes  # files were swapped
        assert ro.all_docs(include_docs=True) == held
        assert ro.info()["sizes"]["file"] == db.info()["sizes"]["file"]
        db.put({"_id": "after", "v": 2})
        assert ro.get("after")["v"] == 2
        assert _state(ro) == _state(db)


@pytest.mark.parametrize("compact", [False, True])
def test_a_read_over_shards_shows_heads_at_one_instant(tmp_path: Path, compact: bool) -> None:
    """The listing reads HEADS once for both shards; the writes (and a compaction
    swapping both files) that land while it sits between its shards are not in
    it, the next listing has all of them."""
    with _writer(tmp_path / "db") as db, settee.open(str(tmp_path / "db"), readonly=True) as ro:
        revs = {i: db.put({"_id": i, "v": 0})["rev"] for i in ("b", "a")}  # shards 0 and 1
        revs["a"] = db.put({"_id": "a", "_rev": revs["a"], "v": 1})["rev"]  # not loaded yet
        before = _state(db)

        def write_inside(_step: str) -> None:
            ro.cut.step_hook = None
            revs["b"] = db.put({"_id": "b", "_rev": revs["b"], "v": 2})["rev"]
            if compact:
                db.compact()
            revs["a"] = db.put({"_id": "a", "_rev": revs["a"], "v": 2})["rev"]

        ro.cut.step_hook = write_inside
        assert _state(ro) == before
        assert _state(ro) == _state(db) != before


def test_a_cut_whose_commit_was_swapped_away_starts_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a shard can no longer load the commit its HEADS slot named (a compaction
    swapped its file after HEADS was read), the cut starts over from a new read of
    HEADS: a read over the shards never leaves that shard out."""
    from settee.follower import FollowerShard

    with _writer(tmp_path / "db") as db, settee.open(str(tmp_path / "db"), readonly=True) as ro:
        for i in ("b", "a"):  # shards 0 and 1
            db.put({"_id": i})
        current_at = FollowerShard.current_at
        swapped = [ro.shards[1]]

        def once_gone(self: Any, slot: Any) -> Any:
            if self in swapped:
                swapped.remove(self)
                return None
            return current_at(self, slot)

        monkeypatch.setattr(FollowerShard, "current_at", once_gone)
        assert [row["id"] for row in ro.all_docs()["rows"]] == ["a", "b"]
        assert not swapped
        assert ro.info()["doc_count"] == 2


def test_a_slot_naming_another_commits_header_is_not_followed(tmp_path: Path) -> None:
    """A header at the offset a slot names counts only with the slot's seq: a
    compacted copy may hold another commit's header where the old file had one."""
    with _writer(tmp_path / "db", shards=1) as db:
        first = db.shards[0].snapshot.file.header_offset
        db.put({"_id": "a"})
        db.close()
        heads = tmp_path / "db" / HEADS_NAME
        slot = settee.heads.HeadsFile(str(tmp_path / "db"), writer=False).read(0)
        assert slot is not None and slot.offset != first
        forged = settee.heads.Slot(slot.generation, first, slot.seq)
        writer = settee.heads.HeadsFile(str(tmp_path / "db"), writer=True)
        writer.publish(0, forged)
        writer.close()
        assert heads.stat().st_size == SLOT_SIZE
        with settee.open(str(tmp_path / "db"), readonly=True) as ro:
            assert ro.get("a")["_id"] == "a"  # the first header (no "a") is not that commit
            assert [r["id"] for r in ro.all_docs()["rows"]] == ["a"]


@pytest.mark.parametrize("offset", [2**63 - 4096, 2**63 - 21])
def test_a_slot_naming_an_offset_no_pread_can_reach_falls_back_to_scanning(
    tmp_path: Path, offset: int
) -> None:
    """A crc-valid slot is still a hint: one naming an offset below 2**63 but so
    near it that reading a header there is EINVAL names no header of the file
    (found by a sweep of forged HEADS slots: the readonly open failed with
    "cannot open the database: [Errno 22] Invalid argument")."""
    with _writer(tmp_path / "db", shards=1) as db:
        db.put({"_id": "a"})
        slot = settee.heads.HeadsFile(str(tmp_path / "db"), writer=False).read(0)
        assert slot is not None
    writer = settee.heads.HeadsFile(str(tmp_path / "db"), writer=True)
    writer.publish(0, settee.heads.Slot(slot.generation, offset, slot.seq))
    writer.close()
    with settee.open(str(tmp_path / "db"), readonly=True) as ro:
        assert ro.get("a")["_id"] == "a"


@pytest.mark.parametrize("damage", ["deleted", "garbage", "short"])
def test_a_damaged_heads_file_falls_back_to_scanning(tmp_path: Path, damage: str) -> None:
    with _writer(tmp_path / "db") as db:
        db.put({"_id": "a"})
        heads = tmp_path / "db" / HEADS_NAME
        if damage == "deleted":
            heads.unlink()
        elif damage == "garbage":
            heads.write_bytes(os.urandom(SLOT_SIZE * 2))
        else:
            heads.write_bytes(heads.read_bytes()[: SLOT_SIZE // 2])
        with settee.open(str(tmp_path / "db"), readonly=True) as ro:
            assert ro.get("a")["_id"] == "a"
            db.put({"_id": "b"})  # the writer publishes again (where the file is, if any)
            assert ro.get("b")["_id"] == "b"


def test_concurrent_readers_during_writes_and_compaction_see_whole_commits(
    tmp_path: Path,
) -> None:
    """Every all_docs of a reader is one committed state: the writer puts doc
    pairs in one bulk_docs (one shard), so a pair is never seen half-written."""
    errors: list[BaseException] = []
    stop = threading.Event()
    with (
        _writer(tmp_path / "db", shards=1) as db,
        settee.open(str(tmp_path / "db"), readonly=True) as ro,
    ):

        def read() -> None:
            try:
                while not stop.wait(0.001):  # let the writer have the GIL too
                    ids = [r["id"] for r in ro.all_docs()["rows"]]
                    assert len(ids) % 2 == 0, ids
                    for a in ids[::2]:
                        assert a.replace("a", "b", 1) in ids
            except BaseException as exc:
                errors.append(exc)

        readers = [threading.Thread(target=read) for _ in range(3)]
        for t in readers:
            t.start()
        for i in range(60):
            db.bulk_docs([{"_id": f"a{i:04d}"}, {"_id": f"b{i:04d}"}])
            if i % 20 == 19:
                db.compact()
        stop.set()
        for t in readers:
            t.join(30)
    assert not errors, errors[0]


_CHILD = r"""
import json, sys, settee
path = sys.argv[1]
db = settee.open(path, readonly=True)
seen = -1
for line in sys.stdin:
    want = int(line)
    # Everything acknowledged before this request was sent must be visible now.
    count = db.info()["doc_count"]
    ids = [r["id"] for r in db.all_docs()["rows"]]
    ok = count >= want and ids == [f"d{i:04d}" for i in range(count)] and count >= seen
    seen = count
    print(json.dumps({"want": want, "count": count, "ok": ok}), flush=True)
db.close()
"""


def test_a_reader_in_another_process_sees_acknowledged_writes_in_order(tmp_path: Path) -> None:
    """Real-time order across processes: once put() returned here, a read the other
    process starts afterwards sees it; and it never sees a state that was not a
    prefix of the writer's sequence of commits."""
    path = tmp_path / "db"
    with _writer(path) as db:
        db.put({"_id": "d0000"})
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdin is not None and child.stdout is not None
        try:
            for i in range(1, 60):
                db.put({"_id": f"d{i:04d}"})
                child.stdin.write(f"{i + 1}\n")
                child.stdin.flush()
                answer = json.loads(child.stdout.readline())
                assert answer["ok"], answer
        finally:
            child.stdin.close()
            assert child.wait(30) == 0


def test_closing_a_reader_never_closes_another_files_descriptor(tmp_path: Path) -> None:
    """Regression (found by the stress campaign: compaction failed with EBADF): a
    reader's close() closed its file's descriptors, and the file's finalizer closed
    the same numbers again when the last snapshot went; by then they belonged to
    another file of the process."""
    with _writer(tmp_path / "db", shards=1) as db:
        db.put({"_id": "a"})
        ro = settee.open(str(tmp_path / "db"), readonly=True)
        assert ro.get("a")["_id"] == "a"
        handle = ro.shards[0].current().file.handle
        numbers = {handle.read_fd, handle._fd}
        del handle
        ro.close()
        # Take the freed numbers, as the next file this process opens would.
        taken: list[int] = []
        while not numbers <= set(taken) and len(taken) < 200:
            taken.append(os.open(os.devnull, os.O_RDONLY))
        try:
            del ro
            gc.collect()  # the reader's ShardFile goes, and its finalizer runs
            devnull = os.stat(os.devnull).st_rdev
            assert all(os.fstat(fd).st_rdev == devnull for fd in numbers)
        finally:
            for fd in taken:
                os.close(fd)
        db.put({"_id": "b"})
        assert [r["id"] for r in db.all_docs()["rows"]] == ["a", "b"]


def test_a_heads_path_that_cannot_be_opened_does_not_stop_the_writer(tmp_path: Path) -> None:
    with _writer(tmp_path / "db") as db:
        db.put({"_id": "a"})
    (tmp_path / "db" / HEADS_NAME).unlink()
    (tmp_path / "db" / HEADS_NAME).mkdir()  # a directory where the file should be
    with pytest.warns(UserWarning, match="scan"), _writer(tmp_path / "db") as db:
        db.put({"_id": "b"})
        with settee.open(str(tmp_path / "db"), readonly=True) as ro:
            assert [r["id"] for r in ro.all_docs()["rows"]] == ["a", "b"]
            db.put({"_id": "c"})
            assert ro.get("c")["_id"] == "c"


def test_a_reader_follows_a_heads_file_recreated_by_a_new_writer(tmp_path: Path) -> None:
    import time

    from settee.heads import RECHECK_SECONDS

    with _writer(tmp_path / "db") as db:
        db.put({"_id": "a"})
    with settee.open(str(tmp_path / "db"), readonly=True) as ro:
        assert ro.get("a")["_id"] == "a"  # the reader has HEADS open now
        (tmp_path / "db" / HEADS_NAME).unlink()
        with _writer(tmp_path / "db") as db:  # a new writer creates a new HEADS
            db.put({"_id": "b"})
            time.sleep(RECHECK_SECONDS * 1.5)
            assert ro.get("b")["_id"] == "b"


def test_a_reader_opened_while_a_commit_lands_sees_it_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without HEADS a handle scans. A commit landing between its first scan and
    the file token it keeps must change that token, or every later read keeps
    the scan's older view (found by review: the token was taken after the scan)."""
    from settee.follower import FollowerShard

    with _writer(tmp_path / "db", shards=1) as db:
        rev = db.put({"_id": "a", "v": 1})["rev"]
        (tmp_path / "db" / HEADS_NAME).unlink()  # the writer goes on writing its old inode
        scan = FollowerShard._open_file
        landed: list[str] = []

        def scan_then_commit(self: Any) -> Any:
            file = scan(self)
            if not landed:
                landed.append(db.put({"_id": "a", "_rev": rev, "v": 2})["rev"])
            return file

        monkeypatch.setattr(FollowerShard, "_open_file", scan_then_commit)
        with settee.open(str(tmp_path / "db"), readonly=True) as ro:
            assert ro.get("a")["_rev"] == landed[0]


def test_an_earlier_slot_is_read_without_moving_the_shard_back(tmp_path: Path) -> None:
    """A cut whose HEADS read is older than what another read of the handle already
    loaded gets that older commit, and the handle goes on following the newer."""
    with _writer(tmp_path / "db", shards=1) as db:
        earlier = _slot_of_a_then_put_b(db, tmp_path / "db")
        with settee.open(str(tmp_path / "db"), readonly=True) as ro:
            shard = ro.shards[0]
            newest = shard.current()
            assert earlier is not None and newest.seq > earlier.seq
            old = shard.current_at(earlier)
            assert old is not None and old.seq == earlier.seq
            assert old.doc_info("b") is None and old.doc_info("a") is not None
            assert shard.snapshot is newest and shard.current() is newest


def _slot_of_a_then_put_b(db: settee.Database, path: Path) -> settee.heads.Slot | None:
    """Put "a", read its HEADS slot (shard 0), then put "b": a slot one commit old."""
    db.put({"_id": "a", "v": 1})
    heads = settee.heads.HeadsFile(str(path), writer=False)
    earlier = heads.read(0)
    heads.close()
    db.put({"_id": "b", "v": 1})
    return earlier


class _ScriptedHeads(settee.heads.HeadsFile):
    """A reader whose preads return the given bytes in turn (then the last)."""

    def __init__(self, path: Path, reads: list[bytes]) -> None:
        super().__init__(str(path), writer=False)
        self.reads = reads
        self.calls = 0

    def _pread(self, size: int, offset: int) -> bytes | None:
        raw = self.reads[min(self.calls, len(self.reads) - 1)]
        self.calls += 1
        return raw[offset : offset + size]


def _slots(*slots: tuple[int, int, int]) -> bytes:
    import crc32c

    out = b""
    for generation, offset, seq in slots:
        fields = offset.to_bytes(8, "little") + seq.to_bytes(8, "little")
        fields += generation.to_bytes(4, "little") + bytes(8)
        out += fields + crc32c.crc32c(fields).to_bytes(4, "little")
    return out


def test_heads_are_read_until_two_reads_agree(tmp_path: Path) -> None:
    """read_all returns a pair of equal reads (one instant), never a read whose
    slots come from different moments; read retries a torn slot."""
    old, new = _slots((1, 100, 1), (1, 200, 2)), _slots((1, 300, 3), (1, 400, 4))
    torn = new[:SLOT_SIZE] + old[SLOT_SIZE:]  # slot 0 written, slot 1 not yet
    heads = _ScriptedHeads(tmp_path, [torn, new, new])
    assert heads.read_all(2) == [(1, 300, 3), (1, 400, 4)]
    assert heads.calls == 3
    half = new[:5] + old[5:SLOT_SIZE]  # one slot torn mid-write: fails its crc
    heads = _ScriptedHeads(tmp_path, [half, new[:SLOT_SIZE], new[:SLOT_SIZE]])
    assert heads.read(0) == (1, 300, 3)
    garbage = bytes(range(SLOT_SIZE))
    heads = _ScriptedHeads(tmp_path, [garbage])
    assert heads.read(0) is None and heads.calls == 2  # garbage reads the same twice
    huge = _slots((1, 2**63, 5))
    assert _ScriptedHeads(tmp_path, [huge]).read(0) is None  # no pread could take it


def test_a_heads_descriptor_is_closed_only_after_the_reads_in_flight_on_it(
    tmp_path: Path,
) -> None:
    """A reader that finds HEADS replaced, or a close(), must not close the
    descriptor a pread on another thread is still using (its number could be
    reused by another open and read from the wrong file): it is closed when the
    last read in flight leaves, and every descriptor is closed in the end."""
    (tmp_path / HEADS_NAME).write_bytes(b"")
    heads = settee.heads.HeadsFile(str(tmp_path), writer=False)
    writer = settee.heads.HeadsFile(str(tmp_path), writer=True)
    writer.publish(0, settee.heads.Slot(1, 100, 1))
    assert heads.read(0) == settee.heads.Slot(1, 100, 1)
    in_flight = heads._enter()  # another thread, between taking the fd and its pread
    assert in_flight is not None
    writer.close()
    (tmp_path / HEADS_NAME).unlink()
    writer = settee.heads.HeadsFile(str(tmp_path), writer=True)
    writer.publish(0, settee.heads.Slot(1, 200, 2))
    heads._checked = 0.0  # as if RECHECK_SECONDS had passed
    assert heads.read(0) == settee.heads.Slot(1, 200, 2)  # follows the new file
    os.fstat(in_flight)  # replaced, but still open under the read in flight
    newer = heads._enter()
    heads.close()
    os.fstat(newer)  # closed, but still open under its read in flight
    heads._leave()
    heads._leave()
    writer.close()
    for fd in (in_flight, newer):
        with pytest.raises(OSError):
            os.fstat(fd)  # the last read out closed both
    assert heads.read(0) is None  # and nothing reopens after close()


def test_a_closed_heads_file_is_never_reopened(tmp_path: Path) -> None:
    """A read after close() (as one racing it would) finds no HEADS, and opens no
    descriptor."""
    with _writer(tmp_path / "db", shards=1) as db:
        db.put({"_id": "a"})
        heads = settee.heads.HeadsFile(str(tmp_path / "db"), writer=False)
        assert heads.read(0) is not None
        heads.close()
        assert heads.read(0) is None and heads.read_all(1) == [None]
        assert heads._fd is None


def test_a_slot_behind_what_a_scan_showed_does_not_move_the_shard_back(tmp_path: Path) -> None:
    """Without HEADS a handle scans and may show a later commit than the slot a
    HEADS read names once it is back: that read gets the slot's commit, and the
    handle does not go back to it (review finding: it did, for scanned state)."""
    with _writer(tmp_path / "db", shards=1) as db:
        earlier = _slot_of_a_then_put_b(db, tmp_path / "db")
        (tmp_path / "db" / HEADS_NAME).unlink()
        with settee.open(str(tmp_path / "db"), readonly=True) as ro:
            shard = ro.shards[0]
            scanned = shard.current()
            assert earlier is not None and scanned.seq > earlier.seq
            old = shard.current_at(earlier)
            assert old is not None and old.seq == earlier.seq
            assert shard.snapshot is scanned
            assert [r["id"] for r in ro.all_docs()["rows"]] == ["a", "b"]


def _two_commits_then_flip(path: Path, byte: int) -> int:
    """A one-shard database with commits 1 and 2, a bit of commit 2's header (at
    ``byte`` past its block marker) flipped; the header's offset."""
    with settee.open(str(path), shards=1) as db:
        db.put({"_id": "a"})
        db.put({"_id": "b"})
        offset = db.shards[0].snapshot.file.header_offset
    shard = path / "shard-000.settee"
    data = bytearray(shard.read_bytes())
    data[offset + 1 + byte] ^= 0x10
    shard.write_bytes(bytes(data))
    return offset


def test_a_damaged_header_of_a_durable_commit_is_reported_not_taken_for_a_torn_tail(
    tmp_path: Path,
) -> None:
    """Found in review: one flipped bit in the newest header lost commit 2 (acknowledged
    and fsynced) with no word: readonly handles said nothing, the writer called it an
    uncommitted tail, and ``settee check`` passed. HEADS names commit 2 as durable, so
    every byte flipped in its header is now a check problem and a LostCommitWarning
    (opening still falls back, as FORMAT.md's bad_crc_in_header row says)."""
    from settee.check import check_database
    from settee.file import LostCommitWarning

    header_bytes = 60  # the fixed fields and the start of the payload
    for byte in range(header_bytes):
        path = tmp_path / f"db{byte}"
        offset = _two_commits_then_flip(path, byte)
        problems = list(check_database(str(path)))
        assert any(f":{offset}: " in p and "durable" in p for p in problems), (byte, problems)
    path = tmp_path / "db0"
    with pytest.warns(LostCommitWarning), settee.open(str(path), readonly=True) as db:
        assert db.info()["doc_count"] == 1
    with pytest.warns(LostCommitWarning), settee.open(str(path)) as db:
        assert db.info()["doc_count"] == 1
    # Without HEADS nothing says commit 2 was durable: a torn tail, as before.
    path = tmp_path / "no-heads"
    _two_commits_then_flip(path, 5)
    (path / HEADS_NAME).unlink()
    assert list(check_database(str(path))) == []


def test_a_shard_cut_short_before_its_durable_commit_is_reported(tmp_path: Path) -> None:
    """Found in review: a shard truncated to half its size reopened at an older commit
    with only a torn-tail warning, and settee check said OK, though HEADS named the
    lost commit as durable: now a check problem and a LostCommitWarning on every open
    (deleting HEADS accepts the older state)."""
    from settee.check import check_database

    path = tmp_path / "db"
    with settee.open(str(path), shards=1) as db:
        for n in range(60):
            db.put({"_id": f"d{n:03d}", "pad": "x" * 300})
    shard = path / "shard-000.settee"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    problems = list(check_database(str(path)))
    assert any("cut short" in p and "durable" in p for p in problems), problems
    with pytest.warns(LostCommitWarning), settee.open(str(path), readonly=True) as db:
        assert 0 < db.info()["doc_count"] < 60
    with pytest.warns(LostCommitWarning), settee.open(str(path)) as db:
        assert 0 < db.info()["doc_count"] < 60
    (path / HEADS_NAME).unlink()
    assert list(check_database(str(path))) == []


def test_a_shard_restored_from_an_older_backup_is_not_called_damaged(tmp_path: Path) -> None:
    """Found in review: HEADS of a later file history (written after a compaction)
    named an offset inside the restored file's ordinary data, and check and every open
    called that data a damaged header. Only a block within a bit of a header's marker
    and magic counts."""
    from settee.check import check_database

    path = tmp_path / "db"
    with settee.open(str(path), shards=1) as db:
        db.bulk_docs([{"_id": f"d{n:04d}", "pad": "x" * 200} for n in range(3000)])
    shutil.copy(path / "shard-000.settee", tmp_path / "backup")
    with settee.open(str(path), shards=1) as db:
        for _ in range(0, 3000, 100):
            rows = db.all_docs(skip=0, limit=100)["rows"]
            db.bulk_docs(
                [{"_id": r["id"], "_rev": r["value"]["rev"], "_deleted": True} for r in rows]
            )
        db.compact()
        db.put({"_id": "after"})
    shutil.copy(tmp_path / "backup", path / "shard-000.settee")
    assert list(check_database(str(path))) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", LostCommitWarning)
        with settee.open(str(path), readonly=True) as db:
            assert db.info()["doc_count"] == 3000


def test_a_lagging_readonly_handle_takes_the_writers_token(tmp_path: Path) -> None:
    """Found in review: with HEADS behind the files (a machine crash loses its unsynced
    slots), a readonly handle refused the writer's own last_seq as another database's.
    It answers from where it is instead, and resuming never misses a change."""
    path = tmp_path / "db"
    with settee.open(str(path), shards=1) as db:
        db.put({"_id": "a"})
        stale = (path / HEADS_NAME).read_bytes()
        db.put({"_id": "b"})
        token = db.changes()["last_seq"]
        # The writer stays open: with none running, the handle would read past the
        # stale HEADS and not lag at all, and the test would pass either way (a
        # handle refusing the token escaped it: found by mutation testing).
        (path / HEADS_NAME).write_bytes(stale)
        with settee.open(str(path), readonly=True) as reader:
            assert reader.info()["doc_count"] == 1  # it lags: it sees "a" only
            answer = reader.changes(since=token)
            assert answer["results"] == []
            resume = answer["last_seq"]
    with settee.open(str(path), shards=1) as db:
        db.put({"_id": "c"})
        assert "c" in [r["id"] for r in db.changes(since=resume)["results"]]


def test_with_no_writer_a_readonly_handle_reads_past_a_stale_heads(tmp_path: Path) -> None:
    """Found in review: a HEADS the files have overtaken (a machine crash loses its
    unsynced slots, or a backup restored it) kept readonly handles at an older commit
    for good when no writer ran. With no writer holding the lock, every header in the
    files is one a writer's open would take: the handle reads the newest. With a
    writer running, HEADS is followed as before."""
    path = tmp_path / "db"
    with settee.open(str(path), shards=1) as db:
        db.put({"_id": "a"})
        stale = (path / HEADS_NAME).read_bytes()
        db.put({"_id": "b"})
    (path / HEADS_NAME).write_bytes(stale)
    with settee.open(str(path), readonly=True) as reader:
        assert reader.get("b")["_id"] == "b"
        assert settee.layout.writer_running(str(path)) is False
        with settee.open(str(path)) as writer:  # takes the lock past the probe, republishes
            assert settee.layout.writer_running(str(path)) is True
            writer.put({"_id": "c"})
            assert reader.get("c")["_id"] == "c"


def test_heads_naming_the_newest_commit_before_a_compaction_swap_loses_nothing(
    tmp_path: Path,
) -> None:
    """A writer that stopped between a compaction's rename and its HEADS update leaves
    a slot naming the newest commit's seq at its offset in the old, longer file. The
    compacted file holds that same commit, so nothing is lost: no LostCommitWarning,
    no check problem. Mutant: ``ShardFile.lost_commit`` counting a slot of the newest
    seq as newer (``seq < newest``) called the shorter copy "cut short"."""
    from settee.check import check_database

    path = tmp_path / "db"
    with settee.open(str(path), shards=1) as db:
        for n in range(40):
            db.put({"_id": f"d{n:03d}", "pad": "x" * 300})
        stale = (path / HEADS_NAME).read_bytes()
        size = (path / "shard-000.settee").stat().st_size
        db.compact()
    assert (path / "shard-000.settee").stat().st_size < size // 2
    (path / HEADS_NAME).write_bytes(stale)
    assert list(check_database(str(path))) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", LostCommitWarning)
        with settee.open(str(path), readonly=True) as db:
            assert db.info()["doc_count"] == 40
        with settee.open(str(path)) as db:
            assert db.info()["doc_count"] == 40


def test_a_failed_heads_write_fails_no_commit(tmp_path: Path, monkeypatch: Any) -> None:
    """HEADS is a hint written after the commit's header fsync: a pwrite of it that
    fails (ENOSPC, EIO) leaves the durable commit acknowledged and the shard writable
    (heads.py). Mutant: HeadsFile.publish without its suppress(OSError) failed an
    already durable commit and refused every later write, and passed the whole proof
    (the proof's simulated disks publish no HEADS)."""
    import errno

    path = tmp_path / "db"
    db = settee.open(str(path), shards=1)
    heads_fd = db._heads._fd
    real_pwrite = os.pwrite

    def failing_pwrite(fd: int, data: bytes, offset: int) -> int:
        if fd == heads_fd:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", failing_pwrite)
    try:
        assert db.put({"_id": "a"})["ok"]
        assert db.put({"_id": "b"})["ok"]
    finally:
        monkeypatch.undo()
        db.close()
    with settee.open(str(path)) as again:
        assert again.info()["doc_count"] == 2


def test_a_readonly_handle_reports_the_size_of_the_file_it_follows(tmp_path: Path) -> None:
    """info()["sizes"]["file"] of a readonly handle follows the file as the writer's
    commits grow it (FollowerShard adopts each commit with the file's size). Mutant:
    ShardFile.adopt keeping the size the file had when the handle opened passed."""
    path = tmp_path / "db"
    with settee.open(str(path), shards=1) as db:
        db.put({"_id": "first"})
        with settee.open(str(path), readonly=True) as reader:
            opened = reader.info()["sizes"]["file"]
            db.bulk_docs([{"_id": f"d{n}", "pad": "x" * 500} for n in range(40)])
            assert reader.info()["doc_count"] == 41
            assert reader.info()["sizes"]["file"] == db.info()["sizes"]["file"] > opened


def test_a_readonly_snapshot_held_across_close_never_reads_another_database(
    tmp_path: Path,
) -> None:
    """A readonly handle's close() marks its file closed before its descriptor goes,
    as the writer's does: a reader still holding a snapshot must not pread a reused
    descriptor number, i.e. another database's file. Mutant: FollowerShard.close
    without refuse_reads passed (test_engine pins only the writer's close)."""
    with settee.open(str(tmp_path / "a"), shards=1) as a:
        a.put({"_id": "x", "secret": "A"})
    reader = settee.open(str(tmp_path / "a"), readonly=True)
    snap = reader.shards[0].current()
    reader.close()
    assert_reads_refused_beside_another_database(snap, tmp_path / "b")


def test_no_reader_of_the_writer_sees_a_commit_before_heads_names_it(tmp_path: Path) -> None:
    """The writer names a commit in HEADS before its own process's readers see it
    (Shard._publish): else a read here could see a write that a readonly handle,
    reading after it, still misses, and the two reads admit no serial order.
    Mutant: publishing the snapshot locally before HEADS passed every test and the
    stress campaign, whose timing rarely lands in the gap; here a read runs inside it."""
    path = tmp_path / "db"
    with settee.open(str(path), shards=1) as db:
        shard = db.shards[0]
        publish = shard._publish
        seen_early: list[list[str]] = []

        def publish_then_look(snap: Any) -> None:
            seen_early.append([r["id"] for r in db.all_docs()["rows"]])
            publish(snap)

        shard._publish = publish_then_look  # type: ignore[method-assign]
        db.put({"_id": "a"})
        db.put({"_id": "b"})
    assert seen_early == [[], ["a"]]


@pytest.mark.parametrize("engine", ["settee", "reference"])
def test_a_readonly_handle_behind_its_writer_takes_the_writers_tokens(
    tmp_path: Path, engine: str
) -> None:
    """SEMANTICS.md §9: a readonly handle, which may be behind its writer, reads a
    position past its own as its own. Found probing readonly handles: the
    reference's (a snapshot of its log at open, so always behind once the writer
    writes) refused the writer's update_seq as another database's token, where the
    engine's answered."""
    opener = settee.open if engine == "settee" else settee.reference.open
    path = str(tmp_path / "db")
    with opener(path) as db:
        db.put({"_id": "a"})
        with opener(path, readonly=True) as reader:
            db.put({"_id": "b"})
            token = db.info()["update_seq"]
            answer = reader.changes(since=token)
            assert [r["id"] for r in answer["results"]] in ([], ["b"])
            resume = answer["last_seq"]
        db.put({"_id": "c"})
        # Resuming on the writer from the reader's position skips nothing.
        assert "c" in [r["id"] for r in db.changes(since=resume)["results"]]
