"""I/O errors, SQLite's and RocksDB's way: make io step N fail, for every N.

For every io step of a small workload, the step fails with EIO, ENOSPC or EACCES
(``OSError`` makes that a ``PermissionError``: a file or folder whose permissions
changed under a running database, which a test running as root cannot make with
``chmod``), either once or from then on. Then:

* every failing call raises a ``SetteeError`` (never a raw ``OSError``);
* after a failed write or fsync the shard refuses further writes until the
  database is reopened (the page cache cannot be trusted after an fsync
  error), and nothing after the failure is acknowledged;
* reopening on the healthy disk gives a database that ``settee check``
  passes, holding every acknowledged write, with each unacknowledged write
  wholly present or wholly absent.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import settee
from settee.check import check_database
from settee.io import MemoryFileSystem
from settee.proof.crash.faults import FailingFileSystem
from settee.spec.routing import shard_of


def _workload(db: Any) -> list[tuple[str, Any]]:
    """Sequential calls on two shards; returns (what, outcome) per call, where the
    outcome is the result or the exception raised."""
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("put a", lambda: db.put({"_id": "a", "n": 1})),
        ("bulk", lambda: db.bulk_docs([{"_id": f"b{i}", "n": i} for i in range(6)])),
        ("get a", lambda: db.get("a")),
        ("update a", lambda: db.put({"_id": "a", "_rev": db.get("a")["_rev"], "n": 2})),
        ("delete b1", lambda: db.delete("b1", db.get("b1")["_rev"])),
        ("compact", db.compact),
        ("put c", lambda: db.put({"_id": "c", "n": 3})),
        ("all_docs", lambda: db.all_docs(include_docs=True)),
    ]
    outcomes = []
    for what, call in calls:
        try:
            outcomes.append((what, call()))
        except BaseException as exc:
            outcomes.append((what, exc))
    return outcomes


def _failable_steps() -> int:
    fs = FailingFileSystem(MemoryFileSystem(), fail_at=-1, code=errno.EIO, persistent=False)
    db = settee.Database("/db", fs=fs, shards=2)
    _workload(db)
    db.close()
    return fs.count


def _acknowledged(outcomes: list[tuple[str, Any]]) -> dict[str, str]:
    """doc id -> last acknowledged rev (deletes included)."""
    acked: dict[str, str] = {}
    for _what, result in outcomes:
        results = result if isinstance(result, list) else [result]
        for item in results:
            if isinstance(item, dict) and item.get("ok"):
                acked[item["id"]] = item["rev"]
    return acked


def _check_run(fail_at: int, code: int, persistent: bool) -> list[str]:
    inner = MemoryFileSystem()
    fs = FailingFileSystem(inner, fail_at, code, persistent)
    problems: list[str] = []
    try:
        db = settee.Database("/db", fs=fs, shards=2)
    except settee.SetteeError:
        db = None  # opening failed cleanly: nothing was acknowledged
    except BaseException as exc:
        return [f"open raised {exc!r}, not a SetteeError"]
    outcomes = _workload(db) if db is not None else []
    for what, result in outcomes:
        if isinstance(result, BaseException) and not isinstance(result, settee.SetteeError):
            problems.append(f"{what} raised {result!r}, not a SetteeError")
    problems += _refusals_after_write_failure(outcomes)
    if db is not None:
        try:
            db.close()
        except BaseException as exc:
            problems.append(f"close raised {exc!r}")
    return problems + _recovered(inner, _acknowledged(outcomes))


def _refusals_after_write_failure(outcomes: list[tuple[str, Any]]) -> list[str]:
    """Once a shard's write failed, no later write to that shard is acknowledged."""
    problems = []
    failed: set[int] = set()
    for what, result in outcomes:
        if isinstance(result, settee.SetteeError) and "write failed" in str(result):
            failed |= {i for i in range(2) if f"shard-{i:03d}" in str(result)}
        for item in result if isinstance(result, list) else [result]:
            if isinstance(item, dict) and item.get("ok") and shard_of(item["id"], 2) in failed:
                problems.append(f"{what}: {item} acknowledged after its shard's write failed")
    return problems


def _recovered(inner: MemoryFileSystem, acked: dict[str, str]) -> list[str]:
    if not inner.exists("/db/settee.meta"):
        return [] if not acked else [f"acknowledged {sorted(acked)} but no database exists"]
    problems = list(check_database("/db", inner))
    db = settee.Database("/db", fs=inner)
    try:
        for doc_id, rev in acked.items():
            try:
                doc = db.get(doc_id, rev=rev)
            except settee.NotFound:
                problems.append(f"acknowledged {doc_id} {rev} is missing after reopen")
                continue
            if doc["_rev"] != rev:
                problems.append(f"{doc_id}: read {doc['_rev']}, acknowledged {rev}")
        assert db.put({"_id": "after-reopen"})["ok"]
    finally:
        db.close()
    return problems


STEPS = _failable_steps()


@pytest.mark.parametrize("persistent", [False, True], ids=["once", "persistent"])
@pytest.mark.parametrize(
    "code", [errno.EIO, errno.ENOSPC, errno.EACCES], ids=["EIO", "ENOSPC", "EACCES"]
)
def test_every_io_step_failing(code: int, persistent: bool, record_property: Any) -> None:
    assert STEPS > 30, STEPS
    failures = {}
    for fail_at in range(STEPS):
        problems = _check_run(fail_at, code, persistent)
        if problems:
            failures[fail_at] = problems
    record_property("io_error_runs", STEPS)
    assert not failures, dict(list(failures.items())[:5])


def _one_doc_then_failing_fsyncs() -> tuple[MemoryFileSystem, FailingFileSystem, Any]:
    """A one-shard database holding "before", reopened on a file system whose fsyncs
    fail from ``fs.fail_at`` on (never, until the test sets it)."""
    inner = MemoryFileSystem()
    db = settee.Database("/db", fs=inner, shards=1)
    db.put({"_id": "before"})
    db.close()
    fs = FailingFileSystem(inner, fail_at=10**9, code=errno.EIO, persistent=False, only=("fsync",))
    return inner, fs, settee.Database("/db", fs=fs, shards=1)


def test_failed_fsync_refuses_later_writes_until_reopen() -> None:
    """After an fsync error nothing more is committed on that shard; reopening heals."""
    inner, fs, db = _one_doc_then_failing_fsyncs()
    fs.fail_at = fs.count  # the next fsync: the one after the data append
    with pytest.raises(settee.SetteeError, match="write failed"):
        db.put({"_id": "lost"})
    with pytest.raises(settee.SetteeError, match="reopen"):
        db.put({"_id": "refused"})
    assert db.get("before")["_id"] == "before"  # reads still work
    db.close()
    with settee.Database("/db", fs=inner) as again:
        assert again.put({"_id": "healed"})["ok"]
        assert "refused" not in {r["id"] for r in again.all_docs()["rows"]}
    assert list(check_database("/db", inner)) == []


def test_a_write_queued_behind_a_failed_fsync_is_refused_not_committed() -> None:
    """A write already in the writer's queue when a commit's fsync fails is refused
    too: the shard commits nothing after an fsync error (the page cache cannot be
    trusted), not only nothing admitted after it. A writer that checked the failure
    only on admission committed and acknowledged the queued write (mutant of
    Shard._commit_writes; the sequential workload above never queues one)."""
    inner, fs, db = _one_doc_then_failing_fsyncs()
    shard = db.shards[0]
    outcome: list[Any] = []

    def queued_put() -> None:
        try:
            outcome.append(db.put({"_id": "queued"}))
        except BaseException as exc:
            outcome.append(exc)

    second = threading.Thread(target=queued_put)

    def hook(step: str) -> None:
        # On the writer, about to fsync the first write's data: queue a second write.
        if step == "before_data_fsync" and threading.current_thread() is shard._writer:
            shard.step_hook = None
            second.start()
            deadline = time.monotonic() + 10
            while shard._queue._items.empty():
                assert time.monotonic() < deadline, "the second write never reached the queue"
                time.sleep(0.001)

    shard.step_hook = hook
    fs.fail_at = fs.count  # the next fsync: the first write's data fsync
    with pytest.raises(settee.SetteeError, match="write failed"):
        db.put({"_id": "lost"})
    second.join(10)
    assert len(outcome) == 1, outcome
    assert isinstance(outcome[0], settee.SetteeError), outcome[0]
    assert "reopen" in str(outcome[0])
    db.close()
    with settee.Database("/db", fs=inner) as again:
        assert "queued" not in {r["id"] for r in again.all_docs()["rows"]}


def test_a_failed_early_append_of_a_large_commit_refuses_later_writes() -> None:
    """A commit of megabytes appends its batch early, while the writer still builds it
    (file.SPILL_BYTES). An OSError there leaves the file's end unknown, like any failed
    write: the commit fails and the shard refuses later writes until reopened, rather
    than retrying the request alone as a failure with nothing written. Mutant: a
    Shard._commit that let the OSError count as nothing written passed (the sequential
    workload above never commits a megabyte)."""
    inner = MemoryFileSystem()
    fs = FailingFileSystem(inner, fail_at=10**9, code=errno.EIO, persistent=False, only=("append",))
    db = settee.Database("/db", fs=fs, shards=1)
    db.put({"_id": "before"})
    fs.fail_at = fs.count  # the next append: the early one of the large commit
    big = {"content_type": "x/y", "data": bytes(3 * 2**20)}
    with pytest.raises(settee.SetteeError, match="write failed"):
        db.put({"_id": "large", "_attachments": {"f": big}})
    with pytest.raises(settee.SetteeError, match="reopen"):
        db.put({"_id": "after"})
    db.close()
    assert list(check_database("/db", inner)) == []
    with settee.Database("/db", fs=inner) as again:
        assert [r["id"] for r in again.all_docs()["rows"]] == ["before"]
