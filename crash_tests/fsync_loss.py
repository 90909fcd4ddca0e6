"""A failed fsync must not be acknowledged: the "fsyncgate" check.

Linux answers an fsync that could not write the file's dirty pages back with EIO
and marks those pages clean: they are never written again, yet reads still see
them, and the next fsync succeeds (PostgreSQL lost data this way until 2018). An
engine that retries the fsync, or ignores its error, acknowledges a commit the
disk does not hold. settee fails the write and refuses the shard's later writes
until it is reopened (SEMANTICS.md §1).

``check_fsync_failures`` runs a small workload once per file fsync it asks for,
with that fsync failing (``SimFS(fail_fsync_at=K)``), then crashes the disk and
reopens it with the engine: every revision a call acknowledged must still be
there. The workload's calls may fail (they must fail cleanly, with a
``SetteeError``); the reopened database must open and answer.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import settee
from settee.proof.crash.simfs import SimFS

__all__ = ["check_fsync_failures", "fsync_count"]

EngineFactory = Callable[..., Any]

PATH = "/db"
SHARDS = 2


def _workload(db: Any) -> dict[str, str]:
    """Writes on both shards, a compaction among them; ``{doc id: rev}`` of every
    revision a call acknowledged (a failed call acknowledges nothing)."""
    acked: dict[str, str] = {}
    calls: list[Callable[[], Any]] = [
        lambda: db.put({"_id": "a", "n": 1}),
        lambda: db.bulk_docs([{"_id": f"b{i}", "n": i} for i in range(4)]),
        lambda: db.put({"_id": "a", "_rev": acked["a"], "n": 2}),
        lambda: db.delete("b1", acked["b1"]),
        db.compact,
        lambda: db.put({"_id": "c", "n": 3}),
    ]
    for call in calls:
        try:
            answer = call()
        except (settee.SetteeError, KeyError):
            continue  # refused (KeyError: the rev it needed was never acknowledged)
        for item in answer if isinstance(answer, list) else [answer]:
            if isinstance(item, dict) and item.get("ok"):
                acked[item["id"]] = item["rev"]
    return acked


def fsync_count(factory: EngineFactory) -> int:
    """File fsyncs the workload asks for when none fails."""
    fs = SimFS()
    db = factory(PATH, fs=fs, shards=SHARDS)
    _workload(db)
    db.close()
    return fs.fsyncs


def check_fsync_failures(factory: EngineFactory) -> list[str]:
    """Problems found with each file fsync of the workload failing in turn: an
    acknowledged revision a crash lost, a database that no longer opens, a raw error."""
    problems: list[str] = []
    with warnings.catch_warnings():
        # Reopening after the crash finds the lost commit's bytes as a torn tail.
        warnings.simplefilter("ignore", UserWarning)
        for k in range(fsync_count(factory)):
            problems.extend(f"fsync #{k} failing: {p}" for p in _check_one(factory, k))
    return problems


def _check_one(factory: EngineFactory, k: int) -> list[str]:
    fs = SimFS(fail_fsync_at=k)
    try:
        db = factory(PATH, fs=fs, shards=SHARDS)
    except settee.SetteeError:
        return []  # creating the database failed cleanly: nothing was acknowledged
    acked = _workload(db)
    with contextlib.suppress(settee.SetteeError):  # a refusing shard may say so again
        db.close()
    crashed = fs.crash("drop")
    try:
        reopened = factory(PATH, fs=crashed, shards=SHARDS)
    except settee.SetteeError as exc:  # its creation returned: it must open again
        return [f"the database no longer opens after a crash: {exc!r}"]
    try:
        missing = reopened.revs_diff({doc_id: [rev] for doc_id, rev in acked.items()})
        reopened.all_docs(include_docs=True)  # every current document reads back
    except settee.SetteeError as exc:  # damage where acknowledged data should be
        return [f"reading what was acknowledged after a crash raised {exc!r}"]
    finally:
        reopened.close()
    return [
        f"{doc_id} {rev} was acknowledged, and a crash lost it"
        for doc_id, entry in sorted(missing.items())
        for rev in entry["missing"]
    ]
