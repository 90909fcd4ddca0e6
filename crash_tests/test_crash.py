"""Crash the engine at every io step into every crash state; it must recover.

See ``checker.py`` for the oracle. The count of crash states checked is added
to the terminal summary (``settee.proof.plugin``) and printed by each test (``-s``).
"""

from __future__ import annotations

import random
import threading
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import settee
from settee.io import FileSystemWrapper
from settee.proof.crash.campaign import Summary, check_recording, run_campaign
from settee.proof.crash.checker import DB_PATH, Oracle, Workload, check_point, make_workload, record
from settee.proof.crash.known_bugs import known_bug
from settee.proof.crash.simfs import KINDS, SimFS

#: The small workloads checked exhaustively: about 30 calls from 3 clients on 2 shards.
SMALL_SEEDS = (20_240_601, 7_340_033)
#: Cut points per pending write for torn crashes; seeds per step for pages/garble.
SAMPLES = 6


def _checked(summary: Summary, record_property: Any) -> None:
    record_property("crash_states", summary.states_checked)
    known = [f for f in summary.failures if known_bug(f.state.kind, f.problems)]
    unknown = [f for f in summary.failures if f not in known]
    print(summary.report())
    if known:
        print(
            f"{len(known)} failures match known engine bugs: "
            f"{sorted({known_bug(f.state.kind, f.problems) for f in known})}"
        )
    assert not unknown, "\n".join(f.describe() for f in unknown[:10])


@pytest.mark.parametrize("seed", SMALL_SEEDS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_step_of_small_workload(
    kind: str, seed: int, crash_factory: Any, record_property: Any
) -> None:
    """Every io step x this crash kind (torn writes: SAMPLES cuts per pending write)."""
    workload = make_workload(seed, ops=30, clients=3, shards=2, compactions=1)
    rec = record(workload, factory=crash_factory)
    assert not rec.unexpected, rec.unexpected
    summary = Summary()
    check_recording(rec, summary, factory=crash_factory, kinds=[kind], samples=SAMPLES, seed=seed)
    assert summary.states_checked > 0
    _checked(summary, record_property)


def _steps_where(rec: Any, wanted: Any) -> list[int]:
    steps = [i for i, op in enumerate(rec.ops) if wanted(op)]
    # Also the crash just after the last such op.
    return sorted({*steps, *(i + 1 for i in steps)})


def test_compaction_crashed_at_every_step(crash_factory: Any, record_property: Any) -> None:
    base = make_workload(7, ops=14, clients=1, shards=2, compactions=0)
    plan = (*base.clients[0], ("compact",), ("put", "doc1", {"after": 1}, "auto"))
    workload = Workload(7, 2, (plan,), base.ids)
    rec = record(workload, factory=crash_factory)
    steps = _steps_where(rec, lambda op: "compact" in op.label or op.path.endswith(".compact"))
    kinds_of_op = {rec.ops[i].kind for i in steps if i < len(rec.ops)}
    assert {"create", "write", "fsync", "rename", "fsync_dir"} <= kinds_of_op, kinds_of_op
    summary = Summary()
    check_recording(rec, summary, factory=crash_factory, samples=SAMPLES, steps=steps, seed=7)
    _checked(summary, record_property)


def test_purges_crashed_at_every_step(crash_factory: Any, record_property: Any) -> None:
    """A purge commit (SEMANTICS §19) crashed at each of its io steps, into every crash
    kind: the database reopens to a prefix of each shard's commits, as after any
    write. The deletes of a seeded workload become purges (of the newest revision
    the run knows), so some documents go whole and some lose a branch."""
    base = make_workload(11, ops=24, clients=2, shards=2, compactions=1)
    plans = tuple(
        tuple(("purge", op[1]) if op[0] == "delete" else op for op in plan) for plan in base.clients
    )
    workload = Workload(11, 2, plans, base.ids)
    rec = record(workload, factory=crash_factory)
    assert not rec.unexpected, rec.unexpected
    purges = [c for c in rec.calls if c.kind == "purge"]
    assert purges and any(c.result and any(c.result.values()) for c in purges)
    steps = sorted(
        {
            step
            for c in purges
            if c.acked_at is not None
            for step in range(c.started_at, c.acked_at + 1)
        }
    )
    summary = Summary()
    check_recording(rec, summary, factory=crash_factory, samples=SAMPLES, steps=steps, seed=11)
    _checked(summary, record_property)


def test_database_creation_crashed_at_every_step(crash_factory: Any, record_property: Any) -> None:
    workload = Workload(3, 4, ((("put", "doc0", {"n": 0}, "auto"),),), ("doc0",))
    rec = record(workload, factory=crash_factory)
    steps = _steps_where(rec, lambda op: op.label.startswith("MainThread"))
    assert any("settee.meta.tmp-" in rec.ops[i].path for i in steps)
    summary = Summary()
    check_recording(rec, summary, factory=crash_factory, samples=SAMPLES, steps=steps, seed=3)
    _checked(summary, record_property)


@pytest.mark.parametrize("every", [2])
def test_live_crash_stops_every_thread(
    every: int, crash_factory: Any, record_property: Any
) -> None:
    """Crash for real at op N (SimulatedCrash raised inside the engine's threads)."""
    workload = make_workload(11, ops=30, clients=3, shards=2, compactions=1)
    full = record(workload, factory=crash_factory)
    summary = Summary()
    rng = random.Random(11)
    for crash_at in range(0, len(full.ops), every):
        rec = record(workload, factory=crash_factory, crash_at=crash_at)
        assert not rec.unexpected, rec.unexpected
        oracle = Oracle(rec)
        assert not oracle.problems, oracle.problems
        disk = SimFS.replay(rec.base, rec.ops)
        for kind in KINDS:
            state = disk.random_state(kind, rng)
            problems = check_point(oracle, len(rec.ops), state, factory=crash_factory)
            summary.states_checked += 1
            assert not problems, (crash_at, state, problems)
    record_property("crash_states", summary.states_checked)
    print(f"live crashes: {summary.states_checked} crash states checked")


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    ops=st.integers(5, 60),
    clients=st.integers(1, 4),
    shards=st.integers(1, 3),
    compactions=st.integers(0, 2),
    data=st.data(),
)
def test_random_workloads_crash_points_and_states(
    crash_factory: Any,
    seed: int,
    ops: int,
    clients: int,
    shards: int,
    compactions: int,
    data: st.DataObject,
) -> None:
    workload = make_workload(seed, ops=ops, clients=clients, shards=shards, compactions=compactions)
    rec = record(workload, factory=crash_factory)
    oracle = Oracle(rec)
    assert not oracle.problems, oracle.problems
    for _ in range(4):
        # The trace's length varies with thread timing, so draw a fraction of it:
        # the same draws then replay even when a rerun records a different trace.
        where = data.draw(st.integers(0, 2**16), label="where")
        step = where * len(rec.ops) >> 16
        kind = data.draw(st.sampled_from(KINDS), label="kind")
        disk = SimFS.replay(rec.base, rec.ops[:step])
        state = disk.random_state(kind, random.Random(data.draw(st.integers(0, 2**32 - 1))))
        problems = check_point(oracle, step, state, factory=crash_factory, second_seed=seed)
        op = rec.ops[step].describe() if step < len(rec.ops) else "end"
        if known_bug(kind, problems):
            continue
        assert not problems, f"seed={seed} step={step} ({op}) {state.describe()}: {problems}"


def test_a_crash_while_the_writer_decides_edits_still_answers_the_caller(
    crash_factory: Any,
) -> None:
    """Found by the reader oracle's live crashes (Proof III): the power going out while
    the writer reads the shard to decide a write (a SimulatedCrash from its pread) must
    reach the caller as an exception; a writer that dies holding a request it took off
    the queue leaves its caller waiting forever."""
    fs = SimFS()
    db = crash_factory(DB_PATH, fs=fs, shards=1)
    db.bulk_docs([{"_id": f"doc{i}", "n": i} for i in range(50)])
    db.close()
    db = crash_factory(DB_PATH, fs=fs, shards=1)  # a cold node cache: deciding must pread
    fs.halt()
    answers: list[BaseException] = []

    def put() -> None:
        try:
            db.put({"_id": "doc7", "n": 0})
        except BaseException as exc:
            answers.append(exc)

    caller = threading.Thread(target=put, daemon=True)
    caller.start()
    caller.join(10)
    assert not caller.is_alive(), "the put got no answer: the writer died holding it"
    assert answers, "a write acknowledged after the machine crashed"


def test_database_directory_entry_is_made_durable(crash_factory: Any) -> None:
    workload = Workload(5, 2, ((("put", "doc0", {"n": 0}, "auto"),),), ("doc0",))
    rec = record(workload, factory=crash_factory, strict_mkdir=True)
    summary = Summary()
    check_recording(rec, summary, factory=crash_factory, kinds=["drop"], steps=[len(rec.ops)])
    assert summary.ok, summary.report()


@pytest.mark.slow
def test_campaign_long(crash_factory: Any, record_property: Any) -> None:
    summary = run_campaign(crash_factory, budget=300.0, seed=1, progress=print)
    _checked(summary, record_property)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_every_step_of_larger_workloads(
    seed: int, crash_factory: Any, record_property: Any
) -> None:
    workload = make_workload(seed, ops=80, clients=4, shards=3, compactions=2)
    rec = record(workload, factory=crash_factory)
    summary = Summary()
    check_recording(rec, summary, factory=crash_factory, samples=6, seed=seed)
    _checked(summary, record_property)


def test_first_shard_headers_are_durable_before_the_metadata(crash_factory: Any) -> None:
    """Regression (found by this suite): a new shard's first header was written after
    settee.meta was durable, so a garbled unsynced header made a fresh database
    unopenable. Now every shard file has a synced header before the metadata rename."""
    workload = Workload(1, 1, ((("put", "doc0", {"n": 0}, "auto"),),), ("doc0",))
    rec = record(workload, factory=crash_factory)
    meta = next(i for i, op in enumerate(rec.ops) if op.kind == "rename" and "meta" in op.path)
    shards = {op.path for op in rec.ops if op.path.endswith(".settee")}
    for path in shards:
        synced = [i for i, op in enumerate(rec.ops) if op.kind == "fsync" and op.path == path]
        assert synced and synced[0] < meta, (path, synced, meta)


class _PauseFirstCopyWrite(FileSystemWrapper):
    """Blocks each named thread at its first write to a ``.compact`` file until released."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.paused = {name: threading.Event() for name in ("A", "B")}
        self.release = {name: threading.Event() for name in ("A", "B")}

    def intercept(self, op: str, path: str, call: Any) -> Any:
        name = threading.current_thread().name
        first = name in self.paused and not self.paused[name].is_set()
        if op == "append" and path.endswith(".compact") and first:
            self.paused[name].set()
            assert self.release[name].wait(10), "test deadlock"
        return call()


def test_concurrent_compactions_keep_data(crash_factory: Any) -> None:
    fs = _PauseFirstCopyWrite(SimFS())
    db = crash_factory(DB_PATH, fs=fs, shards=1)
    for i in range(5):
        db.put({"_id": f"doc{i}", "n": i})
    errors: list[BaseException] = []

    def compact() -> None:
        try:
            db.compact()
        except BaseException as exc:
            errors.append(exc)

    a = threading.Thread(target=compact, name="A")
    b = threading.Thread(target=compact, name="B")
    a.start()
    assert fs.paused["A"].wait(10)
    b.start()
    # Regression (found by this suite): the two shared one target file. Now the
    # second waits for the first instead of deleting its file under it.
    assert not fs.paused["B"].wait(0.5)
    fs.release["A"].set()
    a.join(10)
    assert fs.paused["B"].wait(10)
    fs.release["B"].set()
    b.join(10)
    db.put({"_id": "after", "n": 5})  # acknowledged, so it must survive a reopen
    db.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = crash_factory(DB_PATH, fs=fs.inner, shards=1)
    try:
        assert again.info()["doc_count"] == 6
        assert not [e for e in errors if not isinstance(e, settee.SetteeError)], errors
    finally:
        again.close()
