"""The crash checker: record a concurrent workload, crash it anywhere, check recovery.

How one workload is checked (ALICE's record-then-replay method):

1. ``record`` runs a seeded workload (puts, bulk batches, deletes,
   ``new_edits=False`` replication, compaction) from several client threads
   against the engine on a ``SimFS``. It records every io op in order (the
   trace), when each call was acknowledged (``acked_at``: how many ops were
   done when the client saw the answer) and, per shard, the order in which
   calls were submitted to the shard's writer queue (``queues``) — that is the
   order the writer commits them in, whatever the threads raced to do.
   Reads run alongside: a reader thread reads whenever a shard's writer
   reaches one of ``PROBE_STEPS`` (the writer waits for it, so the read lands
   inside the commit, before its fsyncs), and each client reads after each of
   its calls. Every completed read is kept as a ``Read``: the revisions it saw
   (tombstones included) and ``completed_at``, counted like ``acked_at``.
2. The per-shard reference replay (``Oracle``) feeds each shard's calls, in
   queue order, to its own ``settee.reference`` store and checks every engine
   answer against it; the view of the shard after each prefix of its queue is
   kept, and so is the first prefix holding each revision a read saw. Shards
   are independent (a call's documents are split by shard routing), so any
   combination of per-shard prefixes is a legal state.
3. ``check_point`` rebuilds the disk as it was before op ``step`` (``SimFS.replay``),
   crashes it into a ``CrashState``, reopens the engine and checks: it opens;
   every shard's view equals the view after *some* prefix of its queue that
   includes every call acknowledged before ``step`` (so no acknowledged write is
   lost and no partial call is visible) and every revision a read completed
   before ``step`` saw (readers are served durable commits only, so what they
   saw cannot be undone by a crash); every read succeeds; new writes work and
   survive a second crash.

A crash at step ``N`` means ops ``0..N-1`` happened and op ``N`` did not; the
acknowledgements and reads that completed before op ``N`` in the recorded run
are exactly what clients would have seen before such a crash.
"""

from __future__ import annotations

import base64
import bisect
import json
import os
import queue
import random
import re
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import settee
import settee.reference
import settee.shard
from settee.file import SPILL_BYTES
from settee.proof.crash.simfs import KINDS, CrashState, Image, Op, SimFS, SimulatedCrash
from settee.proof.stateful import watchdog
from settee.spec.routing import shard_of

__all__ = [
    "DB_PATH",
    "PROBE_STEPS",
    "Call",
    "Oracle",
    "Read",
    "Recording",
    "Workload",
    "check_point",
    "default_factory",
    "make_workload",
    "record",
]

DB_PATH = "/db"
#: Options every crash-test database is opened with unless the workload says otherwise.
#: Strict mode is on: every commit checks what it changed before it is published.
BASE_OPTIONS: dict[str, Any] = {"fsync": True, "strict": True}

EngineFactory = Callable[..., Any]

#: Writer steps at which the recorder's reader reads while the writer waits for it: the
#: commit under way is not durable until its header fsync returns, so no read may see it.
PROBE_STEPS = frozenset({"before_data_fsync", "before_header_fsync"})
assert PROBE_STEPS.issubset(settee.shard.STEPS), "a probe step the writer no longer reports"
#: What a read asks for; the probing reader takes them in turn, each client after each call.
READ_KINDS = ("changes", "all_docs", "get")
#: Longest a writer waits for its probe; in parallel read mode a read never waits for a writer.
PROBE_TIMEOUT = 10.0
#: Longest a recorded run may take; a client still waiting then holds a request the
#: engine never answered (reported, so a lost request fails the run instead of hanging it).
RUN_TIMEOUT = 120.0


def default_factory(path: str, **options: Any) -> Any:
    """``settee.Database`` (the factory must accept ``fs=``)."""
    return settee.Database(path, **options)


# -- workloads --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    """What each client thread does, drawn from a seed; revisions are filled in at run time."""

    seed: int
    shards: int
    clients: tuple[tuple[tuple[Any, ...], ...], ...]
    ids: tuple[str, ...]

    @property
    def size(self) -> int:
        return sum(map(len, self.clients))


def _hash(rng: random.Random) -> str:
    return f"{rng.getrandbits(128):032x}"


def _body(rng: random.Random, client: int, n: int) -> dict[str, Any]:
    body: dict[str, Any] = {"c": client, "n": n}
    roll = rng.random()
    if roll < 0.15:
        # Bodies that span several 4 KiB blocks exercise the block markers inside frames.
        body["big"] = "x" * rng.choice([3000, 5000, 9000])
    elif roll < 0.3:
        body["nested"] = {"list": [n, None, True, 1.5], "s": "é😀"}
    return body


def make_workload(
    seed: int, *, ops: int = 30, clients: int = 3, shards: int = 2, compactions: int = 1
) -> Workload:
    """A seeded workload of about ``ops`` calls over a small, contended id pool."""
    rng = random.Random(seed)
    ids = tuple(f"doc{i}" for i in range(max(4, ops // 3)))
    plans: list[list[tuple[Any, ...]]] = [[] for _ in range(clients)]
    for n in range(ops - compactions):
        client = rng.randrange(clients)
        roll = rng.random()
        doc_id = rng.choice(ids)
        mode = rng.choices(["auto", "none", "stale"], [6, 2, 1])[0]
        if roll < 0.4:
            op: tuple[Any, ...] = ("put", doc_id, _body(rng, client, n), mode)
        elif roll < 0.65:
            entries = [
                (rng.choice(ids), _body(rng, client, n), rng.choice(["auto", "auto", "none"]))
                for _ in range(rng.randint(2, 5))
            ]
            op = ("bulk", tuple(entries))
        elif roll < 0.8:
            op = ("delete", doc_id)
        else:
            depth = rng.randint(1, 3)
            op = (
                "replicate",
                doc_id,
                tuple(_hash(rng) for _ in range(depth)),
                rng.random() < 0.2,
                _body(rng, client, n),
                rng.random() < 0.5,
            )
        plans[client].append(op)
    # One client runs every compaction: concurrent compact() calls on one database
    # lose data (test_crash.py::test_concurrent_compactions_keep_data, an engine bug).
    for _ in range(compactions):
        plans[0].insert(rng.randint(0, len(plans[0])), ("compact",))
    return Workload(seed, shards, tuple(tuple(p) for p in plans), ids)


# -- recording --------------------------------------------------------------------------------


@dataclass(slots=True)
class Call:
    """One public call a client made, what it answered and when."""

    index: int
    client: int
    kind: str
    #: Documents exactly as passed (put: one; delete: the tombstone it submits).
    docs: list[dict[str, Any]]
    new_edits: bool = True
    result: Any = None
    error: str | None = None
    #: Ops done when the client saw the answer; None if it never did (a live crash).
    acked_at: int | None = None
    #: Ops done when the client made the call.
    started_at: int = 0


@dataclass(frozen=True, slots=True)
class Read:
    """One completed read: which revisions it returned, and when."""

    thread: str
    kind: str
    #: (doc id, rev) for every winner, conflict and deleted winner in the answer.
    seen: frozenset[tuple[str, str]]
    #: Ops done when the reader had the answer (as ``Call.acked_at``).
    completed_at: int

    def describe(self) -> str:
        return f"{self.kind} on {self.thread}, done at op {self.completed_at}"


@dataclass(slots=True)
class Recording:
    """Everything one run of a workload left behind."""

    workload: Workload
    options: dict[str, Any]
    base: Image
    ops: list[Op]
    calls: list[Call]
    #: Per shard, the indexes of the calls submitted to its writer, in queue order.
    queues: list[list[int]]
    strict_mkdir: bool = False
    #: A call whose client saw an exception that is not a SetteeError (an engine bug).
    unexpected: list[str] = field(default_factory=list)
    #: Every read that completed, in completion order.
    reads: list[Read] = field(default_factory=list)

    def acked_before(self, step: int) -> set[int]:
        """Calls answered before op ``step``: their outcome must be durable."""
        return {c.index for c in self.calls if c.acked_at is not None and c.acked_at <= step}


class _Recorder:
    """Numbers calls, remembers each shard's queue order, labels ops."""

    def __init__(self, fs: SimFS, shards: int) -> None:
        self.fs = fs
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.queues: list[list[int]] = [[] for _ in range(shards)]
        self.local = threading.local()
        self.known: dict[str, list[str]] = {}
        self.unexpected: list[str] = []
        self.reads: list[Read] = []
        self.prober: _Prober | None = None
        fs.labeler = self.label

    def label(self) -> str:
        call = getattr(self.local, "call", None)
        doing = f"{call.kind}#{call.index}/" if call is not None else ""
        return f"{threading.current_thread().name}:{doing}{getattr(self.local, 'step', 'open')}"

    def install(self, db: Any) -> None:
        """Wrap each shard's ``submit`` to learn the queue order, and name its steps."""
        for index, shard in enumerate(db.shards):
            shard.submit = self._queued(shard.submit, index)
            if callable(getattr(shard, "submit_purge", None)):  # an engine with purge
                shard.submit_purge = self._queued(shard.submit_purge, index)
            shard.step_hook = self._hook(shard.step_hook, index)

    def _queued(self, original: Callable[..., Any], index: int) -> Callable[..., Any]:
        """``original`` (a shard's submit), noting the calling call in shard ``index``'s
        queue order."""

        def submit(*args: Any, **kwargs: Any) -> Any:
            # Holding our lock across the enqueue makes our list order the queue order.
            with self.lock:
                future = original(*args, **kwargs)
                self.queues[index].append(self.local.call.index)
            return future

        return submit

    def _hook(self, previous: Callable[[str], None] | None, shard: int) -> Callable[[str], None]:
        """Name the step; at a probe step, have the reader read before the writer goes on.
        A hook the engine set already (a mutant's) runs first."""

        def hook(name: str) -> None:
            if previous is not None:
                previous(name)
            self.local.step = name
            if name in PROBE_STEPS and self.prober is not None:
                self.prober.probe(shard)

        return hook

    def read(self, db: Any, kind: str, ids: list[str]) -> None:
        """Read ``kind`` on this thread and keep what it saw (SimulatedCrash propagates)."""
        try:
            seen = _observe(db, kind, ids)
        except settee.SetteeError as exc:
            if not self.fs.crashed:
                self.unexpected.append(f"{kind} read raised {type(exc).__name__}: {exc}")
            return
        read = Read(threading.current_thread().name, kind, seen, self.fs.op_count)
        with self.lock:
            self.reads.append(read)

    @contextmanager
    def calling(self, call: Call) -> Iterator[None]:
        with self.lock:
            call.index = len(self.calls)
            call.started_at = self.fs.op_count
            self.calls.append(call)
        self.local.call = call
        self.local.step = call.kind
        yield

    def learn(self, doc_id: str, rev: str) -> None:
        with self.lock:
            self.known.setdefault(doc_id, []).append(rev)

    def revs_of(self, doc_id: str) -> list[str]:
        with self.lock:
            return list(self.known.get(doc_id, []))

    def rev_for(self, doc_id: str, mode: str) -> str | None:
        with self.lock:
            revs = self.known.get(doc_id, [])
            if not revs or mode == "none":
                return None
            return revs[0] if mode == "stale" else revs[-1]


def _observe(db: Any, kind: str, ids: list[str]) -> frozenset[tuple[str, str]]:
    """The (doc id, rev) pairs one read of ``kind`` returns."""
    if kind == "changes":
        return frozenset((r["id"], c["rev"]) for r in db.changes()["results"] for c in r["changes"])
    if kind == "all_docs":
        rows = db.all_docs(include_docs=True)["rows"]
        return frozenset(
            pair
            for r in rows
            for pair in ((r["id"], r["value"]["rev"]), (r["id"], r["doc"]["_rev"]))
        )
    seen: set[tuple[str, str]] = set()
    for doc_id in ids:
        try:
            doc = db.get(doc_id, conflicts=True)
        except settee.NotFound:
            continue
        seen.update((doc_id, rev) for rev in [doc["_rev"], *doc.get("_conflicts", [])])
    return frozenset(seen)


class _Prober:
    """The reader thread that reads while a writer waits at one of ``PROBE_STEPS``."""

    def __init__(self, db: Any, rec: _Recorder, ids: list[list[str]]) -> None:
        self.db, self.rec, self.ids = db, rec, ids
        self.requests: queue.SimpleQueue[tuple[int, threading.Event] | None] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.stopped = False
        self.thread = threading.Thread(target=self._run, name="reader", daemon=True)
        self.thread.start()

    def probe(self, shard: int) -> None:
        """Read once on the reader thread, from the calling writer's shard step; wait for it."""
        done = threading.Event()
        with self.lock:
            if self.stopped:
                return
            self.requests.put((shard, done))
        done.wait(PROBE_TIMEOUT)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            self.requests.put(None)
        self.thread.join()

    def _run(self) -> None:
        crashed = False
        count = 0
        while (request := self.requests.get()) is not None:
            shard, done = request
            try:
                if not crashed:
                    self.rec.read(self.db, READ_KINDS[count % len(READ_KINDS)], self.ids[shard])
                    count += 1
            except SimulatedCrash:
                crashed = True  # the machine is down: no later read completes
            except BaseException:  # an engine bug: report it, never hang the writer
                self.rec.unexpected.append(traceback.format_exc())
            finally:
                done.set()


def _doc(rec: _Recorder, doc_id: str, body: dict[str, Any], mode: str) -> dict[str, Any]:
    doc = {"_id": doc_id, **body}
    rev = rec.rev_for(doc_id, mode)
    if rev is not None:
        doc["_rev"] = rev
    attachment = _attachment_for(body)
    if attachment is not None:
        doc["_attachments"] = {"f.bin": attachment}
    return doc


def _attachment_for(body: dict[str, Any]) -> dict[str, Any] | None:
    """An inline attachment for one write in three, derived from its body so a
    workload stays one seed's: a few bytes, up to two 64 KiB chunk terms and a
    piece (SEMANTICS.md §18), so crashes and bit flips meet chunk terms too, or
    more than a batch holds before it appends early (file.SPILL_BYTES), so a
    crash can fall between a commit's early appends and its header."""
    n = body.get("n")
    if not isinstance(n, int) or n % 3:
        return None
    size = (7, 70_000, 140_000, SPILL_BYTES + 50_000)[n // 3 % 4]
    data = (b"%d:" % n) * (size // 4 + 1)
    return {"content_type": "application/x-test", "data": base64.b64encode(data[:size]).decode()}


def _replicated(rec: _Recorder, op: tuple[Any, ...]) -> dict[str, Any]:
    _, doc_id, hashes, deleted, body, extend = op
    base = rec.rev_for(doc_id, "auto") if extend else None
    if base is not None:
        pos, parent = base.split("-", 1)
        revisions = {"start": int(pos) + len(hashes), "ids": [*hashes, parent]}
    else:
        revisions = {"start": len(hashes), "ids": list(hashes)}
    doc = {"_id": doc_id, "_revisions": revisions, **body}
    if deleted:
        doc["_deleted"] = True
    return doc


def _run_op(db: Any, rec: _Recorder, client: int, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "put":
        call = Call(-1, client, "put", [_doc(rec, op[1], op[2], op[3])])
    elif kind == "bulk":
        call = Call(-1, client, "bulk", [_doc(rec, i, b, m) for i, b, m in op[1]])
    elif kind == "delete":
        rev = rec.rev_for(op[1], "auto")
        call = Call(-1, client, "delete", [{"_id": op[1], "_rev": rev, "_deleted": True}])
    elif kind == "replicate":
        call = Call(-1, client, "replicate", [_replicated(rec, op)], new_edits=False)
    elif kind == "purge":  # every revision this run has learned of the id: most go whole
        call = Call(-1, client, "purge", [{"_id": op[1], "revs": rec.revs_of(op[1])}])
    else:
        call = Call(-1, client, "compact", [])
    with rec.calling(call):
        try:
            call.result = _invoke(db, call)
        except (settee.Conflict, settee.NotFound) as exc:
            call.error = type(exc).__name__
        except settee.SetteeError as exc:
            # After the crash, not an answer about the data ("an earlier write failed"):
            # nothing to hold. Before it, every call of the workload is valid and the
            # file system healthy, so a refusal (a compact() that gives up, a write
            # turned away) is an engine bug, not an answer (found by mutation testing).
            call.error = type(exc).__name__
            if not rec.fs.crashed:
                rec.unexpected.append(f"call #{call.index}: {call.kind} raised {exc!r}")
            return
        if rec.fs.crashed:
            return  # a real power loss leaves no process to hear this answer
        call.acked_at = rec.fs.op_count
    for doc, result in _results(call):
        if result is not None:
            rec.learn(doc["_id"], result)
            _read_own_write(db, rec, call, doc["_id"], result)


def _read_own_write(db: Any, rec: _Recorder, call: Call, doc_id: str, rev: str) -> None:
    """Jepsen's "read your writes": an acknowledged revision is readable at once."""
    try:
        got = db.get(doc_id, rev=rev)
    except settee.NotFound as exc:
        # A concurrent edit plus compaction may drop a non-leaf body; the rev stays known.
        got = rev if not db.revs_diff({doc_id: [rev]}) else exc
    except settee.SetteeError as exc:
        got = exc
    if got != rev and (not isinstance(got, dict) or got.get("_rev") != rev):
        rec.unexpected.append(f"call #{call.index}: wrote {doc_id} {rev}, read back {got!r}")


def _invoke(db: Any, call: Call) -> Any:
    if call.kind == "put":
        return db.put(call.docs[0])["rev"]
    if call.kind == "bulk":
        return db.bulk_docs(call.docs)
    if call.kind == "delete":
        doc = call.docs[0]
        return db.delete(doc["_id"], doc["_rev"])["rev"]
    if call.kind == "replicate":
        return db.bulk_docs(call.docs, new_edits=False)
    if call.kind == "purge":
        doc = call.docs[0]
        return db.purge({doc["_id"]: doc["revs"]})["purged"]
    db.compact()
    return None


def _results(call: Call) -> list[tuple[dict[str, Any], str | None]]:
    """(doc, new rev or None) for each document of a finished call."""
    if call.error is not None or call.kind in ("compact", "replicate", "purge"):
        return [(d, None) for d in call.docs]
    if call.kind == "bulk":
        return [(d, r.get("rev")) for d, r in zip(call.docs, call.result, strict=True)]
    return [(call.docs[0], call.result)]


def _client(
    db: Any, rec: _Recorder, client: int, plan: tuple[tuple[Any, ...], ...], ids: list[str]
) -> None:
    try:
        for n, op in enumerate(plan):
            _run_op(db, rec, client, op)
            # A read racing the other clients' commits: it may see them before their acks.
            rec.read(db, READ_KINDS[(client + n) % len(READ_KINDS)], ids)
    except SimulatedCrash:
        return  # the machine is down: this client stops, its call is unacknowledged
    except BaseException:  # an engine bug: report it, never hang the run
        rec.unexpected.append(traceback.format_exc())


def record(
    workload: Workload,
    *,
    factory: EngineFactory = default_factory,
    options: dict[str, Any] | None = None,
    crash_at: int | None = None,
    strict_mkdir: bool = False,
    base: Image | None = None,
) -> Recording:
    """Run ``workload`` on a fresh ``SimFS`` (crashing live at op ``crash_at`` if given)."""
    opts = {**BASE_OPTIONS, "shards": workload.shards, **(options or {})}
    fs = SimFS(base, crash_at=crash_at, strict_mkdir=strict_mkdir)
    rec = _Recorder(fs, workload.shards)
    ids = sorted(workload.ids)
    db = None
    try:
        db = factory(DB_PATH, fs=fs, **opts)
        rec.install(db)
        if opts.get("read_mode") != "serialized":
            # Serialized readers queue on the lock the writer holds at the probe steps.
            per_shard = [
                [i for i in ids if shard_of(i, workload.shards) == s]
                for s in range(workload.shards)
            ]
            rec.prober = _Prober(db, rec, per_shard)
        threads = [
            threading.Thread(
                target=_client, args=(db, rec, i, plan, ids), name=f"client-{i}", daemon=True
            )
            for i, plan in enumerate(workload.clients)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + RUN_TIMEOUT
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                rec.unexpected.append(f"{t.name}: a call got no answer in {RUN_TIMEOUT:.0f} s")
    except SimulatedCrash:
        pass  # crashed while opening: nothing was acknowledged
    finally:
        if rec.prober is not None:
            rec.prober.stop()
        fs.halt()
        if db is not None:
            db.close()
    return Recording(
        workload,
        opts,
        fs.base,
        list(fs.trace),
        rec.calls,
        rec.queues,
        strict_mkdir,
        rec.unexpected,
        rec.reads,
    )


# -- the oracle -------------------------------------------------------------------------------


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False)


def doc_views(db: Any, ids: list[str]) -> dict[str, Any]:
    """Every document's observable state: winner row, get, and every leaf with its body."""
    rows = db.all_docs(keys=ids, include_docs=True)["rows"]
    leaves = db.revs_diff({i: ["999999-f"] for i in ids})
    out: dict[str, Any] = {}
    for doc_id, row in zip(ids, rows, strict=True):
        if "error" in row:
            out[doc_id] = None
            continue
        try:
            current: Any = db.get(doc_id, revs=True, conflicts=True, attachments=True)
        except settee.NotFound as exc:
            current = ["not_found", exc.reason]
        revs = leaves.get(doc_id, {}).get("possible_ancestors", [])
        out[doc_id] = {
            "row": row,
            "get": current,
            "leaves": {r: db.get(doc_id, rev=r, revs=True, attachments=True) for r in revs},
        }
    return out


def shard_view(db: Any, ids: list[str]) -> tuple[str, str]:
    """(documents, changes) of the documents ``ids`` (one shard's), canonically encoded."""
    wanted = set(ids)
    changes = [
        [r["id"], r["changes"], r.get("deleted", False)]
        for r in db.changes()["results"]
        if r["id"] in wanted
    ]
    return _canon(doc_views(db, ids)), _canon(changes)


class Oracle:
    """Each shard's reference states, after every prefix of its writer queue, and where in
    that queue each revision a read saw first exists."""

    def __init__(self, rec: Recording) -> None:
        self.rec = rec
        shards = rec.workload.shards
        self.ids = [
            sorted(i for i in _all_ids(rec) if shard_of(i, shards) == s) for s in range(shards)
        ]
        #: Per shard: canonical view -> the prefix lengths that produce it.
        self.views: list[dict[tuple[str, str], list[int]]] = []
        #: Problems found while replaying (engine answers that no serial order explains).
        self.problems: list[str] = list(rec.unexpected)
        #: Each (doc id, rev) a read returned -> the first read (by completion) to return it.
        self.first_read: dict[tuple[str, str], Read] = {}
        for read in rec.reads:
            for pair in read.seen:
                known = self.first_read.get(pair)
                if known is None or read.completed_at < known.completed_at:
                    self.first_read[pair] = read
        #: Each (doc id, rev) a read returned -> the shortest prefix of its shard's queue
        #: holding it. A reader is served published commits only, and the writer publishes
        #: in queue order once a commit is durable, so a read completed before a crash
        #: proves the shard durable up to at least this prefix.
        self.introduced: dict[tuple[str, str], int] = {}
        for s in range(shards):
            self.views.append(self._replay_shard(s))
        self._read_steps, self._read_needs = self._read_needs_by_step()

    def _replay_shard(self, s: int) -> dict[tuple[str, str], list[int]]:
        ref = settee.reference.open(None, revs_limit=self.rec.options.get("revs_limit", 1000))
        views: dict[tuple[str, str], list[int]] = {}
        views.setdefault(shard_view(ref, self.ids[s]), []).append(0)
        unplaced: dict[str, set[str]] = {}
        for doc_id, rev in self.first_read:
            if shard_of(doc_id, self.rec.workload.shards) == s:
                unplaced.setdefault(doc_id, set()).add(rev)
        for j, index in enumerate(self.rec.queues[s], start=1):
            call = self.rec.calls[index]
            self._replay_call(ref, s, call)
            views.setdefault(shard_view(ref, self.ids[s]), []).append(j)
            self._place_reads(ref, j, unplaced)
        ref.close()
        for doc_id, revs in sorted(unplaced.items()):
            for rev in sorted(revs):
                self.problems.append(
                    f"a read ({self.first_read[(doc_id, rev)].describe()}) returned {doc_id} "
                    f"{rev}, which no commit of shard {s} wrote"
                )
        return views

    def _place_reads(self, ref: Any, j: int, unplaced: dict[str, set[str]]) -> None:
        """Note prefix ``j`` for the revisions reads returned that first exist after it."""
        if not unplaced:
            return
        diff = ref.revs_diff({doc_id: sorted(revs) for doc_id, revs in unplaced.items()})
        for doc_id in list(unplaced):
            missing = set(diff.get(doc_id, {}).get("missing", []))
            for rev in unplaced[doc_id] - missing:
                self.introduced[(doc_id, rev)] = j
            unplaced[doc_id] &= missing
            if not unplaced[doc_id]:
                del unplaced[doc_id]

    def _read_needs_by_step(self) -> tuple[list[int], list[list[int]]]:
        """Read completion steps, ascending, each with the per-shard prefix that every read
        completed by then requires."""
        shards = self.rec.workload.shards
        events = sorted(
            (read.completed_at, shard_of(pair[0], shards), self.introduced[pair])
            for pair, read in self.first_read.items()
            if pair in self.introduced
        )
        steps: list[int] = []
        needs: list[list[int]] = []
        need = [0] * shards
        for at, s, j in events:
            need = list(need)
            need[s] = max(need[s], j)
            steps.append(at)
            needs.append(need)
        return steps, needs

    def _replay_call(self, ref: Any, s: int, call: Call) -> None:
        shards = self.rec.workload.shards
        part = [(k, d) for k, d in enumerate(call.docs) if shard_of(d["_id"], shards) == s]
        docs = [d for _, d in part]
        if call.kind == "purge":
            doc = docs[0]
            purged = ref.purge({doc["_id"]: doc["revs"]})["purged"]
            if call.acked_at is not None and call.error is None and purged != call.result:
                self.problems.append(
                    f"call #{call.index} purge {doc['_id']}: engine purged {call.result}, "
                    f"the reference in queue order {purged}"
                )
            return
        if call.kind in ("put", "delete"):
            doc = docs[0]
            try:
                if call.kind == "delete":
                    got: Any = ref.delete(doc["_id"], doc.get("_rev"))["rev"]
                else:
                    got = ref.put(doc)["rev"]
                error = None
            except settee.SetteeError as exc:
                got, error = None, type(exc).__name__
            if call.acked_at is not None and (got, error) != (call.result, call.error):
                self.problems.append(
                    f"call #{call.index} {call.kind} {docs[0]['_id']}: engine answered "
                    f"{call.error or call.result}, the reference in queue order {error or got}"
                )
            return
        results = ref.bulk_docs(docs, new_edits=call.new_edits)
        if call.acked_at is None or call.error is not None:
            return
        if call.new_edits:
            engine = [call.result[k] for k, _ in part]
            if engine != results:
                self.problems.append(
                    f"call #{call.index} bulk_docs on shard {s}: engine {engine}, "
                    f"reference in queue order {results}"
                )
        else:
            engine = [r for r in call.result if shard_of(r["id"], shards) == s]
            if engine != results:
                self.problems.append(
                    f"call #{call.index} new_edits=False on shard {s}: engine {engine}, "
                    f"reference {results}"
                )

    def need(self, step: int) -> list[int]:
        """Per shard, the shortest queue prefix a crash at ``step`` must keep: it holds every
        call acknowledged and every revision a read returned before ``step``."""
        return [max(a, r) for a, r in zip(self.need_acked(step), self.need_read(step), strict=True)]

    def need_acked(self, step: int) -> list[int]:
        """Per shard, the shortest queue prefix holding every call acknowledged before ``step``."""
        acked = self.rec.acked_before(step)
        return [
            max((j + 1 for j, index in enumerate(queue) if index in acked), default=0)
            for queue in self.rec.queues
        ]

    def need_read(self, step: int) -> list[int]:
        """Per shard, the shortest queue prefix holding every revision a read completed
        before ``step`` returned."""
        i = bisect.bisect_right(self._read_steps, step)
        return list(self._read_needs[i - 1]) if i else [0] * self.rec.workload.shards

    def lost(self, s: int, recovered: int, step: int) -> str:
        """Why recovering shard ``s`` to ``recovered`` commits fails a crash at ``step``."""
        order = self.rec.queues[s]
        acked = self.need_acked(step)[s]
        if acked > recovered:
            return (
                f"shard {s}: acknowledged write lost: recovered the state after {recovered} "
                f"commits, but calls {order[recovered:acked]} were acknowledged (need {acked})"
            )
        shards = self.rec.workload.shards
        j, pair, read = max(
            (self.introduced[pair], pair, read)
            for pair, read in self.first_read.items()
            if pair in self.introduced
            and shard_of(pair[0], shards) == s
            and read.completed_at <= step
        )
        return (
            f"shard {s}: a revision a read returned was lost: {read.describe()} returned "
            f"{pair[0]} {pair[1]}, written by call #{order[j - 1]} (commit {j} of the shard's "
            f"queue), but the crash recovered the state after {recovered} commits"
        )


def _all_ids(rec: Recording) -> set[str]:
    ids = set(rec.workload.ids)
    for call in rec.calls:
        ids.update(d["_id"] for d in call.docs)
    return ids


# -- checking one crash point -----------------------------------------------------------------


def _open(factory: EngineFactory, fs: SimFS, options: dict[str, Any]) -> Any:
    with warnings.catch_warnings():
        # A torn tail is expected after a crash; opening reports it with a warning.
        warnings.simplefilter("ignore")
        return factory(DB_PATH, fs=fs, **options)


def check_point(
    oracle: Oracle,
    step: int,
    state: CrashState,
    *,
    image: Image | None = None,
    factory: EngineFactory = default_factory,
    second_seed: int = 0,
) -> list[str]:
    """Problems after crashing the recorded run at op ``step`` into ``state`` ([] = ok)."""
    rec = oracle.rec
    if image is None:
        disk = SimFS.replay(rec.base, rec.ops[:step], strict_mkdir=rec.strict_mkdir)
        image = disk.image(state)
    fs = SimFS(image, strict_mkdir=rec.strict_mkdir)
    # A reopen or read that never returns (a loop over a damaged tail) is a problem of
    # this crash state, not a campaign that hangs: the whole check gets one call's time.
    with watchdog.watching():
        try:
            db = _open(factory, fs, rec.options)
        except Exception as exc:
            return [f"reopen raised {type(exc).__name__}: {exc}"]
        try:
            problems, docs = _check_recovered(oracle, db, step)
            if not problems:
                problems = _check_append_only(image, fs.image())
            if not problems:
                problems = _check_second_crash(oracle, db, fs, docs, factory, second_seed)
            return problems
        except Exception:
            return [f"unexpected exception after recovery:\n{traceback.format_exc()}"]
        finally:
            fs.halt()
            if not watchdog.fired():  # a hung engine may hang its close as well
                db.close()


_SHARD_FILE = re.compile(r"shard-[0-9]+\.settee")


def _check_append_only(before: Image, after: Image) -> list[str]:
    """Opening after a crash keeps every byte of every shard file, a torn tail's too
    (FORMAT.md: only ever appended; the tail is evidence for settee check and for
    LostCommitWarning). Found by mutation testing: an engine that cut torn tails
    at open passed, as the oracle compared only what reads return."""
    problems = []
    for path, data in sorted(before.files.items()):
        if not _SHARD_FILE.fullmatch(os.path.basename(path)):
            continue
        now = after.files.get(path)
        if now is None or not now.startswith(data):
            kept = "gone" if now is None else f"{len(now)} bytes, not a continuation"
            problems.append(f"reopening changed {path}: {len(data)} bytes before, {kept} after")
    return problems


def _check_recovered(oracle: Oracle, db: Any, step: int) -> tuple[list[str], dict[str, Any]]:
    need = oracle.need(step)
    problems: list[str] = []
    docs: dict[str, Any] = {}
    for s, ids in enumerate(oracle.ids):
        view = shard_view(db, ids)
        docs.update(json.loads(view[0]))
        prefixes = oracle.views[s].get(view)
        if prefixes is None:
            problems.append(
                f"shard {s}: recovered contents equal no prefix of its commits "
                f"(need at least {need[s]} of {len(oracle.rec.queues[s])}); "
                f"{_diff(oracle, s, view, need[s])}"
            )
        elif max(prefixes) < need[s]:
            problems.append(oracle.lost(s, max(prefixes), step))
    live = sorted(
        i
        for i, d in docs.items()
        if d is not None and "row" in d and "deleted" not in d["row"]["value"]
    )
    rows = [r["id"] for r in db.all_docs()["rows"]]
    if rows != live:
        problems.append(f"all_docs lists {rows}, the shards hold live documents {live}")
    if db.info()["doc_count"] != len(live):
        problems.append(f"info doc_count {db.info()['doc_count']} != {len(live)} live documents")
    ids = [r["id"] for r in db.changes()["results"]]
    if len(ids) != len(set(ids)):
        problems.append(f"changes lists a document twice: {ids}")
    return problems, docs


def _diff(oracle: Oracle, s: int, view: tuple[str, str], need: int) -> str:
    """Which documents differ from the closest legal state (for the report)."""
    got = json.loads(view[0])
    best = None
    for (docs, _changes), prefixes in oracle.views[s].items():
        if max(prefixes) < need:
            continue
        expected = json.loads(docs)
        differing = sorted(i for i in got if got[i] != expected.get(i))
        if best is None or len(differing) < len(best[1]):
            best = (max(prefixes), differing, expected)
    if best is None:
        return "no legal state"
    j, differing, expected = best
    if not differing:
        return f"documents match prefix {j} but changes differ: {view[1]}"
    first = differing[0]
    return (
        f"closest prefix {j} differs in {differing}; "
        f"{first}: got {got[first]} expected {expected[first]}"
    )


def _check_second_crash(
    oracle: Oracle,
    db: Any,
    fs: SimFS,
    docs: dict[str, Any],
    factory: EngineFactory,
    seed: int,
) -> list[str]:
    """New writes after recovery must work and survive another crash of any kind."""
    rng = random.Random(seed)
    shards = oracle.rec.workload.shards
    written: dict[str, str] = {}
    for s in range(shards):
        doc_id = next(f"after-{n}" for n in range(10_000) if shard_of(f"after-{n}", shards) == s)
        written[doc_id] = db.put({"_id": doc_id, "s": s})["rev"]
    live = [i for i, d in sorted(docs.items()) if d is not None and isinstance(d["get"], dict)]
    if live:
        target = rng.choice(live)
        written[target] = db.put({**docs[target]["get"], "after": True})["rev"]
    kind = rng.choice(KINDS)
    state = fs.random_state(kind, rng)
    fs2 = fs.crash(state)
    try:
        db2 = _open(factory, fs2, oracle.rec.options)
    except Exception as exc:
        return [f"second crash ({state.describe()}): reopen raised {type(exc).__name__}: {exc}"]
    try:
        problems = []
        for doc_id, rev in written.items():
            try:
                got = db2.get(doc_id)["_rev"]
            except settee.NotFound as exc:
                got = f"not_found ({exc.reason})"
            if got != rev:
                problems.append(
                    f"second crash ({state.describe()}): {doc_id} at {got}, acked {rev}"
                )
        others = sorted(i for i in docs if i not in written)
        again = doc_views(db2, others)
        for doc_id in others:
            if _canon(again[doc_id]) != _canon(docs[doc_id]):
                problems.append(f"second crash ({state.describe()}): {doc_id} changed")
        return problems
    finally:
        fs2.halt()
        db2.close()
