"""Readers see durable commits only: a commit under way is invisible until its header fsync.

A reader is served the published snapshot, and the writer publishes only after
the header fsync returns, so whatever a read returns survives any crash (the
crash checker holds every recorded workload to that, ``checker.Oracle``). Here
the writer is stopped inside each fsync of a commit in turn while another
thread reads, and one fsync fails outright.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from typing import Any

import pytest

import settee
from crash_tests.test_io_errors import FailingFileSystem
from settee.io import FileSystemWrapper, MemoryFileSystem

Factory = Callable[..., Any]

IDS = ("a", "b", "c")
#: The fsyncs of one commit, in order: its data, then its header.
FSYNCS = ("data", "header")
WAIT = 10.0


class BlockingFsync(FileSystemWrapper):
    """Holds the ``nth`` shard-file fsync after ``arm`` until ``release`` is set."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.nth: int | None = None
        self.count = 0
        self.blocked = threading.Event()
        self.release = threading.Event()

    def arm(self, nth: int) -> None:
        self.nth, self.count = nth, 0

    def intercept(self, op: str, path: str, call: Callable[[], Any]) -> Any:
        if op == "fsync" and path.endswith(".settee") and self.nth is not None:
            n, self.count = self.count, self.count + 1
            if n == self.nth:
                self.blocked.set()
                assert self.release.wait(WAIT), "test deadlock: the fsync was never released"
        return call()


def visible_state(db: Any) -> dict[str, Any]:
    """Everything a reader can see of the test documents: get (with revs and conflicts),
    all_docs with bodies, changes and the counts of info.

    ``info()["sizes"]["file"]`` is left out: it is the file's length, which grows with
    bytes of a commit under way by design, not a property of any commit.
    """
    docs: dict[str, Any] = {}
    for doc_id in IDS:
        try:
            docs[doc_id] = db.get(doc_id, revs=True, conflicts=True)
        except settee.NotFound as exc:
            docs[doc_id] = ["not_found", exc.reason]
    info = db.info()
    return {
        "docs": docs,
        "all_docs": db.all_docs(include_docs=True),
        "changes": db.changes(),
        "info": [info["doc_count"], info["doc_del_count"], info["update_seq"]],
        "active": info["sizes"]["active"],
    }


def _seed(db: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Write a and c; return the state readers see and the next call's documents
    (update a, create b, delete c: one commit)."""
    a = db.put({"_id": "a", "n": 1})["rev"]
    c = db.put({"_id": "c", "n": 1})["rev"]
    edits = [
        {"_id": "a", "_rev": a, "n": 2},
        {"_id": "b", "n": 1},
        {"_id": "c", "_rev": c, "_deleted": True},
    ]
    return visible_state(db), edits


def _committed(state: dict[str, Any], results: list[dict[str, Any]]) -> bool:
    """Whether ``state`` shows every edit of the call that answered ``results``."""
    revs = {r["id"]: r["rev"] for r in results}
    docs = state["docs"]
    return (
        docs["a"].get("_rev") == revs["a"]
        and docs["b"].get("_rev") == revs["b"]
        and docs["c"] == ["not_found", "deleted"]
    )


def check_reads_while_fsync_blocked(fsync: str, factory: Factory) -> None:
    """Stop the writer in the commit's ``fsync`` ("data" or "header"); reads on this thread
    must show the previous commit until the write is acknowledged, and the new one after."""
    fs = BlockingFsync(MemoryFileSystem())
    db = factory("/db", fs=fs, shards=1)
    try:
        before, edits = _seed(db)
        fs.arm(FSYNCS.index(fsync))
        answers: list[Any] = []
        writer = threading.Thread(target=lambda: answers.append(db.bulk_docs(edits)))
        writer.start()
        assert fs.blocked.wait(WAIT), f"the commit never reached its {fsync} fsync"
        during = visible_state(db)
        fs.release.set()
        writer.join(WAIT)
        assert answers, "the write was not acknowledged after its fsync completed"
        assert during == before, f"a reader saw the commit while its {fsync} fsync was under way"
        assert _committed(visible_state(db), answers[0]), "the acknowledged write is not readable"
    finally:
        fs.release.set()
        db.close()


def check_reads_after_failed_fsync(fsync: str, factory: Factory) -> None:
    """Fail the commit's ``fsync`` with EIO: the caller hears a SetteeError, reads keep
    showing the previous commit, later writes are refused, and reopening recovers."""
    inner = MemoryFileSystem()
    fs = FailingFileSystem(inner, fail_at=10**9, code=errno.EIO, persistent=False, only=("fsync",))
    db = factory("/db", fs=fs, shards=1)
    try:
        before, edits = _seed(db)
        fs.fail_at = fs.count + FSYNCS.index(fsync)
        with pytest.raises(settee.SetteeError, match="write failed"):
            db.bulk_docs(edits)
        assert visible_state(db) == before, f"reads show a write whose {fsync} fsync failed"
        with pytest.raises(settee.SetteeError, match="reopen"):
            db.put({"_id": "refused"})
        assert visible_state(db) == before, "reads changed after a refused write"
    finally:
        db.close()
    # The failed write never reached a caller: after reopening it is wholly there or not at all.
    with factory("/db", fs=inner) as again:
        docs = visible_state(again)["docs"]
        if docs["b"] == ["not_found", "missing"]:
            assert docs == before["docs"], docs
        else:
            assert docs["a"]["n"] == 2 and docs["c"] == ["not_found", "deleted"], docs
        assert again.put({"_id": "healed"})["ok"]


@pytest.mark.parametrize("fsync", FSYNCS)
def test_readers_never_see_a_commit_before_its_header_fsync(
    fsync: str, crash_factory: Factory
) -> None:
    check_reads_while_fsync_blocked(fsync, crash_factory)


def test_failed_header_fsync_leaves_reads_at_the_previous_commit(crash_factory: Factory) -> None:
    check_reads_after_failed_fsync("header", crash_factory)


def test_failed_data_fsync_leaves_reads_at_the_previous_commit(crash_factory: Factory) -> None:
    check_reads_after_failed_fsync("data", crash_factory)
