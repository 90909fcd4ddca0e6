"""Large documents against the disk's own speed, and reopen time.

* Large documents: ``put`` and ``get`` of 1, 10, 40 MB documents (one string
  field of random base64 text) in MB/s, paired with raw ``os.write`` +
  ``os.fsync`` and ``os.pread`` of the same bytes in a file beside
  the database: the physical limit. Reads on both sides come from the page
  cache (the bytes were just written), so the get pair measures settee's
  overhead over a memory copy, not the device.
* Reopen: a database of ``Config.reopen_docs`` documents (built by the scaling
  group) is closed and reopened (open, then the first random ``get``),
  alternating with reopening a sqlite3 file holding the same rows.
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import sqlite3
import time
from typing import Any

import settee
from bench.harness import Outcome, Side, run_for
from bench.stores import SqliteStore, doc_id, make_doc
from bench.suite import Config, Run, Target

__all__ = ["large_ticks", "reopen_pair", "run_large"]


def large_ticks(cfg: Config) -> int:
    return len(cfg.large_mb) * 2 * 2 * cfg.repeats


# -- large documents ----------------------------------------------------------------------------


def run_large(run: Run) -> None:
    cfg = run.config
    run.progress.stage("large documents vs raw os.write/os.pread")
    db_path = run.path("large-settee")
    raw_path = run.path("large-raw.bin")
    db = settee.open(db_path, shards=1, fsync=True)
    fd = os.open(raw_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for mb in cfg.large_mb:
            _large_pairs(run, db, fd, mb)
    finally:
        db.close()
        os.close(fd)
        shutil.rmtree(db_path, ignore_errors=True)
        os.remove(raw_path)


def _large_pairs(run: Run, db: Any, fd: int, mb: float) -> None:
    size = int(mb * 1_000_000)
    # Documents are JSON values, so the body is a str: random bytes in base64.
    text = base64.b64encode(os.urandom(size * 3 // 4 + 3)).decode()[:size]
    payload = text.encode()
    seconds = run.config.seconds
    counter = iter(range(1 << 30))
    state: dict[str, Any] = {}

    def settee_put() -> int:
        doc_id_ = f"big-{mb}-{next(counter)}"
        db.put({"_id": doc_id_, "blob": text})
        state["id"] = doc_id_
        return size

    def raw_write() -> int:
        offset = os.lseek(fd, 0, os.SEEK_END)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        state["offset"] = offset
        return size

    def settee_get() -> int:
        return len(db.get(state["id"])["blob"])

    def raw_read() -> int:
        return len(os.pread(fd, size, state["offset"]))

    label = f"{mb:g} MB"
    params = {"mb": mb, "bytes": size}
    run.pair(
        f"large.put.{mb:g}MB",
        group="large",
        title=f"put of a {label} document (fsync on)",
        unit="MB/s",
        a=Side("settee put", lambda: Outcome(run_for(settee_put, seconds) / 1e6)),
        b=Side("os.write+fsync", lambda: Outcome(run_for(raw_write, seconds) / 1e6)),
        meaning="settee ÷ raw write MB/s: the fraction of the disk's write speed settee reaches",
        params=params,
    )
    run.pair(
        f"large.get.{mb:g}MB",
        group="large",
        title=f"get of a {label} document",
        unit="MB/s",
        a=Side("settee get", lambda: Outcome(run_for(settee_get, seconds) / 1e6)),
        b=Side("os.pread", lambda: Outcome(run_for(raw_read, seconds) / 1e6)),
        meaning="settee ÷ raw pread MB/s: the fraction of a bare pread's speed settee reaches",
        params=params,
    )


# -- reopen ---------------------------------------------------------------------------------------


def reopen_pair(run: Run, path: str, docs: int) -> Any:
    """Alternate reopening settee and a sqlite3 file of the same rows; leave settee open."""
    run.progress.stage(f"reopen of a {docs:,}-document database vs sqlite3")
    sq_dir = run.path("reopen-sqlite3")
    os.makedirs(sq_dir)
    sq_path = os.path.join(sq_dir, "docs.sqlite3")
    store = SqliteStore(sq_path)
    for lo in range(0, docs, 10_000):
        store.insert([make_doc(doc_id(n), n) for n in range(lo, min(docs, lo + 10_000))])
    store.close()
    rng = random.Random(docs)

    def settee_open() -> Outcome:
        t0 = time.perf_counter()
        db = settee.open(path)
        opened = time.perf_counter() - t0
        db.get(doc_id(rng.randrange(docs)))
        first = time.perf_counter() - t0
        db.close()
        return Outcome(opened, extra={"open_and_first_get_s": first})

    def sqlite_open() -> Outcome:
        t0 = time.perf_counter()
        conn = sqlite3.connect(sq_path)
        conn.execute("PRAGMA journal_mode=WAL")
        opened = time.perf_counter() - t0
        conn.execute("SELECT body FROM docs WHERE id = ?", (doc_id(rng.randrange(docs)),))
        first = time.perf_counter() - t0
        conn.close()
        return Outcome(opened, extra={"open_and_first_get_s": first})

    run.pair(
        "reopen",
        group="reopen",
        title=f"reopen of a {docs:,}-document database",
        unit="s",
        higher_is_better=False,
        a=Side("settee", settee_open),
        b=Side("sqlite3", sqlite_open),
        meaning="settee ÷ sqlite3 open time: below 1 means settee opens faster",
        params={"docs": docs, "shards": 4},
        target=Target("a_below", 1.0, "engine issue: open in under 1 s"),
    )
    shutil.rmtree(sq_dir, ignore_errors=True)
    return settee.open(path)


def _one(_: object) -> int:
    return 1
