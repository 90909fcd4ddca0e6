"""Parallel preads vs serialised file access: CouchDB 3.5's benchmarks, on settee.

Side A opens the database with ``read_mode="parallel"`` (lock-free ``pread``
on published snapshots), side B with ``read_mode="serialized"`` (one lock per
shard around every file operation, held by the writer for a whole commit, as
CouchDB's ``couch_file`` process before 3.5). Both are byte-identical copies
of one preloaded single-shard database (CouchDB measured the batched-writes
case on a single-shard database too), open at the same time and measured
alternately.

The scenarios run twice: on the OS file system and on ``LatencyFileSystem``
(slow block storage).
"""

from __future__ import annotations

import itertools
import random
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

import settee
from bench.harness import Outcome, Side, run_clients, run_for
from bench.latencyfs import LatencyFileSystem
from bench.stores import doc_id, load_settee, make_doc
from bench.suite import Config, Run, Target

__all__ = ["count_pairs", "run_readmode"]

# Rows per turn of the warm-up (``_Pair._warm_up``).
_WARM_STEP = 200
_MEANING = "parallel ÷ serialized {unit}: above 1 means parallel preads are faster"
_COUCH_SEQ = {
    "get": "CouchDB PR #5399: random doc reads 4,900→5,800/s (+18%)",
    "all_docs": "CouchDB PR #5399: _all_docs 120k→140k/s (+17%)",
    "all_docs_docs": "CouchDB PR #5399: _all_docs include_docs 24k→31k/s (+29%)",
    "changes": "CouchDB PR #5399: _changes 49k→51k/s (+4%)",
    "put": "CouchDB PR #5399: single doc writes 380→410/s (+8%)",
}
_SEQ_TITLES = {
    "get": ("random doc reads, 1 client", "reads/s"),
    "all_docs": ("all_docs (every row), 1 client", "rows/s"),
    "all_docs_docs": ("all_docs include_docs, 1 client", "rows/s"),
    "changes": ("changes since 0, 1 client", "rows/s"),
    "put": ("single-doc writes (fsync on), 1 client", "writes/s"),
}


def count_pairs(cfg: Config) -> int:
    normal = len(_SEQ_TITLES) + len(cfg.read_clients) + 2 * len(cfg.mixed_readers)
    latency = 1 + len(cfg.latency_clients) + 2 * len(cfg.mixed_readers)
    return normal + latency


def run_readmode(run: Run) -> None:
    cfg = run.config
    template = run.path("readmode-template")
    with settee.open(template, shards=1, fsync=False) as db:
        load_settee(db, 0, cfg.docs)
    run.progress.stage("parallel vs serialized: sequential, concurrent, batched writes")
    with _Pair(run, template, "os", latency=False) as pair:
        for op in _SEQ_TITLES:
            pair.sequential(op)
        for clients in cfg.read_clients:
            pair.concurrent_reads(clients)
        for readers in cfg.mixed_readers:
            pair.mixed(readers, paced=False)
            pair.mixed(readers, paced=True)
    run.progress.stage("parallel vs serialized on the latency file system")
    with _Pair(run, template, "latency", latency=True) as pair:
        pair.sequential("get")
        for clients in cfg.latency_clients:
            pair.concurrent_reads(clients)
        for readers in cfg.mixed_readers:
            pair.mixed(readers, paced=False)
            pair.mixed(readers, paced=True)
    shutil.rmtree(template, ignore_errors=True)


class _Pair:
    """Two open copies of the template: ``a`` parallel, ``b`` serialized."""

    def __init__(self, run: Run, template: str, fs_name: str, *, latency: bool) -> None:
        self.run = run
        self.cfg = run.config
        self.fs_name = fs_name
        self.fss: dict[str, LatencyFileSystem] = {}
        self.dbs: dict[str, Any] = {}
        self._ids = itertools.count()
        for mode in ("parallel", "serialized"):
            path = run.path(f"readmode-{fs_name}-{mode}")
            shutil.copytree(template, path)
            # No body cache on either side: the pair compares how reads reach the file,
            # and a cached body does not reach it (both sides keep their node caches).
            options: dict[str, Any] = {
                "shards": 1,
                "fsync": True,
                "read_mode": mode,
                "body_cache_bytes": 0,
            }
            if latency:
                fs = LatencyFileSystem(
                    fsync_ms=self.cfg.latency_fsync_ms, read_ms=self.cfg.latency_read_ms
                )
                self.fss[mode] = fs
                options["fs"] = fs
            self.dbs[mode] = settee.Database(path, **options)
        self._warm_up()

    def __enter__(self) -> _Pair:
        return self

    def __exit__(self, *exc: object) -> None:
        for db in self.dbs.values():
            db.close()
        for mode in self.dbs:
            shutil.rmtree(self.run.path(f"readmode-{self.fs_name}-{mode}"), ignore_errors=True)

    def _warm_up(self) -> None:
        # One full pass pulls the files into the page cache and the node caches
        # of both sides alike, so neither pays the first-touch cost in a sample.
        # The sides take turns every _WARM_STEP rows, so their cached nodes are
        # decoded, and so allocated, side by side rather than one side's after the
        # other's whole: where the nodes lie in memory likely moved the all_docs
        # pair (bench/README.md, "How a number is made").
        dbs = list(self.dbs.values())
        for lo in range(0, self.cfg.docs, _WARM_STEP):
            for db in dbs:
                db.all_docs(startkey=doc_id(lo), limit=_WARM_STEP, include_docs=True)
        since: list[Any] = [0] * len(dbs)
        while True:
            pages = [
                db.changes(since=s, limit=_WARM_STEP) for db, s in zip(dbs, since, strict=True)
            ]
            if not any(page["results"] for page in pages):
                break
            since = [page["last_seq"] for page in pages]

    def _id(self) -> str:
        return f"w-{self.fs_name}-{next(self._ids):09d}"

    def _suffix(self) -> str:
        return "" if self.fs_name == "os" else " [latency fs]"

    def _params(self, **extra: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"fs": self.fs_name, "shards": 1, "docs": self.cfg.docs}
        if self.fs_name == "latency":
            params["fsync_ms"] = self.cfg.latency_fsync_ms
            params["read_ms"] = self.cfg.latency_read_ms
        return {**params, **extra}

    # -- steps ------------------------------------------------------------------------------

    def _step(self, op: str, db: Any, rng: random.Random) -> Callable[[], int]:
        n = self.cfg.docs
        if op == "get":
            return lambda: _one(db.get(doc_id(rng.randrange(n))))
        if op == "all_docs":
            return lambda: len(db.all_docs()["rows"])
        if op == "all_docs_docs":
            return lambda: len(db.all_docs(include_docs=True)["rows"])
        if op == "changes":
            return lambda: len(db.changes()["results"])
        if op == "put":
            return lambda: _one(db.put(make_doc(self._id(), 0)))
        raise ValueError(op)

    # -- scenarios --------------------------------------------------------------------------

    def sequential(self, op: str) -> None:
        title, unit = _SEQ_TITLES[op]
        seconds = self.cfg.seconds * (3 if op == "put" else 1)

        def side(mode: str) -> Side:
            step = self._step(op, self.dbs[mode], random.Random(1))
            return Side(mode, lambda: Outcome(run_for(step, seconds)))

        self.run.pair(
            f"readmode.{self.fs_name}.seq.{op}",
            group=f"readmode.{self.fs_name}.sequential",
            title=title + self._suffix(),
            unit=unit,
            a=side("parallel"),
            b=side("serialized"),
            meaning=_MEANING.format(unit=unit),
            params=self._params(op=op, clients=1, couchdb=_COUCH_SEQ[op]),
            target=Target("not_slower", source="issue 7: no sequential scenario slower")
            if self.fs_name == "os"
            else None,
            profile=lambda: run_for(self._step(op, self.dbs["parallel"], random.Random(2)), 0.5),
        )

    def concurrent_reads(self, clients: int) -> None:
        n = self.cfg.docs

        def side(mode: str) -> Side:
            db = self.dbs[mode]
            rngs = [random.Random(i) for i in range(clients)]

            def step(i: int) -> int:
                return _one(db.get(doc_id(rngs[i].randrange(n))))

            return Side(
                mode, lambda: run_clients(clients, step, self.cfg.seconds, record_latency=True)
            )

        self.run.pair(
            f"readmode.{self.fs_name}.concurrent.c{clients}",
            group=f"readmode.{self.fs_name}.concurrent",
            title=f"random doc reads, {clients} client thread{'s' * (clients > 1)}"
            + self._suffix(),
            unit="reads/s",
            a=side("parallel"),
            b=side("serialized"),
            meaning=_MEANING.format(unit="reads/s"),
            params=self._params(
                clients=clients, couchdb="CouchDB 3.5: +30% (12 nodes), ~10k→~25k/s on one node"
            ),
        )

    def mixed(self, readers: int, *, paced: bool) -> None:
        """1000-doc batches (fsync on) plus ``readers`` single-doc readers.

        Unpaced, the writer commits back to back, as in CouchDB's benchmark; the
        side whose readers wait more lets its writer write more. Paced, the writer
        aims at ``Config.write_rate`` docs/s on both sides, so reader throughput
        is compared at equal write work.
        """
        n = self.cfg.docs
        batch = self.cfg.write_batch
        interval = batch / self.cfg.write_rate if paced else 0.0

        def writer(db: Any, written: list[int]) -> Callable[[threading.Event], None]:
            # One batch every ``interval`` seconds, back to back if a commit takes longer.
            def loop(stop: threading.Event) -> None:
                due = time.perf_counter()
                while not stop.is_set():
                    db.bulk_docs([make_doc(self._id(), i) for i in range(batch)])
                    written[0] += batch
                    due += interval
                    stop.wait(max(0.0, due - time.perf_counter()))

            return loop

        def sample(mode: str) -> Outcome:
            db = self.dbs[mode]
            rngs = [random.Random(i) for i in range(readers)]
            written = [0]

            def step(i: int) -> int:
                return _one(db.get(doc_id(rngs[i].randrange(n))))

            timer = _Timer()
            out = run_clients(
                readers,
                step,
                self.cfg.mixed_seconds,
                record_latency=True,
                background=timer.wrap(writer(db, written)),
            )
            out.extra["writer_docs_per_s"] = written[0] / max(timer.elapsed, 1e-9)
            return out

        def profile() -> None:
            db = self.dbs["parallel"]
            stop = threading.Event()
            bg = threading.Thread(target=writer(db, [0]), args=(stop,), daemon=True)
            bg.start()
            rng = random.Random(3)
            run_for(lambda: _one(db.get(doc_id(rng.randrange(n)))), self.cfg.mixed_seconds)
            stop.set()
            bg.join()

        rate = f"at {self.cfg.write_rate:,} docs/s" if paced else "back to back"
        self.run.pair(
            f"readmode.{self.fs_name}.{'paced' if paced else 'mixed'}.r{readers}",
            group=f"readmode.{self.fs_name}.mixed",
            title=f"reads under {batch}-doc batch writes {rate}, {readers} readers"
            + self._suffix(),
            unit="reads/s",
            a=Side("parallel", lambda: sample("parallel")),
            b=Side("serialized", lambda: sample("serialized")),
            meaning=_MEANING.format(unit="reader throughput"),
            params=self._params(
                readers=readers,
                batch=batch,
                write_rate=self.cfg.write_rate if paced else None,
                couchdb="CouchDB 3.5: +40%; 7,100→11,800 requests/s mixed",
            ),
            target=Target("min_ratio", 1.4, "issue 7: at least CouchDB's +40%"),
            profile=profile,
        )


class _Timer:
    """Wall time of the background writer, from its start to its stop."""

    def __init__(self) -> None:
        self.elapsed = 0.0

    def wrap(self, fn: Callable[[threading.Event], None]) -> Callable[[threading.Event], None]:
        def timed(stop: threading.Event) -> None:
            start = time.perf_counter()
            try:
                fn(stop)
            finally:
                self.elapsed = time.perf_counter() - start

        return timed


def _one(_: object) -> int:
    return 1
