"""Concurrent clients, their recorded histories, and the reference as the model.

A *scenario* is what Hypothesis draws: the options, and for each client a
short program of operation specs (``("put", id, body, use_rev)``, ``("get",
id)``, ...). A client turns each spec into a concrete call when it gets
there (an update names the last revision *this client* saw of the id, a
``revs_diff`` the revisions it learned and some never made), runs it, and
the :class:`Recorder` notes invocation and response on one logical clock.
The same clients serve the deterministic scheduler (``scheduler``) and the
real-threads stress run.

Checks on a finished run:

* :func:`check_history`: linearizability against :class:`ReferenceModel`
  (the reference store replayed), via ``linearizability.check``. A
  ``bulk_docs`` call is atomic per shard, not across shards (each shard
  commits on its own, as in clustered CouchDB), so it enters the history as
  one operation per shard it touches, with the call's interval. A client's
  later ``changes`` resume from the ``last_seq`` of its previous answer: each
  must list exactly what changed after the instant that answer was of.
* :func:`check_mvcc`: no read observed part of a batch. One client writes a
  *group* of ids that live in one shard, all of them in each ``bulk_docs``
  call, generation after generation; every read that shows group members
  must show them all at the same generation.
* :func:`check_closed`: the lifecycle. A client may ``close()`` the database
  mid-run; the model then answers "closed" to everything, and a call invoked
  after a close returned must raise a ``SetteeError`` saying so. ``compact()``
  is an operation too, per shard like ``bulk_docs`` (each shard compacts on
  its own): afterwards ``get(id, rev=<non-leaf>)`` finds no body.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

import settee.reference
from settee.proof.stateful.known_bugs import STEER_AROUND
from settee.proof.stateful.linearizability import CheckResult, Operation, check
from settee.proof.stateful.observe import contents, digest, outcome
from settee.spec.errors import SetteeError
from settee.spec.revs import rev_pos
from settee.spec.routing import shard_of

__all__ = [
    "ASKED_REVS",
    "IDS",
    "KNOWN_REVS",
    "PROBES",
    "REVS_DIFF_IDS",
    "Client",
    "Recorder",
    "ReferenceModel",
    "Scenario",
    "check_closed",
    "check_history",
    "check_mvcc",
    "group_ids",
    "has_purge",
    "purging_scenario",
    "random_scenario",
    "scenarios",
    "with_purges",
]

IDS = ("a", "b", "c")
SETUP = (("put", {"_id": "a", "v": 0}), ("put", {"_id": "b", "v": 0}))
WRITES = ("put", "delete", "bulk_docs", "purge")
#: Calls that change the model's state: the writes and the lifecycle.
CHANGES = (*WRITES, "compact", "close")


#: What a drawn ``revs_diff`` asks of each of its ids, chosen when the client gets
#: there (``Client.asked_rev``): none, one or both of the revisions this client
#: learned (``KNOWN_REVS``: the last it saw, the first), then one never made
#: (``PROBES``), one past the last seen (its possible ancestors: the leaves below it,
#: the seen one while it is a leaf) or past every revision a history makes (every
#: leaf), so that every id's answer shows where its tree stands.
KNOWN_REVS = ("seen", "oldest")
PROBES = ("next", "far")
ASKED_REVS = (*KNOWN_REVS, *PROBES)
#: The hash of the revisions the probes name: a made one has 32 hex digits.
UNMADE = "never"
#: The position of the ``"far"`` probe: no history here writes an id that often.
FAR = 999


def group_ids(shards: int, size: int = 3) -> tuple[str, ...]:
    """``size`` ids that all live in shard 0 (so one batch of them is one commit)."""
    found = (f"g{n}" for n in itertools.count() if shard_of(f"g{n}", shards) == 0)
    return tuple(itertools.islice(found, size))


def _always_in_the_group() -> tuple[str, ...]:
    """The group members at every shard count the scenarios draw (1 to 3)."""
    groups = [group_ids(shards) for shards in (1, 2, 3)]
    return tuple(i for i in groups[0] if all(i in group for group in groups))


#: The ids a drawn ``revs_diff`` asks about. Two members of the group: a batch landing
#: between the reads of the two (one commit, SEMANTICS §16) shows half applied to a
#: call that does not read every id at one instant (SEMANTICS §1), as a put landing
#: between two ids' reads after a put to the first does.
REVS_DIFF_IDS = (*IDS, *_always_in_the_group())


# -- scenarios -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scenario:
    """The options and every client's program; ``batches`` generations for the group."""

    options: dict[str, Any]
    programs: tuple[tuple[Any, ...], ...]
    batches: int
    #: Reads made through a second handle, ``settee.open(path, readonly=True)``,
    #: recorded on the same clock as every other client (empty: no such client),
    #: opened in this process or, with ``reader_process``, in another one.
    reader: tuple[Any, ...] = ()
    reader_process: bool = False
    #: The writer's HEADS file is deleted before the reader opens (deleting it loses
    #: nothing, FORMAT.md "HEADS"): the reader finds commits by scanning the files.
    reader_scans: bool = False

    @property
    def reader_client(self) -> int:
        """The readonly reader's client index (``clients_for``: the programs, the
        group writer when there are batches, then the reader)."""
        return len(self.programs) + (1 if self.batches else 0)

    def describe(self) -> str:
        lines = [f"options {self.options}, group batches {self.batches}"]
        lines += [f"client {i}: {list(p)}" for i, p in enumerate(self.programs)]
        if self.reader:
            where = "another process" if self.reader_process else "this process"
            how = ", HEADS deleted: it scans" if self.reader_scans else ""
            lines.append(f"readonly reader ({where}{how}): {list(self.reader)}")
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
        st.tuples(st.just("get_rev"), ids),
        # Range and group reads, and revs_diff over several ids, twice as likely: they
        # are what sees half a batch.
        st.tuples(st.just("all_docs")),
        st.tuples(st.just("group")),
        st.tuples(st.just("changes")),
        st.tuples(st.just("revs_diff"), _revs_diff_requests()),
        st.tuples(st.just("all_docs")),
        st.tuples(st.just("group")),
        st.tuples(st.just("changes")),
        st.tuples(st.just("revs_diff"), _revs_diff_requests()),
        st.tuples(st.just("info")),
        st.tuples(st.just("compact")),
        st.tuples(st.just("close")),
    )


def _revs_diff_requests() -> st.SearchStrategy[tuple[tuple[str, tuple[str, ...]], ...]]:
    """``((id, (asked, ...)), ...)`` (hashable and printable; ``Client.concrete`` names
    the revisions): distinct ids of ``REVS_DIFF_IDS``, each asked as ``ASKED_REVS`` says."""
    known = st.lists(st.sampled_from(KNOWN_REVS), max_size=2, unique=True)
    asked = st.tuples(known, st.sampled_from(PROBES)).map(lambda drawn: (*drawn[0], drawn[1]))
    pair = st.tuples(st.sampled_from(REVS_DIFF_IDS), asked)
    return st.lists(pair, min_size=1, max_size=len(REVS_DIFF_IDS), unique_by=lambda p: p[0]).map(
        tuple
    )


def scenarios(
    *,
    clients: tuple[int, int] = (2, 3),
    ops: tuple[int, int] = (1, 3),
    read_modes: tuple[str, ...] = ("parallel",),
) -> st.SearchStrategy[Scenario]:
    """Scenarios of ``clients`` clients with ``ops`` operations each, plus the group
    writer; in about half, the last client ends by closing the database while the
    others may still be working (``close`` may also come up anywhere)."""
    programs = st.tuples(
        st.lists(
            st.lists(_op_specs(), min_size=ops[0], max_size=ops[1]).map(tuple),
            min_size=clients[0],
            max_size=clients[1],
        ),
        st.booleans(),
    ).map(_closing)
    # Small B+tree nodes in most runs, so concurrent commits split and merge nodes.
    options = st.fixed_dictionaries(
        {
            "shards": st.integers(1, 3),
            "read_mode": st.sampled_from(read_modes),
            "node_size": st.sampled_from([128, 4096]),
        }
    )
    # The group writer always writes at least one batch: the MVCC check needs one to see.
    return st.builds(Scenario, options, programs, st.integers(1, 2)).map(_with_body_cache)


def _with_body_cache(scenario: Scenario) -> Scenario:
    """``scenario`` with no body cache, or (with small nodes) one of 700 bytes that
    evicts on nearly every read. Never the default: a read the cache answers makes
    no io step, and io steps are where the scheduler interleaves (a default cache
    halved the seeds that catch the fractured-read mutant). Derived, not drawn, so
    every seed draws the scenarios it drew before. The stress campaign's real
    threads run the default cache too (``random_scenario``)."""
    size = 700 if scenario.options["node_size"] == 128 else 0
    return dataclasses.replace(scenario, options={**scenario.options, "body_cache_bytes": size})


def _closing(drawn: tuple[list[tuple[Any, ...]], bool]) -> tuple[tuple[Any, ...], ...]:
    programs, closes = drawn
    if closes:
        programs[-1] = (*programs[-1], ("close",))
    return tuple(programs)


def random_scenario(
    rng: random.Random, *, read_mode: str = "parallel", clients: int = 3, ops: int = 3
) -> Scenario:
    """A seeded scenario without Hypothesis (the stress run draws many cheaply)."""

    def body() -> dict[str, Any]:
        return {"v": rng.randrange(4)}

    def spec() -> Any:
        doc_id = rng.choice(IDS)
        if rng.random() < 0.03:  # about one run in four closes the database midway
            return ("close",)
        kinds = ["put", "put", "delete", "bulk", "get", "get_rev", "all_docs", "group"]
        # revs_diff twice: drawn once, a mutant reading each id at its own instant was
        # caught in 28 of 400 runs of campaigns.run_stress; twice, in 55.
        kind = rng.choice([*kinds, "revs_diff", "revs_diff", "changes", "compact"])
        if kind == "put":
            return ("put", doc_id, body(), rng.random() < 0.7)
        if kind == "bulk":
            docs = [(rng.choice(IDS), body(), rng.random() < 0.7) for _ in range(rng.randint(1, 3))]
            return ("bulk", docs)
        if kind == "revs_diff":
            return _random_revs_diff(rng)
        if kind in ("delete", "get", "get_rev"):
            return (kind, doc_id)
        return (kind,)

    programs = tuple(tuple(spec() for _ in range(ops)) for _ in range(clients))
    options = {
        "shards": rng.randint(1, 3),
        "read_mode": read_mode,
        "node_size": rng.choice([128, 4096]),
        "body_cache_bytes": rng.choice([None, 700]),
    }
    closes = any(op == ("close",) for program in programs for op in program)
    reader: tuple[Any, ...] = ()
    if not closes and rng.random() < 0.5:  # a close would end the writer's handle only
        reads = ["get", "get_rev", "all_docs", "group", "revs_diff", "changes", "info"]
        reader = tuple(_read_spec(rng, rng.choice(reads), rng.choice(IDS)) for _ in range(ops + 2))
    other_process = bool(reader) and rng.random() < 0.5
    batches = rng.randint(1, 3)
    scans = bool(reader) and rng.random() < 0.25
    if scans and options["shards"] > 1:
        reader = _single_shard_reads(reader, options["shards"])
    return Scenario(options, programs, batches, reader, other_process, scans)


def _random_revs_diff(rng: random.Random) -> tuple[Any, ...]:
    """A seeded ``revs_diff`` spec, as ``_revs_diff_requests`` draws them, of two or
    more ids in a random order."""
    ids = rng.sample(REVS_DIFF_IDS, rng.randint(2, len(REVS_DIFF_IDS)))
    asked = [(*rng.sample(KNOWN_REVS, rng.randint(0, 2)), rng.choice(PROBES)) for _ in ids]
    return ("revs_diff", tuple(zip(ids, asked, strict=True)))


def with_purges(scenario: Scenario, rng: random.Random) -> Scenario:
    """``scenario`` with half its deletes made purges of the leaf the client last saw
    (SEMANTICS §19). Apart from ``random_scenario``, whose seeded draws the stress
    campaign's mutant catches depend on."""
    programs = tuple(
        tuple(("purge", op[1]) if op[0] == "delete" and rng.random() < 0.5 else op for op in p)
        for p in scenario.programs
    )
    return dataclasses.replace(scenario, programs=programs)


def has_purge(scenario: Scenario) -> bool:
    return any(op[0] == "purge" for program in scenario.programs for op in program)


def purging_scenario(rng: random.Random) -> Scenario:
    """A seeded scenario (``random_scenario``) in which ``with_purges`` made at least
    one delete a purge."""
    while True:
        scenario = with_purges(random_scenario(rng), rng)
        if has_purge(scenario):
            return scenario


def _single_shard_reads(reads: tuple[Any, ...], shards: int) -> tuple[Any, ...]:
    """``reads`` with every read over several shards made a ``get``, and every
    ``revs_diff`` asking only the ids in its first id's shard: a handle that scans
    for commits pins each shard on its own, so only its one-shard reads are one
    instant (SEMANTICS §1, "One instant per call"); the checker asks for that."""
    return tuple(_one_shard_read(read, IDS[i % len(IDS)], shards) for i, read in enumerate(reads))


def _one_shard_read(read: tuple[Any, ...], instead: str, shards: int) -> tuple[Any, ...]:
    """``read`` if it reads one shard; a ``revs_diff`` of the ids of its first id's
    shard; otherwise a ``get`` of ``instead``."""
    if read[0] in ("get", "get_rev"):
        return read
    if read[0] != "revs_diff":
        return ("get", instead)
    shard = shard_of(read[1][0][0], shards)
    return ("revs_diff", tuple(pair for pair in read[1] if shard_of(pair[0], shards) == shard))


def _read_spec(rng: random.Random, kind: str, doc_id: str) -> tuple[Any, ...]:
    if kind == "revs_diff":
        return _random_revs_diff(rng)
    return (kind, doc_id) if kind in ("get", "get_rev") else (kind,)


# -- recording ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    client: int
    input: Any
    call: int
    output: Any = None
    ret: int | None = None
    #: The message of a SetteeError the call raised (the output keeps only the class).
    message: str = ""


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
            f"{r.input!r} -> {r.output!r}" + (f" {r.message!r}" if r.message else "")
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
    ``seen`` is the last revision this client saw per id, ``oldest`` the first
    (``get_rev`` asks for it: once the id is updated, a non-leaf revision).
    """

    index: int
    program: tuple[Any, ...]
    group: tuple[str, ...]
    recorder: Recorder
    seen: dict[str, str] = field(default_factory=dict)
    before_call: Callable[[str], None] | None = None
    oldest: dict[str, str] = field(default_factory=dict)
    #: The ``last_seq`` of this client's last answered ``changes``, which its next
    #: ``changes`` resumes from.
    since: Any = None

    def __post_init__(self) -> None:
        self.oldest = {**self.seen, **self.oldest}

    def run(self, db: Any) -> None:
        for spec in self.program:
            input = self.concrete(spec)
            if self.before_call is not None:
                self.before_call(f"call {input[0]}")
            record = self.recorder.invoke(self.index, input)
            answer = outcome(lambda input=input, record=record: self._call(db, input, record))
            self.recorder.respond(record, answer)
            self.learn(answer)

    @staticmethod
    def _call(db: Any, input: Any, record: Record) -> Any:
        try:
            return perform(db, input)
        except SetteeError as exc:
            record.message = str(exc)
            raise

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
        if kind == "purge":  # the leaf this client last saw (a purge scenario's op)
            return ("purge", {spec[1]: [self.seen.get(spec[1], "1-a")]})
        if kind == "bulk":
            return ("bulk_docs", [self.doc(*d) for d in spec[1]], True)
        if kind == "get":
            return ("get", spec[1], {})
        if kind == "get_rev":
            return ("get", spec[1], {"rev": self.oldest.get(spec[1], "1-a")})
        if kind == "all_docs":
            # With the documents: rows and bodies must come from one instant (found by
            # mutation testing: bodies read after the rows, on a later snapshot, went
            # unseen while no concurrent read asked for a body along with its row).
            return ("all_docs", {"include_docs": True})
        if kind == "group":
            return ("all_docs", {"keys": list(self.group)})
        if kind == "batch":
            return ("bulk_docs", [self.doc(i, {"gen": spec[1]}, True) for i in self.group], True)
        if kind == "revs_diff":  # ((id, (rev or one of ASKED_REVS, ...)), ...): hashable
            return (
                "revs_diff",
                {doc_id: [self.asked_rev(doc_id, rev) for rev in revs] for doc_id, revs in spec[1]},
            )
        if kind == "changes" and self.since is not None:
            # A client's later changes resume from the token of its last answer, as a
            # follower of the feed does: they must list exactly what changed since the
            # instant that answer was of (found by mutation testing: a last_seq taken
            # from the shards' newest snapshots, past a write the answer did not list,
            # went unseen while every history listed the changes from 0).
            return ("changes", self.since)
        return (kind,)

    def asked_rev(self, doc_id: str, asked: str) -> str:
        """The revision a ``revs_diff`` spec names: itself if it is one (a fixed
        schedule's), else the one ``asked`` (one of ``ASKED_REVS``) picks from what
        this client learned of ``doc_id``. Of an id it never saw it knows no revision:
        it asks ``1-never`` for the ones it would have learned, and the far probe for
        ``"next"`` (where it stands is unknown to it)."""
        if asked not in ASKED_REVS:
            return asked
        seen = self.seen.get(doc_id)
        if asked == "seen" and seen is not None:
            return seen
        if asked == "oldest" and doc_id in self.oldest:
            return self.oldest[doc_id]
        if asked in KNOWN_REVS:
            return f"1-{UNMADE}"
        if asked == "next" and seen is not None:
            return f"{rev_pos(seen) + 1}-{UNMADE}"
        return f"{FAR}-{UNMADE}"

    def doc(self, doc_id: str, body: dict[str, Any], use_rev: bool) -> dict[str, Any]:
        doc = {"_id": doc_id, **body}
        if use_rev and doc_id in self.seen:
            doc["_rev"] = self.seen[doc_id]
        return doc

    def learn(self, answer: Any) -> None:
        if answer[0] != "ok":
            return
        value = answer[1]
        if isinstance(value, dict) and "last_seq" in value and "results" in value:
            self.since = value["last_seq"]
        rows = value if isinstance(value, list) else [value]
        for row in rows:
            if isinstance(row, dict) and isinstance(row.get("rev"), str):
                self.seen[row["id"]] = row["rev"]
            elif isinstance(row, dict) and isinstance(row.get("_rev"), str):
                self.seen[row["_id"]] = row["_rev"]
        for doc_id, rev in self.seen.items():
            self.oldest.setdefault(doc_id, rev)


def clients_for(scenario: Scenario, recorder: Recorder, seen: dict[str, str]) -> list[Client]:
    """The writer's clients (the programs, then the group writer), then the readonly
    reader's client, if the scenario has one."""
    group = group_ids(scenario.options["shards"])
    programs = list(scenario.programs)
    if scenario.batches:
        programs.append(tuple(("batch", gen) for gen in range(1, scenario.batches + 1)))
    if scenario.reader:
        programs.append(scenario.reader)
    return [Client(i, p, group, recorder, dict(seen)) for i, p in enumerate(programs)]


def run_setup(db: Any) -> dict[str, str]:
    """Apply ``SETUP`` sequentially; the revisions every client starts knowing."""
    return {doc["_id"]: db.put(doc)["rev"] for _, doc in SETUP}


# -- the model ----------------------------------------------------------------------------------


class ReferenceModel:
    """The reference store as a sequential model for ``linearizability.check``.

    A state is the tuple of changes applied so far (after ``SETUP``), as
    ``repr`` strings; the database for a state is built once by replaying
    them into a memory-only reference and cached. Two states are the same for
    memoisation when everything a reader can see is the same (``key``).

    Compaction is per shard (``("compact", shard)``), and the reference only
    compacts whole: so when ``compacting`` the model keeps one reference copy
    per shard, every change applied to each, a shard's compaction to its own
    copy, and a read of one document asks the copy of that document's shard.
    After ``("close",)`` the state stops changing and every call answers
    "closed".

    A ``changes`` resumed from the token of an earlier answer (``Client.concrete``)
    must list what changed since the instant that answer was of, which is where the
    search placed it: so an answer resumed from (its input ``("changes", None,
    MARK)``, see ``operations``) leaves a mark in the state, ``"mark MARK"``, and the
    resuming call (``("changes", MARK, None)``) asks the reference for its changes
    since the reference's own token at that mark.
    """

    def __init__(
        self, ids: list[str], revs_limit: int = 1000, shards: int = 1, compacting: bool = False
    ) -> None:
        self.ids = ids
        self.revs_limit = revs_limit
        self.shards = shards
        self.copies = shards if compacting else 1
        self._inputs: dict[str, Any] = {}
        self._dbs: dict[tuple[str, ...], tuple[list[Any], Any, frozenset[tuple[str, str]]]] = {}
        self._keys: dict[tuple[str, ...], str] = {}

    def init(self) -> tuple[str, ...]:
        return ()

    def _db(self, state: tuple[str, ...]) -> tuple[list[Any], Any, frozenset[tuple[str, str]]]:
        """The copies for ``state``, the last change's answer, and every (id, rev) made."""
        state = _unmarked(state)
        if state not in self._dbs:
            dbs = [
                settee.reference.open(None, revs_limit=self.revs_limit) for _ in range(self.copies)
            ]
            revs = {(i, r) for db in dbs for i, r in run_setup(db).items()}
            last = None
            for text in state:
                last = self._call(dbs, self._inputs[text])
                revs |= _created(last)
            self._dbs[state] = (dbs, last, frozenset(revs))
        return self._dbs[state]

    def _call(self, dbs: list[Any], input: Any) -> Any:
        """``input``'s answer from the copies (and its effect on them)."""
        if input[0] == "compact":
            return outcome(dbs[input[1] if self.copies > 1 else 0].compact)
        if input[0] not in CHANGES:
            routed = input[0] == "get" and self.copies > 1
            copy = dbs[shard_of(input[1], self.shards)] if routed else dbs[0]
            return outcome(lambda: perform(copy, input))
        answers = [outcome(lambda db=db: perform(db, input)) for db in dbs]
        # Invariant: the reference is deterministic, so every copy answers alike.
        assert all(a == answers[0] for a in answers), answers
        return answers[0]

    def _closed(self, state: tuple[str, ...]) -> bool:
        return bool(state) and self._inputs[state[-1]][0] == "close"

    def step(self, state: tuple[str, ...], input: Any) -> tuple[Any, Any]:
        if input[0] == "changes" and len(input) == 3:
            return self._changes(state, input)
        dbs = self._db(state)[0]
        if input[0] not in CHANGES or self._closed(state):
            return state, self._call(dbs, input)
        text = repr(input)
        self._inputs[text] = input
        new = (*state, text)
        return new, self._db(new)[1]

    def _changes(self, state: tuple[str, ...], input: Any) -> tuple[Any, Any]:
        """A ``changes`` that resumes from a mark, or leaves one, or both."""
        _, since, mark = input
        dbs = self._db(state)[0]
        if self._closed(state):
            return state, self._call(dbs, ("changes",))
        if since is None:
            answer = self._call(dbs, ("changes",))
        else:
            answer = self._resumed(state, f"mark {since}")
        if mark is None:
            return state, answer
        text = f"mark {mark}"
        self._inputs[text] = ("mark", mark)
        return (*state, text), answer

    def _resumed(self, state: tuple[str, ...], mark: str) -> Any:
        """``changes`` at ``state`` since the reference's token at ``mark``."""
        # Invariant: the answer a call resumes from returned before that call began,
        # so every order the search tries placed its mark first.
        before = state[: state.index(mark)]
        token = self._db(before)[0][0].changes()["last_seq"]
        return outcome(lambda: self._db(state)[0][0].changes(token))

    def key(self, state: tuple[str, ...]) -> str:
        if state not in self._keys:
            dbs, _, revs = self._db(state)
            if self._closed(state):
                self._keys[state] = "closed"
            else:
                order = [c["id"] for c in dbs[0].changes()["results"]]
                # Which revisions still have a body: compaction changes nothing else.
                bodies = [(i, r, self._call(dbs, ("get", i, {"rev": r}))) for i, r in sorted(revs)]
                trees = _trees(dbs[0], self.ids, revs)
                # What a call resuming from each mark would list from here on.
                marks = [
                    (m, normalise(("changes",), self._resumed(state, m)))
                    for m in state
                    if m.startswith("mark ")
                ]
                everything = (contents(dbs[0], self.ids), order, bodies, trees, marks)
                self._keys[state] = digest(everything)
        return self._keys[state]

    def matches(self, input: Any, model_output: Any, observed: Any) -> bool:
        return normalise(input, model_output) == normalise(input, observed)

    def close(self) -> None:
        for dbs, _, _ in self._dbs.values():
            for db in dbs:
                db.close()


def _trees(db: Any, ids: list[str], revs: frozenset[tuple[str, str]]) -> Any:
    """What a ``revs_diff`` answers from, for every id: which of the revisions made its
    tree holds, and its leaves (the possible ancestors of one past them all). The
    other parts of the key do not say it all: ``bodies`` answers NotFound alike for
    a purged revision and one whose body compaction dropped, and ``contents`` shows
    no deleted losing leaf. With it, no two states a ``revs_diff`` tells apart are
    memoised as one."""
    far = f"{FAR}-{UNMADE}"
    return db.revs_diff({i: [*(r for j, r in sorted(revs) if j == i), far] for i in ids})


def _unmarked(state: tuple[str, ...]) -> tuple[str, ...]:
    """``state`` without its marks (``ReferenceModel._changes``): the changes applied."""
    return tuple(text for text in state if not text.startswith("mark "))


def _created(answer: Any) -> set[tuple[str, str]]:
    """The (id, rev) pairs a write's answer reports as made."""
    if answer is None or answer[0] != "ok":
        return set()
    rows = answer[1] if isinstance(answer[1], list) else [answer[1]]
    return {
        (row["id"], row["rev"])
        for row in rows
        if isinstance(row, dict) and isinstance(row.get("rev"), str)
    }


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


def operations(records: list[Record], shards: int) -> list[Operation]:
    """The history for the checker; ``bulk_docs`` and ``compact`` split into one
    operation per shard they touch. A split call that failed may have taken
    effect in some shards and not others (``close()`` stopped it midway), so its
    parts are pending: each may or may not have happened. A ``changes`` resumed
    from an earlier answer's token, and that answer, are paired (``_resumes``)."""
    ops = []
    ordered = sorted(records, key=lambda r: r.call)
    resumes = _resumes(ordered)
    for r in ordered:
        input = resumes.get(r.call, r.input)
        parts = _parts(input, r.output, shards)
        failed = len(parts) > 1 and r.output is not None and r.output[0] != "ok"
        for part_input, output in parts:
            ops.append(Operation(r.client, part_input, output, r.call, None if failed else r.ret))
    return ops


def _resumes(records: list[Record]) -> dict[int, Any]:
    """The model's input (``ReferenceModel._changes``) for every ``changes`` call that
    resumed from a token, ``("changes", MARK, None)``, and for the answer it resumed
    from, ``("changes", None, MARK)`` (both, when a resumed answer is resumed from in
    turn); MARK is ``"the token of call N"``, N that answer's ``call``. By call;
    ``records`` in call order."""
    answered: dict[int, Record] = {}  # client -> its last changes answered
    since: dict[int, int | None] = {}
    marks: set[int] = set()
    for r in records:
        if r.input[0] != "changes":
            continue
        if len(r.input) == 2:
            earlier = answered.get(r.client)
            # Invariant: a client resumes from its own last answered changes (Client).
            assert earlier is not None and earlier.output[1]["last_seq"] == r.input[1], r
            since[r.call] = earlier.call
            marks.add(earlier.call)
        else:
            since[r.call] = None
        if r.output is not None and r.output[0] == "ok":
            answered[r.client] = r
    return {
        call: ("changes", _mark(resumed), _mark(call if call in marks else None))
        for call, resumed in since.items()
        if resumed is not None or call in marks
    }


def _mark(call: int | None) -> str | None:
    return None if call is None else f"the token of call {call}"


def _parts(input: Any, output: Any, shards: int) -> list[tuple[Any, Any]]:
    """``(input, output)`` of each shard's share of one call."""
    if input[0] == "compact":
        return [(("compact", s), output) for s in range(shards)]
    if input[0] != "bulk_docs":
        return [(input, output)]
    _, docs, new_edits = input
    by_shard: dict[int, list[int]] = {}
    for i, doc in enumerate(docs):
        by_shard.setdefault(shard_of(doc["_id"], shards), []).append(i)
    parts = []
    for indexes in by_shard.values():
        part_output = output
        if output is not None and output[0] == "ok" and new_edits:
            part_output = ("ok", [output[1][i] for i in indexes])
        parts.append((("bulk_docs", [docs[i] for i in indexes], new_edits), part_output))
    return parts


def check_history(recorder: Recorder, scenario: Scenario) -> CheckResult:
    """Linearizability of a finished run against the reference.

    With a readonly reader, two histories: the writer handle's calls, and the
    reader's reads with every write. Between two handles SEMANTICS §1 orders
    acknowledged writes only: a write in flight may show in one handle a moment
    before the other (HEADS and the writer's own snapshots are published one
    after the other; a scanning reader sees a header before its fsync returns),
    so a reader's read and a writer-side read are not ordered by each other."""
    records = recorder.records
    reader = scenario.reader_client
    if not scenario.reader or not any(r.client == reader for r in records):
        return _linearizable(records, scenario)
    writer_side = _linearizable([r for r in records if r.client != reader], scenario)
    if writer_side.ok is not True:
        return writer_side
    reader_side = [r for r in records if r.client == reader or r.input[0] in CHANGES]
    verdict = _linearizable(reader_side, scenario)
    verdict.explored += writer_side.explored
    return verdict


def _linearizable(records: list[Record], scenario: Scenario) -> CheckResult:
    shards = scenario.options["shards"]
    ids = sorted({*IDS, *group_ids(shards)})
    compacting = any(r.input[0] == "compact" for r in records)
    model = ReferenceModel(ids, scenario.options.get("revs_limit", 1000), shards, compacting)
    try:
        return check(model, operations(records, shards))
    finally:
        model.close()


def check_closed(recorder: Recorder) -> list[str]:
    """A call invoked after a ``close()`` returned must fail saying the database is
    closed, and no plain ``SetteeError`` (these workloads have no other cause) may
    say anything else."""
    problems = []
    closes = [r.ret for r in recorder.records if r.input[0] == "close" and r.ret is not None]
    closed_at = min(closes, default=None)
    for r in recorder.records:
        if r.output is None:
            continue
        refused = r.output[:2] == ("error", "SetteeError")
        if refused and "closed" not in r.message:
            problems.append(f"client {r.client} {r.input!r} raised SetteeError({r.message!r})")
        elif not refused and closed_at is not None and r.call > closed_at and r.input[0] != "close":
            problems.append(
                f"client {r.client} {r.input!r} answered {r.output!r} after close() returned"
            )
    return problems


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
