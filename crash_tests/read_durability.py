"""Readers see durable commits only: the checks, for any engine factory taking ``fs=``.

A reader is served the published snapshot, and the writer publishes only after
the header fsync returns, so whatever a read returns survives any crash (the
crash checker holds every recorded workload to that, ``checker.Oracle``).
``check_reads_while_fsync_blocked`` stops the writer inside each fsync of a commit
in turn while this thread reads; ``check_reads_after_failed_fsync`` fails one
outright. ``test_read_durability.py`` runs them on the engine under test and
``test_mutants.py`` on a mutant that publishes early.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from typing import Any

import settee
from settee.io import MemoryFileSystem
from settee.proof.crash.faults import WAIT, BlockingFsync, FailingFileSystem

__all__ = [
    "FSYNCS",
    "check_reads_after_failed_fsync",
    "check_reads_while_fsync_blocked",
    "visible_state",
]

Factory = Callable[..., Any]

IDS = ("a", "b", "c")
#: The fsyncs of one commit, in order: its data, then its header.
FSYNCS = ("data", "header")


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


def _refused(call: Callable[[], Any], says: str) -> None:
    """``call()`` raises a SetteeError whose message contains ``says``."""
    try:
        answer = call()
    except settee.SetteeError as exc:
        assert says in str(exc), f"refused, but the message lacks {says!r}: {exc}"
    else:
        raise AssertionError(f"expected a SetteeError saying {says!r}, got {answer!r}")


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
        _refused(lambda: db.bulk_docs(edits), "write failed")
        assert visible_state(db) == before, f"reads show a write whose {fsync} fsync failed"
        _refused(lambda: db.put({"_id": "refused"}), "reopen")
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
