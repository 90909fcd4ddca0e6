"""A linearizability checker: does some serial order explain a concurrent history?

A history is a list of :class:`Operation` s, each with the logical times of
its invocation and response. It is *linearizable* for a sequential
:class:`Model` when the operations can be ordered so that (1) an operation
that responded before another was invoked comes first, and (2) running the
model in that order gives every operation the output it observed.

The search is Wing & Gong's, with the memoisation Lowe added and Knossos and
Porcupine use: a DFS that at each point tries every operation that may come
next (no other pending operation responded before it was invoked), and never
revisits a ``(model state, set of operations done)`` pair. Operations that
never responded (``ret is None``) may take effect at any point after their
invocation, or not at all.

The model is any object with ``init()``, ``step(state, input) -> (state,
output)``, ``key(state)`` (hashable, equal for equivalent states) and
``matches(input, model_output, observed_output)``; ``history.ReferenceModel``
wraps the reference store.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["CheckResult", "Model", "Operation", "check"]


@dataclass(frozen=True, slots=True)
class Operation:
    """One call of one client: ``call``/``ret`` are logical times (``ret`` None:
    no response was seen, the call may or may not have taken effect)."""

    client: int
    input: Any
    output: Any
    call: int
    ret: int | None


class Model(Protocol):
    def init(self) -> Any: ...

    def step(self, state: Any, input: Any) -> tuple[Any, Any]: ...

    def key(self, state: Any) -> Hashable: ...

    def matches(self, input: Any, model_output: Any, observed: Any) -> bool: ...


@dataclass(slots=True)
class CheckResult:
    """``ok`` is True (an order was found: ``order`` lists operation indexes),
    False (none exists: ``detail`` says where every attempt got stuck) or None
    (the search gave up after ``max_states``)."""

    ok: bool | None
    order: list[int] | None = None
    explored: int = 0
    detail: str = ""
    stuck: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.ok)


def check(model: Model, history: Sequence[Operation], *, max_states: int = 200_000) -> CheckResult:
    """Search for a linearization of ``history`` under ``model``."""
    ops = list(history)
    n = len(ops)
    inf = float("inf")
    rets = [inf if op.ret is None else op.ret for op in ops]
    must = sum(1 << i for i, op in enumerate(ops) if op.ret is not None)
    by_call = sorted(range(n), key=lambda i: ops[i].call)
    visited: set[tuple[Hashable, int]] = set()
    best: tuple[int, list[int], Any] = (-1, [], None)
    stack: list[tuple[Any, int, list[int]]] = [(model.init(), 0, [])]
    explored = 0
    while stack:
        state, done, order = stack.pop()
        if done & must == must:
            return CheckResult(True, order, explored)
        explored += 1
        if explored > max_states:
            return CheckResult(None, None, explored, f"gave up after {max_states} states")
        if len(order) > best[0]:
            best = (len(order), order, state)
        horizon = min((rets[i] for i in range(n) if not done >> i & 1), default=inf)
        for i in reversed(by_call):
            if done >> i & 1 or ops[i].call > horizon:
                continue
            new_state, out = model.step(state, ops[i].input)
            if ops[i].ret is not None and not model.matches(ops[i].input, out, ops[i].output):
                continue
            mark = (model.key(new_state), done | 1 << i)
            if mark in visited:
                continue
            visited.add(mark)
            stack.append((new_state, done | 1 << i, [*order, i]))
    return CheckResult(False, None, explored, *_explain(model, ops, rets, best))


def _explain(
    model: Model, ops: list[Operation], rets: list[float], best: tuple[int, list[int], Any]
) -> tuple[str, list[str]]:
    """What the deepest attempt could not place next, and why."""
    _, order, state = best
    done = set(order)
    horizon = min((rets[i] for i in range(len(ops)) if i not in done), default=float("inf"))
    stuck = []
    for i, op in enumerate(ops):
        if i in done or op.call > horizon:
            continue
        _, out = model.step(state, op.input)
        stuck.append(
            f"#{i} client {op.client} {_short(op.input)}: observed {_short(op.output)}, "
            f"the model answers {_short(out)}"
        )
    prefix = " -> ".join(f"#{i}" for i in order) or "(nothing)"
    detail = (
        f"no serial order explains the history; the longest explained prefix is {prefix}, "
        "after which no candidate matches:\n  " + "\n  ".join(stuck)
    )
    return detail, stuck


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
