"""Turning answers into comparable values.

* :func:`outcome` runs a call and returns what it answered or which settee
  error class it raised (and, for ``NotFound``, the reason), so engine and
  reference can be compared call by call.
* :func:`contents` reads everything a client can see about a set of ids
  through the public API (no tokens, no sizes); :func:`digest` hashes it and
  :func:`diff` explains a mismatch.
* :class:`ChangesBook` checks ``changes`` by the guarantees of SEMANTICS.md §9
  instead of by token values, which are opaque and differ between
  implementations.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from settee.proof.stateful.watchdog import Hung, beat
from settee.spec.errors import BadRequest, Conflict, CorruptionError, NotFound, SetteeError
from settee.spec.routing import shard_of

__all__ = [
    "ChangesBook",
    "Current",
    "Outcome",
    "contents",
    "current_changes",
    "diff",
    "digest",
    "error_name",
    "outcome",
]

Outcome = tuple[Any, ...]
"""``("ok", value)`` or ``("error", class name, reason)``."""

_CLASSES = (Conflict, NotFound, BadRequest, CorruptionError, SetteeError)


def error_name(exc: BaseException) -> str:
    """The most specific settee error class of ``exc``; foreign errors keep their own name
    (prefixed ``!``) so that an engine crashing with ``TypeError`` never matches."""
    for cls in _CLASSES:
        if isinstance(exc, cls):
            return cls.__name__
    return f"!{type(exc).__name__}"


def outcome(call: Callable[[], Any]) -> Outcome:
    """Run ``call``: ``("ok", result)`` or ``("error", class, reason)``.

    The reason is kept only for ``NotFound`` ("missing"/"deleted"), the one
    error whose reason the contract fixes.
    """
    beat()
    try:
        return ("ok", call())
    except Hung:
        raise  # the call did not return: a failure, not an answer
    except Exception as exc:  # every error is an answer to compare, not a test failure
        reason = exc.reason if isinstance(exc, NotFound) else ""
        return ("error", error_name(exc), reason)


def contents(db: Any, ids: Iterable[str]) -> dict[str, Any]:
    """Everything a reader sees about ``ids`` (and every live doc), minus tokens and sizes:
    a live document's winner is read with its attachments' bytes, so a chunk that is
    lost or wrong shows here, not only its stub."""
    ids = sorted(set(ids))
    info = db.info()
    changes = db.changes(include_docs=True)["results"]
    docs = {}
    for row in db.all_docs(keys=ids)["rows"]:
        if "error" not in row and not row["value"].get("deleted"):
            docs[row["id"]] = db.get(row["id"], revs=True, conflicts=True, attachments=True)
    return {
        "counts": (info["doc_count"], info["doc_del_count"]),
        "all_docs": db.all_docs(include_docs=True),
        "keys": db.all_docs(keys=ids, include_docs=True),
        "changes": sorted(
            (c["id"], c["changes"], c.get("deleted", False), repr(c.get("doc"))) for c in changes
        ),
        "docs": docs,
    }


def digest(value: Any) -> str:
    """A short stable hash of a ``contents`` value."""
    return hashlib.sha256(repr(value).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def diff(left: Any, right: Any, path: str = "") -> list[str]:
    """Where two answers differ, as ``path: left != right`` lines (at most 20)."""
    out: list[str] = []
    _diff(left, right, path or "$", out)
    return out[:20]


def _diff(left: Any, right: Any, path: str, out: list[str]) -> None:
    if isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(set(left) | set(right), key=repr):
            if key not in left or key not in right:
                out.append(
                    f"{path}.{key}: {left.get(key, '<absent>')!r} != {right.get(key, '<absent>')!r}"
                )
            else:
                _diff(left[key], right[key], f"{path}.{key}", out)
    elif (
        isinstance(left, list | tuple)
        and isinstance(right, list | tuple)
        and len(left) == len(right)
    ):
        for i, (a, b) in enumerate(zip(left, right, strict=True)):
            _diff(a, b, f"{path}[{i}]", out)
    elif left != right:
        out.append(f"{path}: {left!r} != {right!r}")


# -- changes ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Current:
    """The reference's view of every document's latest change.

    ``order`` is the ids in change order; ``entry[id]`` is ``(identity, rev,
    deleted, doc)`` where ``identity`` names that latest change (the
    reference's own seq, used only for equality).
    """

    order: tuple[str, ...]
    entry: dict[str, tuple[Any, str, bool, Any]]

    def pairs(self) -> frozenset[tuple[str, Any]]:
        return frozenset((i, e[0]) for i, e in self.entry.items())

    def pair(self, doc_id: str) -> tuple[str, Any]:
        return (doc_id, self.entry[doc_id][0])


def current_changes(reference: Any) -> Current:
    """Read :class:`Current` from the reference (the model)."""
    results = reference.changes(include_docs=True)["results"]
    entry = {
        r["id"]: (r["seq"], r["changes"][0]["rev"], r.get("deleted", False), r.get("doc"))
        for r in results
    }
    return Current(tuple(r["id"] for r in results), entry)


class ChangesBook:
    """Tokens one implementation returned, each with the changes it covers.

    A token covers the latest changes (``(id, identity)`` pairs) that resuming
    from it must not return again: everything current for ``last_seq`` of an
    uncut list, ``info()["update_seq"]`` and ``"now"``; for an entry's ``seq``
    (and the ``last_seq`` of a cut list), what the call's own ``since`` covered
    plus the entries up to it. SEMANTICS.md §9 then fixes the answer to
    ``changes(since=T)`` as a set: every document whose latest change ``T``
    does not cover, each once (resume never misses; paging returns each
    document once in total).
    """

    def __init__(self, shards: int) -> None:
        self.shards = shards
        self.tokens: list[tuple[Any, frozenset[tuple[str, Any]]]] = [(0, frozenset())]

    def add(self, token: Any, covered: frozenset[tuple[str, Any]], keep: int = 24) -> None:
        self.tokens.append((token, covered))
        if len(self.tokens) > keep:
            del self.tokens[1]

    def check(
        self,
        db: Any,
        index: int,
        limit: int | None,
        include_docs: bool,
        now: Current,
    ) -> list[str]:
        """Call ``changes(since=tokens[index], ...)`` on ``db``, check it against
        the guarantees, record the tokens it returned; return the problems."""
        since, covered = self.tokens[index] if index >= 0 else ("now", now.pairs())
        full = db.changes(since=since)
        answer = db.changes(since=since, limit=limit, include_docs=include_docs)
        problems = self._check_full(full["results"], covered, now)
        problems += self._check_limited(answer["results"], full["results"], limit, now)
        if include_docs:
            problems += [
                f"{r['id']}: doc {r.get('doc')!r} != {now.entry[r['id']][3]!r}"
                for r in answer["results"]
                if r["id"] in now.entry and r.get("doc") != now.entry[r["id"]][3]
            ]
        cut = limit is not None and len(full["results"]) > limit
        seen = set(covered)
        for row in answer["results"]:
            if row["id"] in now.entry:
                seen.add(now.pair(row["id"]))
            self.add(row["seq"], frozenset(seen))
        self.add(answer["last_seq"], frozenset(seen) if cut else now.pairs())
        again = db.changes(since=answer["last_seq"])["results"]
        expect_again = {i for i in now.entry if now.pair(i) not in (seen if cut else now.pairs())}
        if {r["id"] for r in again} != expect_again or len(again) != len(expect_again):
            problems.append(
                f"resuming from last_seq gave {sorted(r['id'] for r in again)}, "
                f"expected {sorted(expect_again)}"
            )
        return [f"changes(since={since!r}, limit={limit}): {p}" for p in problems]

    def _check_full(self, rows: list[dict[str, Any]], covered: Any, now: Current) -> list[str]:
        problems = []
        ids = [r["id"] for r in rows]
        if len(ids) != len(set(ids)):
            problems.append(f"a document is listed twice: {ids}")
        expected = {i for i in now.entry if now.pair(i) not in covered}
        if set(ids) != expected:
            problems.append(
                f"ids {sorted(set(ids))} != expected {sorted(expected)} "
                f"(missing {sorted(expected - set(ids))}, extra {sorted(set(ids) - expected)})"
            )
        for r in rows:
            if r["id"] not in now.entry:
                continue
            _, rev, deleted, _doc = now.entry[r["id"]]
            if r["changes"] != [{"rev": rev}] or r.get("deleted", False) != deleted:
                problems.append(
                    f"{r['id']}: {r['changes']} deleted={r.get('deleted')} "
                    f"!= {rev} deleted={deleted}"
                )
            if "deleted" in r and r["deleted"] is not True:
                problems.append(f"{r['id']}: 'deleted' present but not True")
        problems += self._check_order(ids, now)
        return problems

    def _check_order(self, ids: list[str], now: Current) -> list[str]:
        rank = {i: n for n, i in enumerate(now.order)}
        for shard in range(self.shards):
            mine = [i for i in ids if i in rank and shard_of(i, self.shards) == shard]
            if mine != sorted(mine, key=rank.__getitem__):
                return [f"shard {shard} lists {mine} out of change order"]
        return []

    def _check_limited(
        self,
        rows: list[dict[str, Any]],
        full: list[dict[str, Any]],
        limit: int | None,
        now: Current,
    ) -> list[str]:
        ids = [r["id"] for r in rows]
        full_ids = [r["id"] for r in full]
        want = len(full_ids) if limit is None else min(limit, len(full_ids))
        if len(ids) != want:
            return [f"{len(ids)} rows, expected {want}"]
        for shard in range(self.shards):
            mine = [i for i in ids if shard_of(i, self.shards) == shard]
            theirs = [i for i in full_ids if shard_of(i, self.shards) == shard]
            if mine != theirs[: len(mine)]:
                return [f"shard {shard}: limited rows {mine} are not a prefix of {theirs}"]
        return []
