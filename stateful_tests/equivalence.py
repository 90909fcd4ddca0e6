"""The sequential proof: engine and reference driven by the same operations.

:class:`EquivalenceMachine` is a Hypothesis ``RuleBasedStateMachine`` (as in
Hypothesis's own ``DatabaseComparison``): every rule performs one public call
on both implementations and compares the answers (or the error classes);
``changes`` is compared through the guarantees of SEMANTICS.md §9 (see
``observe.ChangesBook``) because tokens are opaque. After every step an
invariant compares everything a reader can see, as a digest, with a diff on
mismatch. Reopen and compact are rules. The shard count (1-4), read mode,
and ``revs_limit`` are drawn once per run (``fsync`` is off: durability
is the crash tests' business).

:func:`equivalence_machine` binds the machine to an engine spec
(``"MODULE:CALLABLE"``); ``test_equivalence.py`` runs it.
"""

from __future__ import annotations

import contextlib
import shutil
from collections import Counter
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from settee.spec.errors import SetteeError
from stateful_tests.engines import REFERENCE, load_factory, scratch_dir
from stateful_tests.known_bugs import STEER_AROUND
from stateful_tests.observe import (
    ChangesBook,
    contents,
    current_changes,
    diff,
    digest,
    error_name,
    outcome,
)

__all__ = [
    "IDS",
    "KEYS",
    "STATS",
    "EquivalenceMachine",
    "bodies",
    "equivalence_machine",
]

#: A small id alphabet: collisions are frequent and ordering edges (case, code
#: points above the BMP, design docs, a space) come up in short runs.
IDS = ("a", "ab", "B", "b", "é", "😀", "_design/a", "a b")
#: Range bounds: every id plus keys between and around them.
KEYS = (*IDS, "", "a\uffff", "c", "Z", "ﬀ", "\U0010ffff")
HASHES = ("a", "b", "c", "ab", "0" * 32, "f" * 32)

#: Counters the campaigns report: steps run per rule name, examples run.
STATS: Counter[str] = Counter()


def bodies() -> st.SearchStrategy[dict[str, Any]]:
    values = st.one_of(
        st.integers(-2, 2),
        st.text("xé😀", max_size=2),
        st.booleans(),
        st.none(),
        st.lists(st.integers(0, 1), max_size=2),
        st.floats(-1, 1, allow_nan=False).filter(lambda f: f != int(f)),
    )
    return st.dictionaries(st.sampled_from(["x", "y", "é"]), values, max_size=2)


#: Calls both implementations must refuse with the same error class, leaving
#: the store unchanged.
INVALID_CALLS: tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...] = (
    ("put", ("not a dict",), {}),
    ("put", ({"_id": ""},), {}),
    ("put", ({"_id": 7},), {}),
    ("put", ({"x": 1},), {}),
    ("put", ({"_id": "_local/a"},), {}),
    ("put", ({"_id": "_design/"},), {}),
    ("put", ({"_id": "a", "_rev": "abc"},), {}),
    ("put", ({"_id": "a", "_rev": "01-a"},), {}),
    ("put", ({"_id": "a", "_rev": "1-ABC"},), {}),
    ("put", ({"_id": "a", "_attachments": {}},), {}),
    ("put", ({"_id": "a", "_deleted": "yes"},), {}),
    ("put", ({"_id": "a", "x": b"bytes"},), {}),
    ("put", ({"_id": "a", "x": {1, 2}},), {}),
    ("put", ({"_id": "a", "x": float("nan")},), {}),
    ("put", ({"_id": "a", "x": 2**64},), {}),
    ("put", ({"_id": "a", "x": {1: 2}},), {}),
    ("put", ({"_id": "a", "x": "\ud800"},), {}),
    ("put", ({"_id": "a", "_revisions": {"start": 1, "ids": []}},), {}),
    ("put", ({"_id": "a", "_rev": "2-b", "_revisions": {"start": 2, "ids": ["c", "a"]}},), {}),
    ("bulk_docs", ([{"_id": "a"}, {"_id": ""}],), {}),
    ("bulk_docs", ([{"_id": "b"}, "x"],), {}),
    ("bulk_docs", ({"_id": "a"},), {}),
    ("bulk_docs", ([{"_id": "a"}],), {"new_edits": 1}),
    ("bulk_docs", ([{"_id": "a", "_rev": "1-a"}, {"_id": "b"}],), {"new_edits": False}),
    ("delete", ("", "1-a"), {}),
    ("delete", ("a", "bad"), {}),
    ("delete", ("a", 5), {}),
    ("get", ("",), {}),
    ("get", (None,), {}),
    ("get", ("a",), {"rev": "x-1"}),
    ("get", ("a",), {"revs": 1}),
    ("get", ("a",), {"conflicts": "yes"}),
    ("all_docs", (), {"limit": -1}),
    ("all_docs", (), {"limit": True}),
    ("all_docs", (), {"skip": None}),
    ("all_docs", (), {"startkey": 3}),
    ("all_docs", (), {"keys": "a"}),
    ("all_docs", (), {"keys": ["a", 1]}),
    ("all_docs", (), {"keys": ["a"], "startkey": "a"}),
    ("all_docs", (), {"descending": None}),
    ("all_docs", (), {"inclusive_end": 0}),
    ("all_docs", (), {"include_docs": "no"}),
    ("changes", (), {"since": -1}),
    ("changes", (), {"since": "garbage"}),
    ("changes", (), {"since": None}),
    ("changes", (), {"since": True}),
    ("changes", (), {"since": 1.5}),
    ("changes", (), {"limit": -1}),
    ("changes", (), {"include_docs": 1}),
    ("revs_diff", (["a"],), {}),
    ("revs_diff", ({"a": "1-a"},), {}),
    ("revs_diff", ({"a": ["bad"]},), {}),
    ("revs_diff", ({1: ["1-a"]},), {}),
)


class EquivalenceMachine(RuleBasedStateMachine):
    """Engine (``engine_spec``) and reference side by side; see the module docstring."""

    engine_spec: ClassVar[str] = "settee:open"
    reference_spec: ClassVar[str] = REFERENCE

    def __init__(self) -> None:
        super().__init__()
        self.tmp = scratch_dir("settee-equiv-")
        self.eng: Any = None
        self.ref: Any = None
        self.options: dict[str, Any] = {}
        self.known: dict[str, list[str]] = {}
        STATS["examples"] += 1

    # -- lifecycle ----------------------------------------------------------------------------

    @initialize(
        shards=st.integers(1, 4),
        read_mode=st.sampled_from(["parallel", "serialized"]),
        revs_limit=st.sampled_from([1000, 3, 2]),
    )
    def open_both(self, shards: int, read_mode: str, revs_limit: int) -> None:
        # fsync only changes durability, which the crash tests prove; without it a
        # step costs microseconds instead of a disk flush.
        self.options = {
            "shards": shards,
            "read_mode": read_mode,
            "revs_limit": revs_limit,
            "fsync": False,
        }
        self._open()
        self.book_eng = ChangesBook(shards)
        self.book_ref = ChangesBook(shards)

    @initialize(
        ids=st.lists(st.sampled_from(IDS), unique=True, max_size=len(IDS)),
        body=bodies(),
    )
    def seed_documents(self, ids: list[str], body: dict[str, Any]) -> None:
        """Start most runs with live documents, so range queries have rows to get wrong."""
        self.both("bulk_docs", [{"_id": i, **body} for i in ids])

    def _open(self) -> None:
        self.eng = load_factory(self.engine_spec)(f"{self.tmp}/engine", **self.options)
        self.ref = load_factory(self.reference_spec)(f"{self.tmp}/reference", **self.options)

    def teardown(self) -> None:
        for db in (self.eng, self.ref):
            if db is not None:
                with contextlib.suppress(Exception):  # a failure is already being reported
                    db.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------------------

    def both(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``name`` on both; fail unless the outcomes are equal; return it."""
        STATS[name] += 1
        got = outcome(lambda: getattr(self.eng, name)(*args, **kwargs))
        want = outcome(lambda: getattr(self.ref, name)(*args, **kwargs))
        if got != want:
            lines = "\n  ".join(diff(got, want)) or f"{got!r} != {want!r}"
            raise AssertionError(
                f"engine and reference disagree on {name}{_call_text(args, kwargs)}:\n"
                f"  (engine != reference)\n  {lines}"
            )
        self._learn(want)
        return want

    def _learn(self, answer: Any) -> None:
        """Remember every revision an answer names, for later stale/leaf edits."""
        if isinstance(answer, dict):
            if isinstance(answer.get("id"), str) and isinstance(answer.get("rev"), str):
                self._know(answer["id"], answer["rev"])
            if isinstance(answer.get("_id"), str):
                for rev in [answer.get("_rev"), *answer.get("_conflicts", [])]:
                    if isinstance(rev, str):
                        self._know(answer["_id"], rev)
            for value in answer.values():
                self._learn(value)
        elif isinstance(answer, list | tuple):
            for value in answer:
                self._learn(value)

    def _know(self, doc_id: str, rev: str) -> None:
        revs = self.known.setdefault(doc_id, [])
        if rev not in revs:
            revs.append(rev)

    def _all_known(self) -> list[str]:
        return sorted({r for revs in self.known.values() for r in revs})

    def draw_rev(self, data: Any, doc_id: str, *, allow_none: bool = True) -> str | None:
        """A revision to name: the winner, any known rev of this doc (leaf or
        stale), one of another doc, a made-up one, or None."""
        # "none" creates (or recreates) and "winner" updates: weighted so that
        # most runs hold several live documents for the range queries.
        options: list[str] = ["made_up", "winner", "winner", "winner", "own"]
        if allow_none:
            options += ["none", "none", "none"]
        if self._all_known():
            options.append("foreign")
        kind = data.draw(st.sampled_from(options), label=f"rev kind for {doc_id!r}")
        if kind == "none":
            return None
        if kind == "winner":
            row = self.ref.all_docs(keys=[doc_id])["rows"][0]
            if "value" in row:
                return row["value"]["rev"]
            kind = "made_up"
        if kind == "own" and self.known.get(doc_id):
            return data.draw(st.sampled_from(self.known[doc_id]), label="rev")
        if kind == "foreign":
            return data.draw(st.sampled_from(self._all_known()), label="rev")
        pos = data.draw(st.integers(1, 4), label="pos")
        return f"{pos}-{data.draw(st.sampled_from(HASHES), label='hash')}"

    def draw_doc(self, data: Any) -> dict[str, Any]:
        doc_id = data.draw(st.sampled_from(IDS), label="id")
        doc: dict[str, Any] = {"_id": doc_id, **data.draw(bodies(), label="body")}
        rev = self.draw_rev(data, doc_id)
        if rev is not None:
            doc["_rev"] = rev
        if data.draw(st.integers(0, 4), label="deleted?") == 0:
            doc["_deleted"] = True
        if data.draw(st.integers(0, 9), label="output-only field?") == 0:
            doc["_conflicts"] = []
        return doc

    def draw_history(self, data: Any) -> dict[str, Any]:
        """A replicated document (``new_edits=False``): a path of invented
        revisions on top of a known one (or of nothing: a new root), given as
        ``_revisions`` or a bare ``_rev``, possibly cut so that it starts a
        disconnected branch."""
        doc_id = data.draw(st.sampled_from(IDS), label="id")
        base = self.draw_rev(data, doc_id)
        start = 0 if base is None else int(base.split("-")[0])
        length = data.draw(st.integers(0 if base else 1, 5), label="new revisions")
        path = [
            f"{start + n}-{data.draw(st.sampled_from(HASHES), label='hash')}"
            for n in range(length, 0, -1)
        ]
        if base is not None and data.draw(st.booleans(), label="include base"):
            path.append(base)
        if not path:
            path = [base or "1-a"]
        doc: dict[str, Any] = {"_id": doc_id, **data.draw(bodies(), label="body")}
        hashes = [r.split("-", 1)[1] for r in path]
        if len(path) == 1 and data.draw(st.booleans(), label="bare _rev"):
            doc["_rev"] = path[0]
        else:
            doc["_revisions"] = {"start": int(path[0].split("-")[0]), "ids": hashes}
            if data.draw(st.booleans(), label="also _rev"):
                doc["_rev"] = path[0]
        if data.draw(st.integers(0, 3), label="deleted?") == 0:
            doc["_deleted"] = True
        for rev in path:
            self._know(doc_id, rev)
        return doc

    # -- writes -------------------------------------------------------------------------------

    @rule(data=st.data())
    def put(self, data: Any) -> None:
        self.both("put", self.draw_doc(data))

    @rule(data=st.data())
    def delete(self, data: Any) -> None:
        doc_id = data.draw(st.sampled_from(IDS), label="id")
        self.both("delete", doc_id, self.draw_rev(data, doc_id))

    @rule(data=st.data())
    def bulk_docs(self, data: Any) -> None:
        docs = [self.draw_doc(data) for _ in range(data.draw(st.integers(0, 5), label="docs"))]
        self.both("bulk_docs", docs)

    @rule(data=st.data())
    def replicate(self, data: Any) -> None:
        docs = [self.draw_history(data) for _ in range(data.draw(st.integers(1, 3), label="docs"))]
        if "replicated-known-leaf" in STEER_AROUND:
            docs = self._steer_known_leaves(docs)
        self.both("bulk_docs", docs, new_edits=False)

    def _steer_known_leaves(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        steered = []
        added: set[tuple[str, str]] = set()
        for doc in docs:
            path = _path_of(doc)
            known = (doc["_id"], path[0]) in added or not self.ref.revs_diff(
                {doc["_id"]: [path[0]]}
            )
            if known:
                doc = {k: v for k, v in doc.items() if k != "_revisions"} | {"_rev": path[0]}
            added.update((doc["_id"], r) for r in _path_of(doc))
            steered.append(doc)
        return steered

    # -- reads --------------------------------------------------------------------------------

    @rule(data=st.data(), revs=st.booleans(), conflicts=st.booleans())
    def get(self, data: Any, revs: bool, conflicts: bool) -> None:
        doc_id = data.draw(st.sampled_from(IDS), label="id")
        self.both("get", doc_id, rev=self.draw_rev(data, doc_id), revs=revs, conflicts=conflicts)

    @rule(
        startkey=st.none() | st.sampled_from(KEYS),
        endkey=st.none() | st.sampled_from(KEYS),
        include_docs=st.booleans(),
        limit=st.none() | st.integers(0, 4),
        skip=st.just(0) | st.integers(0, 4),
        descending=st.booleans(),
        inclusive_end=st.booleans(),
    )
    def all_docs_range(self, **query: Any) -> None:
        self.both("all_docs", **query)

    @rule(
        keys=st.lists(st.sampled_from(KEYS), max_size=6),
        include_docs=st.booleans(),
        limit=st.none() | st.integers(0, 4),
        skip=st.integers(0, 3),
        descending=st.booleans(),
        empty_bounds=st.booleans(),
    )
    def all_docs_keys(self, keys: list[str], empty_bounds: bool, **query: Any) -> None:
        if empty_bounds and not keys:  # keys=[] with bounds is allowed
            query.update(startkey="a", endkey="b")
        self.both("all_docs", keys=keys, **query)

    @rule(
        data=st.data(),
        limit=st.none() | st.integers(0, 3),
        include_docs=st.booleans(),
    )
    def changes(self, data: Any, limit: int | None, include_docs: bool) -> None:
        index = data.draw(st.integers(-1, len(self.book_eng.tokens) - 1), label="since token")
        STATS["changes"] += 1
        now = current_changes(self.ref)
        for side, db, book in (
            ("engine", self.eng, self.book_eng),
            ("ref", self.ref, self.book_ref),
        ):
            problems = book.check(db, index, limit, include_docs, now)
            assert not problems, f"{side} breaks the changes guarantees:\n  " + "\n  ".join(
                problems
            )

    @rule(data=st.data())
    def revs_diff(self, data: Any) -> None:
        request = {}
        for _ in range(data.draw(st.integers(0, 3), label="ids")):
            doc_id = data.draw(st.sampled_from(IDS), label="id")
            revs = [self.draw_rev(data, doc_id, allow_none=False) for _ in range(3)]
            request[doc_id] = data.draw(st.lists(st.sampled_from(revs), max_size=4), label="revs")
        self.both("revs_diff", request)

    @rule()
    def info(self) -> None:
        STATS["info"] += 1
        got, want = self.eng.info(), self.ref.info()
        assert (got["doc_count"], got["doc_del_count"]) == (
            want["doc_count"],
            want["doc_del_count"],
        ), f"info counts differ: engine {got} reference {want}"
        now = current_changes(self.ref).pairs()
        self.book_eng.add(got["update_seq"], now)
        self.book_ref.add(want["update_seq"], now)

    # -- lifecycle rules ----------------------------------------------------------------------

    @rule(method=st.sampled_from(["put", "get", "all_docs", "changes", "info", "compact"]))
    def reopen(self, method: str) -> None:
        STATS["reopen"] += 1
        self.eng.close()
        self.ref.close()
        self.eng.close()  # idempotent
        args: dict[str, tuple[Any, ...]] = {"put": ({"_id": "a"},), "get": ("a",)}
        for side, db in (("engine", self.eng), ("reference", self.ref)):
            try:
                getattr(db, method)(*args.get(method, ()))
            except SetteeError as exc:
                assert error_name(exc) == "SetteeError", f"{side}: closed db raised {exc!r}"
            else:
                raise AssertionError(f"{side}: {method} on a closed database did not raise")
        self._open()

    @rule()
    def compact(self) -> None:
        self.both("compact")

    @rule(call=st.sampled_from(INVALID_CALLS))
    def invalid(self, call: tuple[str, tuple[Any, ...], dict[str, Any]]) -> None:
        name, args, kwargs = call
        before = (self._digest(self.eng), self._digest(self.ref))
        answer = self.both(name, *args, **kwargs)
        assert answer[0] == "error", f"{name}{_call_text(args, kwargs)} was accepted: {answer}"
        after = (self._digest(self.eng), self._digest(self.ref))
        assert before == after, f"{name}{_call_text(args, kwargs)} changed the store"

    # -- the invariant ------------------------------------------------------------------------

    def _digest(self, db: Any) -> str:
        return digest(contents(db, self.known.keys() | set(IDS)))

    @precondition(lambda self: self.eng is not None)
    @invariant()
    def same_contents(self) -> None:
        ids = self.known.keys() | set(IDS)
        got, want = contents(self.eng, ids), contents(self.ref, ids)
        if digest(got) != digest(want):
            lines = "\n  ".join(diff(got, want))
            raise AssertionError(f"engine and reference contents differ:\n  {lines}")


def _path_of(doc: dict[str, Any]) -> list[str]:
    if "_revisions" in doc:
        start, ids = doc["_revisions"]["start"], doc["_revisions"]["ids"]
        return [f"{start - n}-{h}" for n, h in enumerate(ids)]
    return [doc["_rev"]]


def _call_text(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"({', '.join(parts)})"


def equivalence_machine(engine_spec: str) -> type[EquivalenceMachine]:
    """The machine bound to the engine ``engine_spec`` (``"MODULE:CALLABLE"``)."""
    return type(
        f"EquivalenceMachine[{engine_spec}]",
        (EquivalenceMachine,),
        {"engine_spec": engine_spec, "__module__": __name__},
    )
