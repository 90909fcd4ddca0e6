"""Concurrent clients, their recorded histories, and the reference as the model.

A *scenario* is what Hypothesis draws: the options, and for each client a
short program of operation specs (``("put", id, body, use_rev)``, ``("get",
id)``, ...). A client turns each spec into a concrete call when it gets
there (an update names the last revision *this client* saw of the id), runs
it, and the :class:`Recorder` notes invocation and response on one logical
clock. The same clients serve the deterministic scheduler (``scheduler``)
and the real-threads stress run.

Checks on a finished run:

* :func:`check_history`: linearizability against :class:`ReferenceModel`
  (the reference store replayed), via ``linearizability.check``. A
  ``bulk_docs`` call is atomic per shard, not across shards (each shard
  commits on its own, as in clustered CouchDB), so it enters the history as
  one operation per shard it touches, with the call's interval.
* :func:`check_mvcc`: no read observed part of a batch. One client writes a
  *group* of ids that live in one shard, all of them in each ``bulk_docs``
  call, generation after generation; every read that shows group members
  must show them all at the same generation.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

import settee.reference
from settee.spec.routing import shard_of
from stateful_tests.known_bugs import STEER_AROUND
from stateful_tests.linearizability import CheckResult, Operation, check
from stateful_tests.observe import contents, digest, outcome

__all__ = [
    "IDS",
    "Client",
    "Recorder",
    "ReferenceModel",
    "Scenario",
    "check_history",
    "check_mvcc",
    "group_ids",
    "random_scenario",
    "scenarios",
]

IDS = ("a", "b", "c")
SETUP = (("put", {"_id": "a", "v": 0}), ("put", {"_id": "b", "v": 0}))
WRITES = ("put", "delete", "bulk_docs")


def group_ids(shards: int, size: int = 3) -> tuple[str, ...]:
    """``size`` ids that all live in shard 0 (so one batch of them is one commit)."""
    found = (f"g{n}" for n in itertools.count() if shard_of(f"g{n}", shards) == 0)
    return tuple(itertools.islice(found, size))


# -- scenarios -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scenario:
    """The options and every client's program; ``batches`` generations for the group."""

    options: dict[str, Any]
    programs: tuple[tuple[Any, ...], ...]
    batches: int

    def describe(self) -> str:
        lines = [f"options {self.options}, group batches {self.batches}"]
        lines += [f"client {i}: {list(p)}" for i, p in enumerate(self.programs)]
        return "\n".join(lines)


def _op_specs() -> st.SearchStrategy[Any]:
    ids = st.sampled_from(IDS)
    body = st.fixed_dictionaries({"v": st.integers(0, 3)})
    return st.one_of(
        st.tuples(st.just("put"), ids, body, st.booleans()),
        st.tuples(st.just("delete"), ids),
        st.tuples(
            st.just("bulk"), st.lists(st.tuples(ids, body, st.booleans()), min_size=1, max_size=3)
        ),
        st.tuples(st.just("get"), ids),
        st.tuples(st.just("all_docs")),
        st.tuples(st.just("group")),
        st.tuples(st.just("changes")),
        st.tuples(st.just("info")),
    )


def scenarios(
    *,
    clients: tuple[int, int] = (2, 3),
    ops: tuple[int, int] = (1, 3),
    read_modes: tuple[str, ...] = ("parallel",),
) -> st.SearchStrategy[Scenario]:
    """Scenarios of ``clients`` clients with ``ops`` operations each, plus the group writer."""
    programs = st.lists(
        st.lists(_op_specs(), min_size=ops[0], max_size=ops[1]).map(tuple),
        min_size=clients[0],
        max_size=clients[1],
    ).map(tuple)
    options = st.fixed_dictionaries(
        {"shards": st.integers(1, 3), "read_mode": st.sampled_from(read_modes)}
    )
    return st.builds(Scenario, options, programs, st.integers(0, 2))


def random_scenario(
    rng: random.Random, *, read_mode: str = "parallel", clients: int = 3, ops: int = 3
) -> Scenario:
    """A seeded scenario without Hypothesis (the stress run draws many cheaply)."""

    def body() -> dict[str, Any]:
        return {"v": rng.randrange(4)}

    def spec() -> Any:
        doc_id = rng.choice(IDS)
        kind = rng.choice(["put", "put", "delete", "bulk", "get", "all_docs", "group", "changes"])
        if kind == "put":
            return ("put", doc_id, body(), rng.random() < 0.7)
        if kind == "bulk":
            docs = [(rng.choice(IDS), body(), rng.random() < 0.7) for _ in range(rng.randint(1, 3))]
            return ("bulk", docs)
        if kind in ("delete", "get"):
            return (kind, doc_id)
        return (kind,)

    programs = tuple(tuple(spec() for _ in range(ops)) for _ in range(clients))
    options = {"shards": rng.randint(1, 3), "read_mode": read_mode}
    return Scenario(options, programs, rng.randint(1, 3))


# -- recording ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    client: int
    input: Any
    call: int
    output: Any = None
    ret: int | None = None


class Recorder:
    """Invocations and responses on one logical clock; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clock = itertools.count()
        self.records: list[Record] = []

    def invoke(self, client: int, input: Any) -> Record:
        with self._lock:
            record = Record(client, input, next(self._clock))
            self.records.append(record)
            return record

    def respond(self, record: Record, output: Any) -> None:
        with self._lock:
            record.output, record.ret = output, next(self._clock)

    def text(self) -> str:
        return "\n".join(
            f"  [{r.call:>3}..{'?' if r.ret is None else r.ret:>3}] client {r.client}: "
            f"{r.input!r} -> {r.output!r}"
            for r in sorted(self.records, key=lambda r: r.call)
        )


def perform(db: Any, input: Any) -> Any:
    """Run one concrete call (an input of the history) on ``db``."""
    name, *args = input
    if name in ("get", "all_docs"):
        return getattr(db, name)(*args[:-1], **args[-1])
    return getattr(db, name)(*args)


@dataclass(slots=True)
class Client:
    """Runs one program against ``db``, recording each call.

    ``before_call`` (the scheduler's hook) runs before each invocation.
    ``seen`` is the last revision this client saw per id.
    """

    index: int
    program: tuple[Any, ...]
    group: tuple[str, ...]
    recorder: Recorder
    seen: dict[str, str] = field(default_factory=dict)
    before_call: Callable[[str], None] | None = None

    def run(self, db: Any) -> None:
        for spec in self.program:
            input = self.concrete(spec)
            if self.before_call is not None:
                self.before_call(f"call {input[0]}")
            record = self.recorder.invoke(self.index, input)
            answer = outcome(lambda input=input: perform(db, input))
            self.recorder.respond(record, answer)
            self.learn(answer)

    def concrete(self, spec: Any) -> Any:
        kind = spec[0]
        if kind == "put":
            return ("put", self.doc(*spec[1:]))
        if kind == "delete" and "delete-existence-race" in STEER_AROUND:
            return (
                "put",
                {"_id": spec[1], "_rev": self.seen.get(spec[1], "1-a"), "_deleted": True},
            )
        if kind in ("delete", "real_delete"):  # real_delete: never steered
            return ("delete", spec[1], self.seen.get(spec[1], "1-a"))
        if kind == "bulk":
            return ("bulk_docs", [self.doc(*d) for d in spec[1]], True)
        if kind == "get":
            return ("get", spec[1], {})
        if kind == "all_docs":
            return ("all_docs", {})
        if kind == "group":
            return ("all_docs", {"keys": list(self.group)})
        if kind == "batch":
            return ("bulk_docs", [self.doc(i, {"gen": spec[1]}, True) for i in self.group], True)
        return (kind,)

    def doc(self, doc_id: str, body: dict[str, Any], use_rev: bool) -> dict[str, Any]:
        doc = {"_id": doc_id, **body}
        if use_rev and doc_id in self.seen:
            doc["_rev"] = self.seen[doc_id]
        return doc

    def learn(self, answer: Any) -> None:
        if answer[0] != "ok":
            return
        value = answer[1]
        rows = value if isinstance(value, list) else [value]
        for row in rows:
            if isinstance(row, dict) and isinstance(row.get("rev"), str):
                self.seen[row["id"]] = row["rev"]
            elif isinstance(row, dict) and isinstance(row.get("_rev"), str):
                self.seen[row["_id"]] = row["_rev"]


def clients_for(scenario: Scenario, recorder: Recorder, seen: dict[str, str]) -> list[Client]:
    group = group_ids(scenario.options["shards"])
    programs = list(scenario.programs)
    if scenario.batches:
        programs.append(tuple(("batch", gen) for gen in range(1, scenario.batches + 1)))
    return [Client(i, p, group, recorder, dict(seen)) for i, p in enumerate(programs)]


def run_setup(db: Any) -> dict[str, str]:
    """Apply ``SETUP`` sequentially; the revisions every client starts knowing."""
    return {doc["_id"]: db.put(doc)["rev"] for _, doc in SETUP}


# -- the model ----------------------------------------------------------------------------------


class ReferenceModel:
    """The reference store as a sequential model for ``linearizability.check``.

    A state is the tuple of writes applied so far (after ``SETUP``), as
    ``repr`` strings; the database for a state is built once by replaying
    them into a memory-only reference and cached. Two states are the same for
    memoisation when everything a reader can see is the same (``key``).
    """

    def __init__(self, ids: list[str], revs_limit: int = 1000) -> None:
        self.ids = ids
        self.revs_limit = revs_limit
        self._inputs: dict[str, Any] = {}
        self._dbs: dict[tuple[str, ...], tuple[Any, Any]] = {}
        self._keys: dict[tuple[str, ...], str] = {}

    def init(self) -> tuple[str, ...]:
        return ()

    def _db(self, state: tuple[str, ...]) -> tuple[Any, Any]:
        if state not in self._dbs:
            db = settee.reference.open(None, revs_limit=self.revs_limit)
            run_setup(db)
            last = None
            for text in state:
                last = outcome(lambda text=text: perform(db, self._inputs[text]))
            self._dbs[state] = (db, last)
        return self._dbs[state]

    def step(self, state: tuple[str, ...], input: Any) -> tuple[Any, Any]:
        if input[0] not in WRITES:
            db, _ = self._db(state)
            return state, outcome(lambda: perform(db, input))
        text = repr(input)
        self._inputs[text] = input
        new = (*state, text)
        return new, self._db(new)[1]

    def key(self, state: tuple[str, ...]) -> str:
        if state not in self._keys:
            db, _ = self._db(state)
            order = [c["id"] for c in db.changes()["results"]]
            self._keys[state] = digest((contents(db, self.ids), order))
        return self._keys[state]

    def matches(self, input: Any, model_output: Any, observed: Any) -> bool:
        return normalise(input, model_output) == normalise(input, observed)

    def close(self) -> None:
        for db, _ in self._dbs.values():
            db.close()


def normalise(input: Any, answer: Any) -> Any:
    """Drop what implementations may legitimately differ in: tokens and sizes."""
    if answer[0] != "ok":
        return answer
    value = answer[1]
    if input[0] == "changes":
        return (
            "ok",
            sorted(
                (c["id"], c["changes"][0]["rev"], c.get("deleted", False)) for c in value["results"]
            ),
        )
    if input[0] == "info":
        return ("ok", value["doc_count"], value["doc_del_count"])
    return answer


# -- checks ------------------------------------------------------------------------------------


def operations(recorder: Recorder, shards: int) -> list[Operation]:
    """The history for the checker; ``bulk_docs`` split into one operation per shard."""
    ops = []
    for r in sorted(recorder.records, key=lambda r: r.call):
        if r.input[0] != "bulk_docs":
            ops.append(Operation(r.client, r.input, r.output, r.call, r.ret))
            continue
        _, docs, new_edits = r.input
        parts: dict[int, list[int]] = {}
        for i, doc in enumerate(docs):
            parts.setdefault(shard_of(doc["_id"], shards), []).append(i)
        for indexes in parts.values():
            part_input = ("bulk_docs", [docs[i] for i in indexes], new_edits)
            output = r.output
            if r.output is not None and r.output[0] == "ok" and new_edits:
                output = ("ok", [r.output[1][i] for i in indexes])
            ops.append(Operation(r.client, part_input, output, r.call, r.ret))
    return ops


def check_history(recorder: Recorder, scenario: Scenario) -> CheckResult:
    """Linearizability of a finished run against the reference."""
    ids = sorted({*IDS, *group_ids(scenario.options["shards"])})
    model = ReferenceModel(ids, scenario.options.get("revs_limit", 1000))
    try:
        return check(model, operations(recorder, scenario.options["shards"]))
    finally:
        model.close()


def check_mvcc(recorder: Recorder, group: tuple[str, ...]) -> list[str]:
    """Reads that saw the group half-written (see the module docstring)."""
    problems = []
    for r in recorder.records:
        if r.output is None or r.output[0] != "ok" or r.input[0] not in ("all_docs", "changes"):
            continue
        value = r.output[1]
        rows = value["rows"] if r.input[0] == "all_docs" else value["results"]
        generations = {}
        for row in rows:
            if row.get("id") in group:
                rev = row["value"]["rev"] if "value" in row else row["changes"][0]["rev"]
                generations[row["id"]] = int(rev.split("-")[0])
        if len(generations) not in (0, len(group)):
            problems.append(f"client {r.client} {r.input!r} saw only {generations} of {group}")
        elif len(set(generations.values())) > 1:
            problems.append(f"client {r.client} {r.input!r} saw generations {generations}")
    return problems
