"""Engine-only behaviour: what the shared semantic suite cannot see.

Group commit and its durability order, readers that never wait for the
writer, MVCC snapshots, concurrency, large documents, configuration, the
process lock, lifecycle and compaction under load.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import settee
from settee import reference
from settee.check import check_database
from settee.io import FileSystemWrapper, OsFileSystem
from settee.spec.attachments import digest_of
from settee.spec.docs import validate_doc
from settee.spec.spool import Spooled, SpoolWriter
from settee.strict import StrictModeError


class RecordingFileSystem(FileSystemWrapper):
    """Records every operation as (op, basename) and can block one kind of op."""

    def __init__(self) -> None:
        super().__init__(OsFileSystem())
        self.log: list[tuple[str, str]] = []
        self.block_op: str | None = None
        self.blocked = threading.Event()
        self.release = threading.Event()

    def intercept(self, op: str, path: str, call: Callable[[], Any]) -> Any:
        self.log.append((op, os.path.basename(path)))
        if op == self.block_op and not self.release.is_set():
            self.blocked.set()
            assert self.release.wait(10), "test never released the blocked operation"
        return call()


def _open(path: Any, **options: Any) -> settee.Database:
    return settee.open(str(path), **options)


# -- commit order -------------------------------------------------------------------------------


def test_commit_order_is_data_fsync_header_fsync(tmp_path: Any) -> None:
    """couch_file:write_header order: the header reaches disk only after its data."""
    fs = RecordingFileSystem()
    db = settee.Database(str(tmp_path / "db"), fs=fs, shards=1)
    fs.log.clear()
    db.put({"_id": "a", "x": 1})
    writes = [op for op, name in fs.log if op in ("append", "fsync") and name.endswith(".settee")]
    assert writes == ["append", "fsync", "append", "fsync"]
    db.close()


def test_a_write_that_changes_nothing_writes_nothing(tmp_path: Any) -> None:
    """A conflict, a delete of a missing document and a replicated revision the shard
    already holds store nothing new: no append, no fsync, no header (CouchDB's
    updater commits only when the database changed). Mutant: a writer committing
    every group, changed or not, passed the whole proof (the empty commit's header
    names the same trees and seq, so every read answers alike)."""
    fs = RecordingFileSystem()
    db = settee.Database(str(tmp_path / "db"), fs=fs, shards=1)
    rev = db.put({"_id": "a", "x": 1})["rev"]
    fs.log.clear()
    with pytest.raises(settee.Conflict):
        db.put({"_id": "a", "x": 2})
    with pytest.raises(settee.NotFound):
        db.delete("b", rev)
    assert db.bulk_docs([{"_id": "a", "_rev": rev, "x": 1}], new_edits=False) == []
    assert [op for op, name in fs.log if op in ("append", "fsync")] == []
    db.close()


def test_a_body_pointer_names_attachments_only_when_there_are_some(tmp_path: Any) -> None:
    """FORMAT.md "bodies": rev -> [pos, size], or [pos, size, attachments] when the
    revision has any. Mutant: _next_info always storing the third field (an empty
    list) answered every read alike and passed the whole proof."""
    with _open(tmp_path / "db", shards=1) as db:
        rev = db.put({"_id": "plain"})["rev"]
        with_att = db.put({"_id": "att", "_attachments": {"f": {"data": b"x"}}})["rev"]
        snap = db.shards[0].current()
        plain, att = snap.doc_info("plain"), snap.doc_info("att")
        assert plain is not None and att is not None
        assert len(plain.bodies[rev]) == 2
        assert len(att.bodies[with_att]) == 3 and len(att.bodies[with_att][2]) == 1


def test_fsync_false_never_fsyncs_commits(tmp_path: Any) -> None:
    fs = RecordingFileSystem()
    db = settee.Database(str(tmp_path / "db"), fs=fs, shards=1, fsync=False)
    fs.log.clear()
    db.put({"_id": "a"})
    assert [op for op, _ in fs.log if op == "fsync"] == []
    db.close()


def test_large_document_is_one_append_per_commit(tmp_path: Any) -> None:
    """A 40 MB body is written with one append, not in pieces: the batch appends it
    early as soon as it holds it (file.SPILL_BYTES), then the tree nodes, then the header."""
    fs = RecordingFileSystem()
    db = settee.Database(str(tmp_path / "db"), fs=fs, shards=2)
    payload = os.urandom(20 * 1024 * 1024).hex()  # 40 MB of text
    fs.log.clear()
    rev = db.put({"_id": "big", "data": payload})["rev"]
    assert [op for op, _ in fs.log].count("append") == 3
    assert db.get("big")["data"] == payload
    db.close()
    with _open(tmp_path / "db") as again:
        assert again.get("big", rev=rev)["data"] == payload


def test_document_above_limit_is_bad_request_and_writes_nothing(tmp_path: Any) -> None:
    with _open(tmp_path / "db", max_document_size=1000) as db:
        with pytest.raises(settee.BadRequest, match="max_document_size"):
            db.put({"_id": "a", "data": "x" * 2000})
        assert db.info()["doc_count"] == 0
        assert db.put({"_id": "a", "data": "x" * 100})["ok"]


# -- readers never wait for the writer -------------------------------------------------------


@pytest.mark.parametrize("read_mode", ["parallel", "serialized"])
def test_reader_during_writer_fsync(tmp_path: Any, read_mode: str) -> None:
    """While the writer sits in fsync, a parallel reader answers from the last
    snapshot; a serialized reader queues behind the writer (pre-3.5 CouchDB)."""
    fs = RecordingFileSystem()
    db = settee.Database(str(tmp_path / "db"), fs=fs, shards=1, read_mode=read_mode)
    rev = db.put({"_id": "a", "x": 1})["rev"]
    db.shards[0].snapshot.by_id.cache.clear()  # force the reader to pread
    fs.block_op = "fsync"
    writer = threading.Thread(target=db.put, args=({"_id": "a", "_rev": rev, "x": 2},))
    writer.start()
    assert fs.blocked.wait(10)
    answers: list[Any] = []
    reader = threading.Thread(target=lambda: answers.append(db.get("a")))
    reader.start()
    reader.join(0.5)
    if read_mode == "parallel":
        assert answers and answers[0]["x"] == 1  # the old snapshot, not a partial state
    else:
        assert not answers  # queued on the shard lock the writer holds
    fs.release.set()
    writer.join(10)
    reader.join(10)
    assert answers
    assert db.get("a")["x"] == 2
    db.close()


def test_reader_never_sees_part_of_a_batch(tmp_path: Any) -> None:
    """MVCC: every bulk of 10 new docs becomes visible at once."""
    db = _open(tmp_path / "db", shards=1)
    stop = threading.Event()
    seen: list[int] = []

    def read() -> None:
        while not stop.is_set():
            seen.append(db.all_docs()["total_rows"])
            seen.append(len(db.all_docs()["rows"]))

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    for batch in range(40):
        db.bulk_docs([{"_id": f"{batch:03d}-{i}"} for i in range(10)])
    stop.set()
    for t in readers:
        t.join()
    assert seen and all(n % 10 == 0 for n in seen), sorted(set(seen))
    db.close()


# -- concurrency ------------------------------------------------------------------------------


def test_two_updates_from_one_rev_give_one_success(tmp_path: Any) -> None:
    db = _open(tmp_path / "db", shards=2)
    rev = db.put({"_id": "a"})["rev"]
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def update(n: int) -> None:
        barrier.wait()
        try:
            db.put({"_id": "a", "_rev": rev, "n": n})
            outcomes.append("ok")
        except settee.Conflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=update, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * 7 + ["ok"]
    assert db.get("a")["_rev"].startswith("2-")
    db.close()


def test_writers_and_readers_stress(tmp_path: Any) -> None:
    """8 writers with conflicting updates and 8 readers; then: every acknowledged
    write survives reopen, every Conflict was legitimate, nothing else raised."""
    path = tmp_path / "db"
    db = _open(path, shards=4)
    ids = [f"doc{i}" for i in range(12)]
    acked: list[tuple[str, str | None, str]] = []  # (id, parent rev, new rev)
    conflicts: list[tuple[str, str | None]] = []
    errors: list[BaseException] = []
    deadline = threading.Event()

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        while not deadline.is_set():
            doc_id = rng.choice(ids)
            try:
                parent = db.get(doc_id)["_rev"]
            except settee.NotFound:
                parent = None
            doc = {"_id": doc_id, "w": seed} | ({"_rev": parent} if parent else {})
            try:
                acked.append((doc_id, parent, db.put(doc)["rev"]))
            except settee.Conflict:
                conflicts.append((doc_id, parent))
            except BaseException as exc:
                errors.append(exc)

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        last: dict[str, int] = {}
        while not deadline.is_set():
            doc_id = rng.choice(ids)
            try:
                pos = int(db.get(doc_id)["_rev"].split("-")[0])
            except settee.NotFound:
                continue
            except BaseException as exc:
                errors.append(exc)
                continue
            if pos < last.get(doc_id, 0):
                errors.append(AssertionError(f"{doc_id} went back from {last[doc_id]} to {pos}"))
            last[doc_id] = pos

    threads = [threading.Thread(target=writer, args=(s,)) for s in range(8)]
    threads += [threading.Thread(target=reader, args=(100 + s,)) for s in range(8)]
    for t in threads:
        t.start()
    deadline.wait(3)
    deadline.set()
    for t in threads:
        t.join()
    db.close()
    assert not errors, errors[:3]
    assert acked and conflicts
    winners_by_parent: dict[tuple[str, str | None], int] = {}
    for doc_id, parent, _rev in acked:
        winners_by_parent[(doc_id, parent)] = winners_by_parent.get((doc_id, parent), 0) + 1
    # No lost update: one success per (doc, parent) ...
    assert max(winners_by_parent.values()) == 1
    # ... and a conflict only when another writer had extended that parent.
    assert all(key in winners_by_parent for key in conflicts)
    with _open(path) as again:
        for doc_id, _parent, rev in acked:
            assert again.get(doc_id, rev=rev)["_rev"] == rev
        for doc_id in ids:
            chain = [a for a in acked if a[0] == doc_id]
            if chain:
                assert (
                    again.get(doc_id)["_rev"]
                    == max(chain, key=lambda a: int(a[2][0 : a[2].index("-")]))[2]
                )


def test_close_while_writing_never_hangs_and_keeps_acknowledged(tmp_path: Any) -> None:
    path = tmp_path / "db"
    db = _open(path, shards=2)
    acked: list[str] = []
    refused: list[BaseException] = []

    def write(n: int) -> None:
        for i in range(200):
            try:
                db.put({"_id": f"w{n}-{i}"})
                acked.append(f"w{n}-{i}")
            except settee.SetteeError as exc:
                refused.append(exc)
                return

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    while len(acked) < 50:
        threading.Event().wait(0.001)
    db.close()
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    assert refused and all("closed" in str(e) for e in refused)
    with _open(path) as again:
        assert {r["id"] for r in again.all_docs(keys=acked)["rows"] if "error" not in r} == set(
            acked
        )


@pytest.mark.parametrize("writes", [1, 40])
def test_a_read_over_shards_that_commits_land_inside_is_one_instant(
    tmp_path: Any, writes: int
) -> None:
    """A read over several shards pins every shard's snapshot as of one instant
    (settee.cut.WriterCut): commits landing between two shards' snapshots (the cut's
    step_hook, where the interleaving scheduler parks a reader) make it take them
    again, so it shows both of a client's writes or neither; under a stream of them
    it still ends (after RETRIES it holds publications off for one pass)."""
    with _open(tmp_path / "db", shards=2) as db:
        revs = {i: db.put({"_id": i, "v": 0})["rev"] for i in ("b", "a")}  # shards 0, 1
        steps: list[str] = []

        def write_inside(step: str) -> None:
            steps.append(step)
            if len(steps) <= writes:
                for doc_id in ("b", "a"):
                    revs[doc_id] = db.put({"_id": doc_id, "_rev": revs[doc_id], "v": len(steps)})[
                        "rev"
                    ]

        db.cut.step_hook = write_inside
        rows = db.all_docs(include_docs=True)["rows"]
        db.cut.step_hook = None
        assert steps and set(steps) == {"pin"}
        assert rows[0]["doc"]["v"] == rows[1]["doc"]["v"], rows


def test_a_cut_that_commits_keep_spoiling_holds_publications_off_for_its_last_pass(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After RETRIES lock-free attempts that a commit spoiled, the cut takes every
    shard's snapshot with the publication lock held, so no commit can land between
    two of them; without the lock its last pass is as exposed as the others (the
    mutation round's U4b: no test reached the fallback with a publisher running)."""
    from settee.cut import RETRIES

    with _open(tmp_path / "db", shards=2) as db:
        rev = db.put({"_id": "b", "v": 0})["rev"]  # shard 0
        locked: list[bool] = []
        shard = db.shards[1]
        real_current = shard.current

        def current() -> Any:
            locked.append(db.cut._lock.locked())
            return real_current()

        def spoil(step: str) -> None:
            nonlocal rev
            rev = db.put({"_id": "b", "_rev": rev, "v": len(locked)})["rev"]

        monkeypatch.setattr(shard, "current", current)
        db.cut.step_hook = spoil
        db.all_docs()
        db.cut.step_hook = None
        assert locked == [False] * RETRIES + [True], locked


# -- lifecycle and configuration --------------------------------------------------------------


def test_closed_database_raises_and_close_is_idempotent(tmp_path: Any) -> None:
    db = _open(tmp_path / "db")
    db.close()
    db.close()
    for call in (lambda: db.put({"_id": "a"}), lambda: db.get("a"), db.info, db.changes):
        with pytest.raises(settee.SetteeError, match="closed"):
            call()


def test_second_open_in_process_is_refused(tmp_path: Any) -> None:
    with _open(tmp_path / "db"), pytest.raises(settee.SetteeError, match="another process"):
        _open(tmp_path / "db")
    _open(tmp_path / "db").close()  # the lock is released by close


@pytest.mark.parametrize("wrapped", ["first", "second", "both"])
def test_a_wrapped_os_file_system_takes_the_writer_lock_too(tmp_path: Any, wrapped: str) -> None:
    """A FileSystemWrapper of the OS's file system (one counting calls, say) names
    real paths, so its writer takes the directory's lock and publishes HEADS as a
    plain one does: it took neither, and two writers opened one directory at once
    (found in review)."""
    path = str(tmp_path / "db")

    def fs(which: str) -> Any:
        return FileSystemWrapper(OsFileSystem()) if wrapped in (which, "both") else None

    first = settee.Database(path, fs=fs("first"))
    try:
        with pytest.raises(settee.SetteeError, match="another process"):
            settee.Database(path, fs=fs("second"))
        first.put({"_id": "a"})
        assert os.path.exists(os.path.join(path, "HEADS"))  # readonly handles follow it
        with settee.open(path, readonly=True) as reader:
            assert reader.get("a")["_id"] == "a"
    finally:
        first.close()
    settee.Database(path, fs=fs("second")).close()  # the lock is released by close


def test_second_process_is_refused(tmp_path: Any) -> None:
    path = str(tmp_path / "db")
    code = (
        "import settee, sys\n"
        "try:\n    settee.open(sys.argv[1])\nexcept settee.SetteeError as e:\n"
        "    print('refused:', e); sys.exit(3)\n"
    )
    with _open(path):
        result = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "another process" in result.stdout


def test_shard_count_is_fixed_at_creation(tmp_path: Any) -> None:
    _open(tmp_path / "db", shards=3).close()
    with pytest.raises(settee.BadRequest, match="shards=3"):
        _open(tmp_path / "db", shards=4)
    with _open(tmp_path / "db") as db:  # absent option: use what is stored
        assert len(db.shards) == 3


@pytest.mark.parametrize(
    "options",
    [{"shard": 2}, {"shards": 0}, {"shards": True}, {"read_mode": "fast"}, {"fsync": 1}],
)
def test_bad_options_are_bad_requests_naming_the_option(tmp_path: Any, options: dict) -> None:
    with pytest.raises(settee.BadRequest, match=next(iter(options))):
        _open(tmp_path / "db", **options)
    assert not (tmp_path / "db").exists()  # validated before anything touches disk


def test_none_option_means_default(tmp_path: Any) -> None:
    with _open(tmp_path / "db", shards=None, revs_limit=None) as db:
        assert len(db.shards) == 4 and db.config["revs_limit"] == 1000


# -- compaction ------------------------------------------------------------------------------


def test_compaction_while_writing_and_reading_old_snapshot(tmp_path: Any) -> None:
    path = tmp_path / "db"
    db = _open(path, shards=2)
    for i in range(300):
        db.put({"_id": f"d{i:03d}", "v": 0})
    old = [shard.snapshot for shard in db.shards]
    acked: list[str] = []
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            db.put({"_id": f"new{i:05d}"})
            acked.append(f"new{i:05d}")
            i += 1

    t = threading.Thread(target=write)
    t.start()
    size_before = db.info()["sizes"]["file"]
    db.compact()
    stop.set()
    t.join()
    # Readers on snapshots taken before the compaction still read the old file.
    assert sum(s.counts()[0] for s in old) == 300
    info = next(s.doc_info("d000") for s in old if s.doc_info("d000"))
    assert old[0].file is not db.shards[0].snapshot.file
    assert info.winner.startswith("1-")
    db.close()
    with _open(path) as again:
        assert again.info()["doc_count"] == 300 + len(acked)
        assert again.info()["sizes"]["file"] < size_before + 4096 * 50
        rows = again.all_docs(keys=acked)["rows"]
        assert all("error" not in r for r in rows)
    assert not any(name.endswith(".compact") for name in os.listdir(path))


class _OneLockFileSystem(FileSystemWrapper):
    """A file system as a careful user may write one: every call, a handle's close
    among them, under one plain lock. ``collect_inside`` makes the next ``open`` run
    the collector while it holds that lock, as any allocation there may."""

    def __init__(self) -> None:
        super().__init__(OsFileSystem())
        self.lock = threading.Lock()
        self.collect_inside = False

    def intercept(self, op: str, path: str, call: Callable[[], Any]) -> Any:
        with self.lock:
            if op == "open" and self.collect_inside:
                self.collect_inside = False
                gc.collect()
            return call()


def test_a_retired_file_collected_inside_a_file_system_call_does_not_deadlock(
    tmp_path: Any,
) -> None:
    """A compaction retires a shard's file while readers may still hold snapshots
    of it, so its handle is closed when the collector frees the last one: inside
    whatever call allocated, here the file system's own ``open``, holding its lock.
    Closing the handle there waited for that lock for ever; the engine now closes
    retired handles only between commits, at a readonly handle's read and at
    ``close()`` (settee.retired)."""
    fs = _OneLockFileSystem()
    path = str(tmp_path / "db")
    # Not a with block: after a deadlock, close() would wait for the stuck lock too.
    db = settee.Database(path, fs=fs, shards=1)
    db.put({"_id": "a"})
    held: list[Any] = [db.shards[0].current()]
    held.append(held)  # freed by the collector only
    old_handle = held[0].file.handle
    del held
    db.compact()  # retires the file the cycle holds
    fs.collect_inside = True
    done = threading.Event()

    def opening_after_a_write() -> None:
        db.put({"_id": "b"})
        db.compact()  # its open of the new file runs the collector
        done.set()

    worker = threading.Thread(target=opening_after_a_write, daemon=True)
    worker.start()
    if not done.wait(10):
        fs.lock.release()  # a plain Lock: lets the stuck close through, so this process can end
        pytest.fail("a call never returned: a retired handle's close waited for open's lock")
    assert not fs.collect_inside, "the collector never ran inside open"
    db.put({"_id": "c"})  # the writer's next turn closes what was queued
    with pytest.raises(OSError):
        old_handle.pread(0, 1)
    assert [r["id"] for r in db.all_docs()["rows"]] == ["a", "b", "c"]
    db.close()


def _descriptors_of_replaced_files(directory: str) -> list[str]:
    """This process's descriptors still open on a file of ``directory`` that a
    rename has since replaced (the kernel names it "... (deleted)")."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(directory) and target.endswith(" (deleted)"):
                found.append(target)
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_retired_file_is_closed_once_unused_at_the_next_commit(tmp_path: Any) -> None:
    """Closing a retired file waits for a safe point (settee.retired): the writer's
    next turn, so a file a compaction replaced does not keep its descriptor, and its
    disk space, once no reader holds a snapshot of it."""
    path = str(tmp_path / "db")
    with settee.open(path, shards=1) as db:
        db.put({"_id": "a"})
        held = [db.shards[0].current()]
        db.compact()
        assert _descriptors_of_replaced_files(path), "the held snapshot's file stays open"
        del held
        db.put({"_id": "b"})
        assert _descriptors_of_replaced_files(path) == []


def _update_at_compact_swap(db: settee.Database, doc_id: str) -> Callable[[str], None]:
    """A step hook: when the compaction has copied everything and is about to swap,
    update ``doc_id`` (already copied) so the final catch-up must move its seq."""

    def hook(step: str) -> None:
        if step == "compact_swap":
            db.shards[0].step_hook = None
            db.put({**db.get(doc_id), "v": "updated"})

    return hook


def test_catch_up_moves_the_seq_of_a_document_updated_during_compaction(tmp_path: Any) -> None:
    """The final catch-up replaces a copied document's by_seq row, not only adds one:
    the feed lists each document once, at its new seq, and ``settee check`` is clean."""
    path = tmp_path / "db"
    with _open(path, shards=1) as db:
        for doc_id in ("a", "b", "c"):
            db.put({"_id": doc_id})
        db.shards[0].step_hook = _update_at_compact_swap(db, "a")
        db.compact()
        feed = [(r["id"], int(r["seq"].split("-")[0])) for r in db.changes()["results"]]
        assert feed == [("b", 2), ("c", 3), ("a", 4)]
        assert db.get("a")["v"] == "updated"
    assert list(check_database(str(path))) == []


def _purge_at_compact_swap(
    db: settee.Database, revs: dict[str, list[str]]
) -> Callable[[str], None]:
    """A step hook: when the compaction has copied everything and is about to swap,
    purge ``revs`` (documents the copy holds)."""

    def hook(step: str) -> None:
        if step == "compact_swap":
            db.shards[0].step_hook = None
            db.purge(revs)

    return hook


@pytest.mark.parametrize("strict", [False, True])
def test_a_document_purged_whole_during_compaction_stays_purged(
    tmp_path: Any, strict: bool
) -> None:
    """by_seq keeps no row of a document purged whole, so the catch-up, which reads
    by_seq, cannot see it: the shard notes the ids it purges while a compaction runs
    and the copy drops them (else the swap brought the document back)."""
    path = tmp_path / "db"
    with _open(path, shards=1, strict=strict) as db:
        revs = {doc_id: db.put({"_id": doc_id})["rev"] for doc_id in ("a", "b", "c")}
        db.shards[0].step_hook = _purge_at_compact_swap(db, {"a": [revs["a"]]})
        db.compact()
        assert [r["id"] for r in db.all_docs()["rows"]] == ["b", "c"]
        assert [r["id"] for r in db.changes()["results"]] == ["b", "c"]
        assert db.info()["doc_count"] == 2
    with _open(path, shards=1) as again:
        assert [r["id"] for r in again.all_docs()["rows"]] == ["b", "c"]
    assert list(check_database(str(path))) == []


def test_a_partly_purged_document_during_compaction_keeps_its_new_seq(tmp_path: Any) -> None:
    path = tmp_path / "db"
    theirs = "2-" + "f" * 32
    with _open(path, shards=1) as db:
        first = db.put({"_id": "a", "v": 1})["rev"]
        mine = db.put({"_id": "a", "_rev": first, "v": 2})["rev"]
        history = {"start": 2, "ids": ["f" * 32, first[2:]]}
        db.bulk_docs([{"_id": "a", "_rev": theirs, "_revisions": history}], new_edits=False)
        db.put({"_id": "b"})
        db.shards[0].step_hook = _purge_at_compact_swap(db, {"a": [theirs]})
        db.compact()
        assert db.get("a", conflicts=True) == {"_id": "a", "_rev": mine, "v": 2}
        assert [r["id"] for r in db.changes()["results"]] == ["b", "a"]
    assert list(check_database(str(path))) == []


def test_strict_mode_refuses_a_compaction_that_would_change_the_shard(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planted catch-up fault (stale by_seq rows kept) is caught at the swap: the
    compaction fails with StrictModeError, the shard keeps its file and its answers,
    and goes on accepting writes."""
    from settee import compaction
    from settee.strict import StrictModeError

    original = compaction._Copier._copy

    def keep_stale_rows(self: Any, snap: Any, infos: Any, stale_seqs: list[int]) -> None:
        original(self, snap, infos, stale_seqs=[])

    monkeypatch.setattr(compaction._Copier, "_copy", keep_stale_rows)
    path = tmp_path / "db"
    with _open(path, shards=1, strict=True) as db:
        for doc_id in ("a", "b"):
            db.put({"_id": doc_id})
        db.shards[0].step_hook = _update_at_compact_swap(db, "a")
        with pytest.raises(StrictModeError, match="by_seq"):
            db.compact()
        assert [r["id"] for r in db.changes()["results"]] == ["b", "a"]
        db.put({"_id": "after"})
        assert db.info()["doc_count"] == 3
    assert not any(name.endswith(".compact") for name in os.listdir(path))
    assert list(check_database(str(path))) == []


@pytest.mark.parametrize("fault", ["seq", "order"])
def test_strict_mode_refuses_a_compaction_whose_copy_answers_otherwise(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """A compacted shard must answer as the shard it replaces: the same update seq
    and the same changes feed in the same order. A copy sound on its own (its trees
    agree) but at another seq, or with two documents' seqs swapped, fails the
    compaction, and the shard keeps its file."""
    from settee import compaction

    if fault == "seq":
        catch_up = compaction._Copier.catch_up

        def ahead(self: Any) -> None:
            catch_up(self)
            self.seq += 1

        monkeypatch.setattr(compaction._Copier, "catch_up", ahead)
    else:
        copy_doc = compaction._Copier._copy_doc

        def swapped(self: Any, snap: Any, info: Any, batch: Any) -> Any:
            c = copy_doc(self, snap, info, batch)
            seq = {1: 2, 2: 1}.get(c.seq, c.seq)
            return settee.docinfo.DocInfo(c.id, seq, c.deleted, c.tree, c.bodies, c.active)

        monkeypatch.setattr(compaction._Copier, "_copy_doc", swapped)
    path = tmp_path / "db"
    with _open(path, shards=1, strict=True) as db:
        db.put({"_id": "a"})
        db.put({"_id": "b"})
        with pytest.raises(StrictModeError, match="the copy"):
            db.compact()
        assert [r["id"] for r in db.changes()["results"]] == ["a", "b"]
    monkeypatch.undo()
    assert list(check_database(str(path))) == []


def test_leftover_compaction_file_is_kept_by_open_and_replaced_by_compaction(
    tmp_path: Any,
) -> None:
    """open() never deletes what it finds; the next compaction replaces the leftover."""
    path = tmp_path / "db"
    with _open(path, shards=1) as db:
        db.put({"_id": "a", "x": 1})
    (path / "shard-000.settee.compact").write_bytes(b"half a compaction")
    with _open(path) as db:
        assert db.get("a")["x"] == 1
        assert (path / "shard-000.settee.compact").read_bytes() == b"half a compaction"
        db.compact()
        assert db.get("a")["x"] == 1
    assert not (path / "shard-000.settee.compact").exists()


# -- strict mode ------------------------------------------------------------------------------


def test_strict_mode_is_an_option_off_by_default(tmp_path: Any) -> None:
    with _open(tmp_path / "a", shards=1) as db:
        assert db.shards[0].strict is False
    with _open(tmp_path / "b", shards=1, strict=True) as db:
        assert db.shards[0].strict is True


def test_strict_mode_fails_the_commit_that_breaks_an_invariant(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that forgets the by_seq row is caught by the checker at commit time."""
    db = _open(tmp_path / "db", shards=1, strict=True)
    db.put({"_id": "fine"})
    original = settee.shard._Group.write_trees

    def forgetful(self: Any, batch: Any) -> Any:
        by_id, _by_seq = original(self, batch)
        return by_id, self.base.by_seq

    monkeypatch.setattr(settee.shard._Group, "write_trees", forgetful)
    with pytest.raises(settee.SetteeError, match="strict mode"):
        db.put({"_id": "broken"})
    db.close()


def _planted(monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """A writer bug strict mode must catch, planted in the group writer (the checker
    itself left honest): ``stale`` keeps the by_seq rows a commit should drop (an
    updated or purged document's old seq), ``kept`` keeps a document purged whole in
    by_id, ``row`` writes by_seq rows naming another winner, ``ahead`` and ``behind``
    move the commit's header seq off its newest document seq, ``reused`` gives an
    edit a seq the shard had already handed out."""
    original = settee.shard._Group.write_trees
    honest_row = settee.docinfo.DocInfo.by_seq_row

    def write_trees(self: Any, batch: Any) -> Any:
        removed, stale = self.removed, self.stale_seqs
        if fault == "stale":
            self.stale_seqs = []
        if fault == "kept":
            self.removed = set()
        if fault == "reused":
            self.pending = {
                doc_id: settee.docinfo.DocInfo(
                    i.id, i.seq - 1, i.deleted, i.tree, i.bodies, i.active, i.winner
                )
                for doc_id, i in self.pending.items()
            }
        if fault == "row":
            settee.docinfo.DocInfo.by_seq_row = lambda info: (  # type: ignore[method-assign]
                info.id,
                "9-" + "f" * 32,
                info.deleted,
            )
        try:
            return original(self, batch)
        finally:
            settee.docinfo.DocInfo.by_seq_row = honest_row  # type: ignore[method-assign]
            self.removed, self.stale_seqs = removed, stale
            self.seq += {"ahead": 1, "behind": -1, "reused": -1}.get(fault, 0)

    monkeypatch.setattr(settee.shard._Group, "write_trees", write_trees)


@pytest.mark.parametrize(
    ("fault", "step", "reported"),
    [
        ("stale", "update", "still holds 'a''s previous seq"),
        ("stale", "purge", "still holds purged 'a'"),
        ("kept", "purge", "purged document 'a' is still in by_id"),
        ("row", "update", "by_seq["),
        ("ahead", "update", "is not the newest document seq"),
        ("behind", "purge", "a purge commit keeps header seq"),
        ("reused", "update", "'a' has seq 2, not in (2, 2]"),
    ],
)
def test_strict_mode_fails_a_commit_that_breaks_an_agreement(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, fault: str, step: str, reported: str
) -> None:
    """Each agreement strict mode checks per commit (one by_seq row per document, at
    its seq, naming its winner, none for a document purged whole; each edit a seq
    past the previous commit's; the header seq is the newest document's, and a purge
    moves it on) fails the write that breaks it."""
    db = _open(tmp_path / "db", shards=1, strict=True)
    try:
        rev = db.put({"_id": "a"})["rev"]
        db.put({"_id": "b"})
        _planted(monkeypatch, fault)
        with pytest.raises(settee.SetteeError, match="strict mode") as failed:
            if step == "update":
                db.put({"_id": "a", "_rev": rev, "x": 1})
            else:
                db.purge({"a": [rev]})
        assert reported in str(failed.value)
    finally:
        monkeypatch.undo()
        db.close()


def test_strict_mode_fails_a_commit_that_writes_an_oversized_node(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Strict mode walks the by_id nodes a commit wrote (``check_tree(since=...)``):
    a writer that let a leaf of several documents grow past ``node_size`` fails the
    write."""
    original = settee.shard._Group.write_trees

    def unsplit(self: Any, batch: Any) -> Any:
        honest = self.base.by_id.node_bytes
        self.base.by_id.node_bytes = 1 << 20
        try:
            by_id, by_seq = original(self, batch)
        finally:
            self.base.by_id.node_bytes = honest
        by_id.node_bytes = honest
        return by_id, by_seq

    db = _open(tmp_path / "db", shards=1, strict=True, node_size=128)
    try:
        db.put({"_id": "first"})
        monkeypatch.setattr(settee.shard._Group, "write_trees", unsplit)
        with pytest.raises(settee.SetteeError, match="bytes > 128"):
            db.bulk_docs([{"_id": f"{i:02d}" + "x" * 60} for i in range(6)])
    finally:
        monkeypatch.undo()
        db.close()


def test_strict_mode_reads_back_every_body_a_commit_wrote(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Strict mode reads each leaf body the commit appended, the first one (at the
    commit's first byte) included: a writer that stored something that is no
    document body fails the write."""
    from settee.spec.format import encode_payload

    original = settee.shard._Group.write_trees

    def garbled(self: Any, batch: Any) -> Any:
        self.bodies[min(self.bodies)] = encode_payload(["not", "a", "map"])
        return original(self, batch)

    db = _open(tmp_path / "db", shards=1, strict=True)
    try:
        db.put({"_id": "first"})
        monkeypatch.setattr(settee.shard._Group, "write_trees", garbled)
        with pytest.raises(settee.SetteeError, match="not a map"):
            db.put({"_id": "a", "x": 1})
    finally:
        monkeypatch.undo()
        db.close()


def test_strict_mode_fails_a_commit_whose_active_size_is_miscounted(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The by_id reduction's third count is the active size of the leaves' bodies
    (FORMAT.md "Reductions"); strict mode recounts what a commit changed: a reduce
    that miscounts it fails the write, however consistent its own tree looks."""
    from settee import snapshot

    honest = snapshot._reduce_by_id
    monkeypatch.setattr(
        snapshot, "_reduce_by_id", lambda kvs: (*honest(kvs)[:2], honest(kvs)[2] + bool(kvs))
    )
    db = _open(tmp_path / "db", shards=1, strict=True)
    try:
        with pytest.raises(settee.SetteeError, match="active"):
            db.put({"_id": "a"})
    finally:
        db.close()


def _lying_summary(field: str) -> Any:
    """A ``DocInfo.to_value`` that stores a wrong derived field (the winner, the
    active size or the winner's body entry), as a broken writer would: readers
    trust these fields."""
    original = settee.docinfo.DocInfo.to_value

    def to_value(self: Any) -> tuple[Any, ...]:
        seq, deleted, winner, active, revs, body = original(self)
        if field == "winner":
            return (seq, deleted, "9-" + "f" * 32, active, revs, body)
        if field == "winner_body":
            return (seq, deleted, winner, active, revs, (body[0], body[1] + 1))
        return (seq, deleted, winner, active + 1, revs, body)

    return to_value


_LIE_REPORTED_AS = {
    "winner": "stored winner",
    "active": "active size",
    "winner_body": "winner body entry",
}


@pytest.mark.parametrize("field", sorted(_LIE_REPORTED_AS))
def test_a_wrong_stored_summary_is_caught_by_strict_mode_and_check(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, field: str
) -> None:
    """by_id values store winner, active and the winner's body entry beside the
    revision tree (FORMAT.md "by_id"); strict mode and ``settee check`` recompute
    them from the tree instead of trusting them."""
    monkeypatch.setattr(settee.docinfo.DocInfo, "to_value", _lying_summary(field))
    with (
        _open(tmp_path / "strict", shards=1, strict=True) as db,
        pytest.raises(settee.SetteeError, match="strict mode"),
    ):
        db.put({"_id": "doc"})
    with _open(tmp_path / "lax", shards=1) as db:
        db.put({"_id": "doc"})
    problems = list(check_database(str(tmp_path / "lax")))
    assert any(_LIE_REPORTED_AS[field] in p for p in problems), problems


def test_snapshot_held_across_close_never_reads_another_database(tmp_path: Any) -> None:
    """Regression (found in review): close() freed the descriptors without marking
    the file closed, so a reader still holding a snapshot could pread a reused
    descriptor number, i.e. another database's file."""
    a = _open(tmp_path / "a", shards=1)
    a.put({"_id": "x", "secret": "A"})
    snap = a.shards[0].snapshot
    a.close()
    assert_reads_refused_beside_another_database(snap, tmp_path / "b")


def assert_reads_refused_beside_another_database(snap: Any, other: Any) -> None:
    """``snap`` (of a database closed since, holding document "x") refuses to read
    while another database, written just now, may hold the descriptor numbers its
    file had."""
    with _open(other, shards=1) as b:
        b.put({"_id": "x", "secret": "B"})
        snap.by_id.cache.clear()
        with pytest.raises(settee.SetteeError, match="closed"):
            # The tree node may still be answered from this database's memory;
            # the body always comes from the file, whose descriptor is gone.
            info = snap.doc_info("x")
            assert info is not None
            snap.body(info, info.winner)


def test_each_body_is_packed_once_per_write(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The validated document carries its msgpack bytes to the writer (review finding)."""
    import msgpack

    from settee.spec import format as spec_format

    calls: list[int] = []
    packer = msgpack.Packer(use_bin_type=True)

    class Counting:
        """encode_payload's packer for every thread, counting packs of the body."""

        @staticmethod
        def pack(obj: Any) -> bytes:
            if isinstance(obj, dict) and obj.get("payload") == "p" * 1000:
                calls.append(1)
            return packer.pack(obj)  # type: ignore[no-any-return]

    original = msgpack.packb

    def counting(obj: Any, *args: Any, **kwargs: Any) -> bytes:  # a pack past encode_payload
        Counting.pack(obj)
        return original(obj, *args, **kwargs)  # type: ignore[no-any-return]

    with _open(tmp_path / "db", shards=1) as db:
        monkeypatch.setattr(spec_format, "_PACKERS", Counting)
        monkeypatch.setattr(msgpack, "packb", counting)
        db.put({"_id": "a", "payload": "p" * 1000})
    assert len(calls) == 1


# -- fault containment ---------------------------------------------------------------------------


def _while_the_writer_is_paused(db: settee.Database, submit: Callable[[], Any]) -> Any:
    """``submit()`` while shard 0's writer is paused, so every request it queues
    commits in one group; its result (the futures)."""
    shard = db.shards[0]
    paused, release = threading.Event(), threading.Event()

    def pause() -> None:
        paused.set()
        assert release.wait(10)

    pauser = threading.Thread(target=shard.call_in_writer, args=(pause,))
    pauser.start()
    assert paused.wait(10)
    try:
        return submit()
    finally:
        release.set()
        pauser.join(10)


def _queued_behind_a_paused_writer(db: settee.Database, docs: list[dict[str, Any]]) -> list[Any]:
    """Submit each doc as its own request while the writer is paused, so they commit as
    one group; return their futures."""
    shard = db.shards[0]
    return _while_the_writer_is_paused(  # type: ignore[no-any-return]
        db,
        lambda: [shard.submit([validate_doc(d, new_edits=True)], new_edits=True) for d in docs],
    )


def test_writer_side_error_fails_only_its_request_and_the_shard_stays_writable(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: an edit the writer could not apply (OverflowError from a 30-digit
    revision position) failed the whole group and refused every later write to the shard."""
    original = settee.shard.apply_edit

    def explode_on_boom(info: Any, doc: Any, **kwargs: Any) -> Any:
        if doc.id == "boom":
            raise OverflowError("int too big to convert")
        return original(info, doc, **kwargs)

    monkeypatch.setattr(settee.shard, "apply_edit", explode_on_boom)
    with _open(tmp_path / "db", shards=1, strict=True) as db:
        futures = _queued_behind_a_paused_writer(db, [{"_id": "a"}, {"_id": "boom"}, {"_id": "b"}])
        assert futures[1].exception(10) is not None
        assert isinstance(futures[1].exception(), settee.SetteeError)
        assert "goes on accepting" in str(futures[1].exception())
        assert futures[0].result(10)[0].startswith("1-") and futures[2].result(10)[0]
        assert db.put({"_id": "after"})["ok"]
        with pytest.raises(settee.SetteeError, match="could not apply"):
            db.put({"_id": "boom"})
        assert db.info()["doc_count"] == 3


def test_failure_before_any_byte_is_written_fails_only_the_request_that_caused_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group whose terms cannot be built (nothing reached the file) is retried one
    request at a time, so only the culprit fails and the shard accepts later writes."""
    original = settee.shard._Group.write_trees

    def refuse_poison(self: Any, batch: Any) -> Any:
        if "poison" in self.pending:
            raise TypeError("can not serialize 'object' object")
        return original(self, batch)

    monkeypatch.setattr(settee.shard._Group, "write_trees", refuse_poison)
    with _open(tmp_path / "db", shards=1, strict=True) as db:
        futures = _queued_behind_a_paused_writer(db, [{"_id": "a"}, {"_id": "poison"}])
        assert isinstance(futures[1].exception(10), settee.SetteeError)
        assert futures[0].result(10)[0].startswith("1-")
        assert db.put({"_id": "later"})["ok"]
        assert sorted(r["id"] for r in db.all_docs()["rows"]) == ["a", "later"]
    assert not list(check_database(str(tmp_path / "db")))


def test_attachment_chunks_follow_a_compaction_that_swaps_the_file(tmp_path: Any) -> None:
    """A reader streaming an attachment keeps getting the right bytes when a
    compaction replaces the shard's file between two chunks."""
    import base64

    data = os.urandom(5 * 65536 + 7)
    with settee.open(str(tmp_path / "db"), shards=1) as db:
        att = {"content_type": "x/y", "data": base64.b64encode(data).decode()}
        rev = db.put({"_id": "a", "_attachments": {"f": att}})["rev"]
        db.put({"_id": "a", "_rev": rev, "v": 2, "_attachments": {"f": {"stub": True}}})
        meta, chunks = db.attachment_chunks("a", "f", rev=rev)
        first = next(chunks)
        db.compact()  # the old file is closed: the next chunk comes from the new one
        rest = b"".join(chunks)
        assert first + rest == data and meta["length"] == len(data)


class _FailingFile:
    """A spool's file whose reads fail past ``good`` bytes (a disk error in the
    middle of the writer's copy)."""

    def __init__(self, inner: Any, good: int) -> None:
        self._inner, self._good, self._at = inner, good, 0

    def seek(self, offset: int) -> None:
        self._at = offset
        self._inner.seek(offset)

    def read(self, size: int) -> bytes:
        if self._at >= self._good:
            raise ValueError("the spool file went away")
        return self._inner.read(size)  # type: ignore[no-any-return]

    @property
    def closed(self) -> bool:
        return self._inner.closed  # type: ignore[no-any-return]

    def close(self) -> None:
        self._inner.close()


def _failing_spool(data: bytes, good: int) -> Spooled:
    """Spooled bytes (a real ``Spooled``: only SpoolWriter makes one) whose reading
    fails after ``good`` bytes."""
    writer = SpoolWriter()
    writer.write(data)
    done = writer.finish()
    done._file = _FailingFile(done._file, good)  # type: ignore[assignment]
    return done


def test_streamed_attachment_is_stored_and_read_back_whole(tmp_path: Any) -> None:
    """A binary file as ``data`` is spooled, stored chunk by chunk and read back."""
    data = os.urandom(3 * 2**20 + 11)
    source = tmp_path / "big.bin"
    source.write_bytes(data)
    with settee.open(str(tmp_path / "db"), shards=1) as db, source.open("rb") as file:
        att = {"content_type": "x/y", "data": file}
        rev = db.put({"_id": "a", "_attachments": {"f": att}})["rev"]
        found = db.attachment("a", "f")
        assert found["data"] == data and found["length"] == len(data)
        assert found["digest"] == digest_of(data) and found["revpos"] == 1
        _meta, chunks = db.attachment_chunks("a", "f", rev=rev)
        assert b"".join(chunks) == data
    assert not list(check_database(str(tmp_path / "db")))


def test_a_write_that_fails_after_appending_early_fails_alone(tmp_path: Any) -> None:
    """A commit whose attachment cannot be read to its end, after the batch has
    already appended megabytes, fails alone: nothing of it is visible, the shard
    goes on writing, and the frames it left behind are no damage."""
    data = os.urandom(4 * 2**20)
    with _open(tmp_path / "db", shards=1, strict=True) as db:
        db.put({"_id": "before"})
        bad = {"content_type": "x/y", "data": _failing_spool(data, good=3 * 2**20)}
        with pytest.raises(settee.SetteeError, match="could not apply"):
            db.put({"_id": "broken", "_attachments": {"f": bad}})
        with pytest.raises(settee.NotFound):
            db.get("broken")
        good = {"content_type": "x/y", "data": data}
        assert db.put({"_id": "after", "_attachments": {"f": good}})["ok"]
    with _open(tmp_path / "db", shards=1, strict=True) as db:
        assert db.attachment("after", "f")["data"] == data
        assert sorted(r["id"] for r in db.all_docs()["rows"]) == ["after", "before"]
    assert not list(check_database(str(tmp_path / "db")))


def test_check_recounts_the_deleted_documents_the_reduction_claims(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``settee check`` recounts live and deleted documents from by_id's values
    instead of trusting the reduction (FORMAT.md "Reductions"): a reduce function
    that drops the deleted count writes reductions a tree walk with that same
    function finds consistent, and only the recount sees them wrong."""
    from settee import snapshot

    honest = snapshot._reduce_by_id
    monkeypatch.setattr(
        snapshot, "_reduce_by_id", lambda kvs: (*honest(kvs)[:1], 0, honest(kvs)[2])
    )
    path = str(tmp_path / "db")
    with _open(path, shards=1) as db:
        db.delete("gone", db.put({"_id": "gone"})["rev"])
        db.put({"_id": "kept"})
    problems = list(check_database(path))
    assert any("stored counts [1, 0] != recount [1, 1]" in p for p in problems), problems


def test_check_recomputes_the_by_seq_reductions(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``settee check`` walks by_seq as it walks by_id (FORMAT.md "Reductions":
    by_seq's is its row count): reductions a broken writer miscounted are reported."""
    from settee import snapshot

    honest = snapshot._reduce_by_seq
    path = str(tmp_path / "db")
    with monkeypatch.context() as patched:
        patched.setattr(snapshot, "_reduce_by_seq", lambda kvs: honest(kvs) + 1)
        with _open(path, shards=1) as db:
            db.put({"_id": "a"})
    problems = list(check_database(path))
    assert any("reduction" in p for p in problems), problems


def test_check_reports_a_by_seq_row_naming_another_winner(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A by_seq row names its document's winner and deleted flag (FORMAT.md
    "by_seq"): a row a writer filled in wrong is reported, not only a missing one."""
    path = str(tmp_path / "db")
    with _open(path, shards=1) as db:
        _planted(monkeypatch, "row")
        db.put({"_id": "a"})
    monkeypatch.undo()
    problems = list(check_database(path))
    assert any("by_seq[1] is" in p and "by_id says" in p for p in problems), problems


def test_check_reports_a_document_past_the_header_seq(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A header names its shard's newest seq (FORMAT.md "Shard header payload"): a
    writer whose header lags the document it commits is reported by ``settee check``."""
    honest = settee.shard.shard_header
    monkeypatch.setattr(
        settee.shard,
        "shard_header",
        lambda ident, by_id, by_seq, seq: honest(ident, by_id, by_seq, max(seq - 1, 0)),
    )
    path = str(tmp_path / "db")
    with _open(path, shards=1) as db:
        db.put({"_id": "late"})
    monkeypatch.setattr(settee.shard, "shard_header", honest)
    problems = list(check_database(path))
    assert any("'late' has seq 1" in p for p in problems), problems


def test_check_reports_an_attachment_stored_with_another_digest(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``settee check`` reads every attachment back and compares its digest with the
    one its record claims: a writer that records a wrong digest is reported."""
    monkeypatch.setattr(settee.docinfo, "digest_of", lambda data: digest_of(b"other bytes"))
    path = str(tmp_path / "db")
    with _open(path, shards=1) as db:
        db.put({"_id": "a", "_attachments": {"f": {"content_type": "text/plain", "data": "aGk="}}})
    monkeypatch.undo()
    problems = list(check_database(path))
    assert any("'f' of 'a'" in p and "another digest" in p for p in problems), problems


def _write_forged(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database whose by_id values pass their crc but disagree with their revision
    trees, as a writer bug would leave them: "tomb" is stored live while its tree's
    winner is a tombstone; "ghost" names a winner its tree does not hold (in by_id
    and in by_seq)."""
    from settee import docinfo

    honest = docinfo.DocInfo.to_value
    honest_row = docinfo.DocInfo.by_seq_row

    def forged(info: docinfo.DocInfo) -> tuple[Any, ...]:
        seq, deleted, winner, active, revs, body = honest(info)
        if info.id == "tomb":
            deleted = False
        if info.id == "ghost":
            winner = "9-" + "f" * 32
        return (seq, deleted, winner, active, revs, body)

    def forged_row(info: docinfo.DocInfo) -> tuple[str, str, bool]:
        doc_id, winner, deleted = honest_row(info)
        return (doc_id, "9-" + "f" * 32 if doc_id == "ghost" else winner, deleted)

    with monkeypatch.context() as patched:
        patched.setattr(docinfo.DocInfo, "to_value", forged)
        patched.setattr(docinfo.DocInfo, "by_seq_row", forged_row)
        with settee.open(path, shards=1) as db:
            db.delete("tomb", db.put({"_id": "tomb", "a": 1})["rev"])
            db.put({"_id": "ghost", "b": 2})


def test_every_read_of_a_winner_trusts_the_stored_summary_alike(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readers trust a by_id value's clear fields (FORMAT.md "by_id"); ``settee
    check`` reports a summary that disagrees with its tree. A review once found
    ``_all_docs`` documents and ``get`` disagreeing on such a store (one followed
    the tree, the other the summary): every read of a winning document now takes
    the same fields, so they agree. ``_changes`` names a revision from by_seq,
    and one the tree lacks is corruption (it was a raw KeyError)."""
    path = str(tmp_path / "db")
    _write_forged(path, monkeypatch)
    problems = list(check_database(path))
    assert any("tomb" in p for p in problems) and any("ghost" in p for p in problems)
    with settee.open(path) as db:
        for doc_id in ("tomb", "ghost"):
            got = db.get(doc_id)
            [row] = db.all_docs(keys=[doc_id], include_docs=True)["rows"]
            [ranged] = db.all_docs(startkey=doc_id, endkey=doc_id, include_docs=True)["rows"]
            assert row["doc"] == ranged["doc"] == got
            assert row["value"]["rev"] == got["_rev"]
        assert db.get("ghost")["_rev"] == "9-" + "f" * 32
        with pytest.raises(settee.CorruptionError):  # was a raw KeyError
            db.changes(include_docs=True)


def test_a_document_changed_while_it_is_written_stores_only_what_was_checked(
    tmp_path: Any,
) -> None:
    """Regression (found by review): a check-only validation that packed the caller's
    objects afterwards stored what another thread put there in between (bytes, NaN).
    Whatever the caller's thread does to its dict, a put stores a valid body or is
    refused with BadRequest."""
    shared = [1]
    stop = threading.Event()

    def pause() -> None:
        """A call: where the interpreter may hand the GIL over, so both values show."""

    def flip() -> None:
        while not stop.is_set():
            shared[0] = b"raw"
            pause()
            shared[0] = 1
            pause()

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # let the flipper run inside that window
    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        with settee.open(str(tmp_path / "db"), shards=2, fsync=False) as db:
            accepted = 0
            for n in range(4000):
                # Checked after "x": a wide window between check and pack. Its length
                # varies so that the two threads cannot fall into a lockstep in which
                # every put sees b"raw" (it happened: 400 refusals out of 400).
                pad = list(range(3000 + n % 97))
                with contextlib.suppress(settee.BadRequest):  # a refusal is a right answer
                    db.put({"_id": f"d{n}", "pad": pad, "x": shared})
                    accepted += 1
                if accepted == 200:
                    break
            stored = [row["doc"]["x"] for row in db.all_docs(include_docs=True)["rows"]]
    finally:
        stop.set()
        flipper.join()
        sys.setswitchinterval(switch)
    assert stored and all(x == [1] for x in stored), (accepted, stored)


# Stored by_id values a broken writer could leave behind: each field of the wrong
# type, and too few or too many fields. The crc holds, so only the reader's own
# checks stand between them and a raw TypeError (found by review: ``get`` raised one
# for a winner body entry that is not an array, while ``_all_docs`` answered
# CorruptionError).
_MALFORMED_VALUES: dict[str, Callable[[tuple[Any, ...]], tuple[Any, ...]]] = {
    "winner body is an int": lambda v: (*v[:5], 7),
    "winner body is bytes": lambda v: (*v[:5], b"\x05\x06"),
    "winner body is a str": lambda v: (*v[:5], "ab"),
    "winner body is one field": lambda v: (*v[:5], (v[5][0],)),
    "revisions are a str": lambda v: (*v[:4], "revs", v[5]),
    "revisions are not msgpack of a tree": lambda v: (*v[:4], b"\xc1", v[5]),
    "winner is an int": lambda v: (v[0], v[1], 12, *v[3:]),
    "five fields": lambda v: v[:5],
    "seven fields": lambda v: (*v, None),
    # A map passes the writer's reduce (it indexes fields 1 and 3), not the readers.
    "a map, not an array": lambda v: {1: v[1], 3: v[3]},
    "attachment records are a str": lambda v: (*v[:5], (v[5][0], v[5][1], "junk")),
    # Found by mutation testing: a range with docs handled these apart from get.
    "winner body has four fields": lambda v: (*v[:5], (*v[5], [], 0)),
    "live winner without a body": lambda v: (*v[:5], None),
    # A float hashes and compares as its int: a body cache keyed by position would
    # answer it, where a read from the file refuses it.
    "winner body position is a float": lambda v: (*v[:5], (float(v[5][0]), *v[5][1:])),
    "winner body size is a str": lambda v: (*v[:5], (v[5][0], str(v[5][1]), *v[5][2:])),
}


def _with_forged_value(path: str, monkeypatch: pytest.MonkeyPatch, forgery: str) -> str:
    """A one-shard database at ``path`` whose document "doc" was stored with the
    by_id value ``forgery`` makes of its honest one, after an honest "before" in
    the same leaf (a range reads both in one batch); ``settee check`` names it."""
    honest = settee.docinfo.DocInfo.to_value
    with settee.open(path, shards=1) as db:
        db.put({"_id": "before", "a": 0})
    with monkeypatch.context() as patched:
        patched.setattr(
            settee.docinfo.DocInfo,
            "to_value",
            lambda self: _MALFORMED_VALUES[forgery](honest(self)),
        )
        with settee.open(path, shards=1) as db:
            db.put({"_id": "doc", "a": 1})
    assert any("'doc'" in p for p in check_database(path)), forgery
    return path


@pytest.mark.parametrize("forgery", sorted(_MALFORMED_VALUES))
def test_every_read_of_a_malformed_stored_value_is_corruption(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, forgery: str
) -> None:
    """``settee check`` reports the value, and a read that needs it answers
    CorruptionError; a read that does not may answer."""
    path = _with_forged_value(str(tmp_path / "db"), monkeypatch, forgery)
    reads: dict[str, Callable[[Any], Any]] = {
        "get": lambda db: db.get("doc"),
        "get with revs and conflicts": lambda db: db.get("doc", revs=True, conflicts=True),
        "multiget with docs": lambda db: db.all_docs(keys=["doc"], include_docs=True),
        "range": lambda db: db.all_docs(),
        "range from a key": lambda db: db.all_docs(startkey="d", descending=True),
        "range with docs": lambda db: db.all_docs(include_docs=True),
        "changes with docs": lambda db: db.changes(include_docs=True),
        "revs_diff": lambda db: db.revs_diff({"doc": ["1-" + "a" * 32]}),
    }
    refused = set()
    answers = {}
    with settee.open(path) as db:
        for name, read in reads.items():
            try:
                answers[name] = read(db)
            except settee.CorruptionError:
                refused.add(name)
            except Exception as exc:  # what this test is about: a raw error
                pytest.fail(f"{name} of a value with {forgery}: {exc!r}")
    # The winner's body entry is read the same way by every read with docs.
    if "get" in refused and ("body" in forgery or "attachment" in forgery):
        assert {"multiget with docs", "range with docs"} <= refused, (forgery, refused)
    # A read that answers answers the honest document rightly, whatever path its
    # neighbour's value sent the read down (found by mutation testing: the general
    # path of a range with docs could swap or empty the rows' documents).
    if "range with docs" in answers:
        [before] = [r["doc"] for r in answers["range with docs"]["rows"] if r["id"] == "before"]
        assert before["_id"] == "before" and before["a"] == 0, (forgery, before)
    # Reads that answer agree on the document (found by mutation testing: with a live
    # winner whose clear body entry was nil, get answered the body through the
    # revision blob and a range with docs an empty document).
    docs = {
        "get": answers.get("get"),
        "multiget with docs": _row_doc(answers.get("multiget with docs")),
        "range with docs": _row_doc(answers.get("range with docs")),
    }
    answered = {name: doc for name, doc in docs.items() if doc is not None}
    assert len({repr(doc) for doc in answered.values()}) <= 1, (forgery, answered)


def _row_doc(answer: dict[str, Any] | None) -> Any:
    """The "doc" of the row of id "doc" in an ``_all_docs`` answer (None if none)."""
    if answer is None:
        return None
    return next((r.get("doc") for r in answer["rows"] if r.get("id") == "doc"), None)


def test_a_body_that_is_not_a_map_is_corruption_for_every_read_with_docs(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored body whose crc holds but which is not a map (a writer bug) is
    CorruptionError for every read that returns it, never a raw error (found by
    mutation testing: a range with docs that did not check the type spread the
    list into the document, a raw TypeError)."""
    path = str(tmp_path / "db")
    honest = settee.shard._Group.write_trees

    def forged(group: Any, batch: Any) -> Any:
        for key in group.bodies:
            group.bodies[key] = settee.spec.format.encode_payload([1, 2])
        return honest(group, batch)

    with monkeypatch.context() as patched:
        patched.setattr(settee.shard._Group, "write_trees", forged)
        with settee.open(path, shards=1) as db:
            db.bulk_docs([{"_id": "doc", "a": 1}, {"_id": "other", "a": 2}])
    with settee.open(path) as db:
        for read in (
            lambda: db.get("doc"),
            lambda: db.all_docs(keys=["doc"], include_docs=True),
            lambda: db.all_docs(include_docs=True),
            lambda: db.all_docs(include_docs=True, descending=True),
            lambda: db.changes(include_docs=True),
        ):
            with pytest.raises(settee.CorruptionError, match="not a map"):
                read()


def _shape_forgeries() -> list[str]:
    """The forgeries of _MALFORMED_VALUES that change a by_id value's shape or types
    (which the by_id tree checks when it reads a leaf), as opposed to what the
    fields say (a revisions blob, attachment records), which reads check."""
    honest = (7, False, "1-" + "a" * 32, 10, b"\x92\x80\x80", (4100, 10))
    assert settee.docinfo.well_formed_value(honest)
    return sorted(
        name
        for name, forge in _MALFORMED_VALUES.items()
        if not settee.docinfo.well_formed_value(forge(honest))
    )


def test_every_winner_body_forgery_is_refused_by_the_leaf_check() -> None:
    """A winner body entry whose shape or field types are wrong is a malformed value
    (FORMAT.md "by_id": ``[int pos, int size(, attachments)]``), refused with its
    whole leaf, never answered from whatever a read makes of it."""
    forged = {name for name in _MALFORMED_VALUES if name.startswith(("winner body", "live winner"))}
    assert forged and forged <= set(_shape_forgeries()), forged - set(_shape_forgeries())


@pytest.mark.parametrize("forgery", _shape_forgeries())
def test_a_leaf_holding_a_malformed_value_is_refused_whole(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, forgery: str
) -> None:
    """FORMAT.md "malformed_by_id_value": the by_id tree checks a leaf's values once,
    when it reads the leaf from the file, and readers index them unchecked after;
    so every read that needs the leaf is CorruptionError, as when its crc fails
    (a read of an honest document in it too), and ``settee check`` names the
    document."""
    path = _with_forged_value(str(tmp_path / "db"), monkeypatch, forgery)
    with settee.open(path) as db:
        for read in (
            lambda: db.get("before"),
            lambda: db.all_docs(keys=["before"]),
            lambda: db.all_docs(),
            lambda: db.all_docs(include_docs=True, descending=True),
        ):
            with pytest.raises(settee.CorruptionError, match="'doc' is malformed"):
                read()


@pytest.mark.parametrize("reduction", [None, "xy", (1,), {0: 1}])
def test_a_malformed_stored_reduction_is_never_a_raw_error(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, reduction: Any
) -> None:
    """Readers trust stored by_id reductions (FORMAT.md "by_id": offsets, leaves
    without tombstones); one of the wrong shape, written by a broken writer, gives a
    right answer or CorruptionError, and ``settee check`` reports it. Found by
    review: a leaf whose reduction was None made ``all_docs()`` a raw TypeError."""
    path = str(tmp_path / "db")
    honest = settee.snapshot._rereduce_by_id
    with monkeypatch.context() as patched:
        # Leaves reduce to the malformed value; inner nodes sum what they can.
        patched.setattr(settee.snapshot, "_reduce_by_id", lambda kvs: reduction)
        patched.setattr(
            settee.snapshot,
            "_rereduce_by_id",
            lambda reds: honest([r for r in reds if isinstance(r, tuple) and len(r) == 3]),
        )
        with settee.open(path, shards=1, node_size=256) as db:
            for n in range(0, 40, 10):
                db.bulk_docs([{"_id": f"d{i:02d}", "x": "y" * 20} for i in range(n, n + 10)])
            db.delete("d05", db.get("d05")["_rev"])
    assert any("reduction" in p for p in check_database(path))
    with settee.open(path) as db:
        for call in (
            lambda: db.all_docs(),
            lambda: db.all_docs(startkey="d10", limit=5),
            lambda: db.all_docs(startkey="d30", descending=True, include_docs=True),
            lambda: db.changes(since=0),
        ):
            try:
                rows = call()
            except settee.CorruptionError:
                continue
            except Exception as exc:  # what this test is about: a raw error
                pytest.fail(f"{reduction!r}: {exc!r}")
            assert "d05" not in [r.get("id") for r in rows.get("rows", [])]


def test_close_finishes_every_write_it_admitted(tmp_path: Any) -> None:
    """close() lets the writer finish what it admitted before the file stops
    answering reads: a close that refused reads first failed the queued commits
    that must read tree nodes from the file (with no node cache, every one) with
    "could not apply", though they were admitted (found by mutation testing; one
    round caught it two times in three, so five rounds run). Every put either
    succeeds, and is there after a reopen, or is refused at the door because the
    database is closed."""
    for round_ in range(5):
        _close_under_writes(str(tmp_path / f"db{round_}"))


def _close_under_writes(path: str) -> None:
    db = settee.open(path, shards=1, fsync=False, cache_bytes=0, body_cache_bytes=0)
    db.bulk_docs([{"_id": f"seed{i:03d}"} for i in range(300)])  # a tree of several levels
    outcomes: list[tuple[str, str]] = []
    started = threading.Barrier(7)

    def writer(k: int) -> None:
        started.wait()
        for i in range(400):
            try:
                db.put({"_id": f"w{k}-{i}"})
                outcomes.append(("ok", f"w{k}-{i}"))
            except settee.SetteeError as exc:
                outcomes.append(("refused", str(exc)))
                return

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.02)
    db.close()
    for t in threads:
        t.join()
    refused = [why for kind, why in outcomes if kind == "refused"]
    assert refused and all(why.startswith("database is closed") for why in refused), refused[:3]
    with settee.open(path) as again:
        stored = {row["id"] for row in again.all_docs()["rows"]}
    assert {i for kind, i in outcomes if kind == "ok"} <= stored


def test_compaction_keeps_one_copy_of_bytes_that_leaves_share(tmp_path: Any) -> None:
    """Two conflicting leaves that keep the same attachment as a stub share one copy
    of its bytes, before compaction and after it (compaction.py's _copied_chunks):
    the compacted file holds the megabyte once, and both leaves still read it."""
    import base64

    data = os.urandom(1 << 20)
    with settee.open(str(tmp_path / "db"), shards=1) as db:
        att = {"content_type": "x/y", "data": base64.b64encode(data).decode()}
        rev1 = db.put({"_id": "a", "_attachments": {"f": att}})["rev"]
        rev2 = db.put({"_id": "a", "_rev": rev1, "_attachments": {"f": {"stub": True}}})["rev"]
        other = "2-" + "f" * 32
        branch = {
            "_id": "a",
            "_rev": other,
            "_revisions": {"start": 2, "ids": ["f" * 32, rev1.split("-")[1]]},
            "_attachments": {"f": {"stub": True, "revpos": 1}},
        }
        assert db.bulk_docs([branch], new_edits=False) == []
        winner = db.get("a", conflicts=True)
        assert {winner["_rev"], *winner["_conflicts"]} == {rev2, other}
        assert db.info()["sizes"]["file"] < 1.5 * len(data)
        db.compact()
        assert db.info()["sizes"]["file"] < 1.5 * len(data)
        for rev in (rev2, other):
            assert db.attachment("a", "f", rev=rev)["data"] == data


def test_an_attachment_counts_towards_active_by_its_length_per_leaf(tmp_path: Any) -> None:
    """SEMANTICS.md §18: while a leaf holds an attachment, its length counts towards
    sizes.active, once per leaf; when no leaf holds it, it no longer counts. sizes
    are settee's own (§11: never compared with the reference), so the semantic suite
    cannot pin this (found by mutation testing: a stored_size without the
    attachments passed every test)."""
    import base64

    att = {"content_type": "text/plain", "data": base64.b64encode(b"z" * 100_000).decode()}
    with settee.open(str(tmp_path / "db"), fsync=False) as db:
        first = db.put({"_id": "a"})["rev"]
        bare = db.info()["sizes"]["active"]
        db.put({"_id": "a", "_rev": first, "_attachments": {"x": att}})
        assert 100_000 <= db.info()["sizes"]["active"] - bare < 100_100
        # A second leaf holding it: a sibling replicated onto the first revision.
        path = {"start": 2, "ids": ["f" * 32, first[2:]]}
        db.bulk_docs([{"_id": "a", "_revisions": path, "_attachments": {"x": att}}], False)
        assert 200_000 <= db.info()["sizes"]["active"] - bare < 200_200
        db.delete("a", "2-" + "f" * 32)
        db.put({"_id": "a", "_rev": db.get("a")["_rev"]})
        assert db.info()["sizes"]["active"] < bare + 100


def test_strict_mode_accepts_a_group_whose_newest_write_a_purge_removed(tmp_path: Any) -> None:
    """One group commit: put a, put b, purge b whole. The header keeps b's seq (every
    commit's seq moves on), which no document left carries; strict mode took that
    for damage, failed the commit and refused every later write to the shard."""
    rev_b = reference.open(None).put({"_id": "b"})["rev"]
    with _open(tmp_path / "db", shards=1, strict=True) as db:
        shard = db.shards[0]
        *puts, purge = _while_the_writer_is_paused(
            db,
            lambda: [
                *(
                    shard.submit([validate_doc({"_id": i}, new_edits=True)], new_edits=True)
                    for i in "ab"
                ),
                shard.submit_purge({"b": [rev_b]}),
            ],
        )
        assert [f.result(10)[0] for f in puts][1] == rev_b
        assert purge.result(10) == {"b": [rev_b]}
        assert [r["id"] for r in db.all_docs()["rows"]] == ["a"]
        assert db.put({"_id": "c"})["ok"]
    assert list(check_database(str(tmp_path / "db"))) == []


_REPLICATED_REV = st.tuples(st.integers(1, 7), st.sampled_from("0123456789ab"))


@st.composite
def _replicated_docs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Paths a replicator sends (newest first, positions one apart), several per
    document in one call: conflicting branches, shared ancestors, and older
    history that rejoins stemmed roots."""
    docs = []
    for _ in range(draw(st.integers(1, 30))):
        top, _h = draw(_REPLICATED_REV)
        length = draw(st.integers(1, top))
        ids = [draw(st.sampled_from("ab")) * 32 for _ in range(length)]
        doc: dict[str, Any] = {"_id": draw(st.sampled_from(["x", "y"])), "n": len(docs)}
        doc["_revisions"] = {"start": top, "ids": ids}
        doc["_rev"] = f"{top}-{ids[0]}"
        doc["_deleted"] = draw(st.booleans())
        docs.append(doc)
    return docs


@settings(max_examples=60, deadline=None)
@given(_replicated_docs(), st.integers(1, 5), st.integers(1, 3))
def test_a_replicated_call_edits_each_tree_in_place_as_the_reference_edits_it(
    tmp_path_factory: pytest.TempPathFactory, docs: list[dict[str, Any]], limit: int, calls: int
) -> None:
    """The writer merges a new_edits=False call's paths for one document into one
    private tree (docinfo.Working), stemming only when the tree grows taller than
    revs_limit; every answer and every document's state must be the reference's,
    whether the paths come in one call or several."""
    from crash_tests.checker import doc_views

    path = tmp_path_factory.mktemp("replicated")
    engine = settee.open(str(path / "e"), shards=1, revs_limit=limit, fsync=False)
    model = reference.open(None, revs_limit=limit)
    try:
        size = -(-len(docs) // calls)
        for start in range(0, len(docs), size):
            part = docs[start : start + size]
            assert engine.bulk_docs(part, new_edits=False) == model.bulk_docs(part, new_edits=False)
        assert doc_views(engine, ["x", "y"]) == doc_views(model, ["x", "y"])
        assert _change_rows(engine) == _change_rows(model)  # seqs are opaque tokens
    finally:
        engine.close()
        model.close()


def _change_rows(db: Any) -> list[tuple[Any, ...]]:
    return [(r["id"], r["changes"], r.get("deleted")) for r in db.changes()["results"]]
