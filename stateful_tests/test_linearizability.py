"""Unit tests of the linearizability checker on a register and a counter.

Histories are written as (client, input, output, call, ret); both accepted
and rejected ones, so the checker is known to bite before it judges settee.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stateful_tests.linearizability import Operation, check


class Register:
    """A single register: ("write", v) -> None, ("read",) -> value, ("cas", a, b) -> bool."""

    def init(self) -> Any:
        return 0

    def step(self, state: Any, input: Any) -> tuple[Any, Any]:
        if input[0] == "write":
            return input[1], None
        if input[0] == "cas":
            return (input[2], True) if state == input[1] else (state, False)
        return state, state

    def key(self, state: Any) -> Any:
        return state

    def matches(self, input: Any, model_output: Any, observed: Any) -> bool:
        return model_output == observed


def ops(*rows: tuple[int, Any, Any, int, int | None]) -> list[Operation]:
    return [Operation(*row) for row in rows]


def test_sequential_history_is_linearizable() -> None:
    h = ops((0, ("write", 1), None, 0, 1), (0, ("read",), 1, 2, 3))
    result = check(Register(), h)
    assert result.ok and result.order == [0, 1]


def test_overlapping_read_may_see_either_value() -> None:
    for seen in (0, 1):
        h = ops((0, ("write", 1), None, 0, 3), (1, ("read",), seen, 1, 2))
        assert check(Register(), h).ok


def test_stale_read_after_completed_write_is_rejected() -> None:
    h = ops((0, ("write", 1), None, 0, 1), (1, ("read",), 0, 2, 3))
    result = check(Register(), h)
    assert result.ok is False
    assert "#1 client 1" in result.detail


def test_read_of_a_value_never_written_is_rejected() -> None:
    h = ops((0, ("write", 1), None, 0, 5), (1, ("read",), 2, 1, 2))
    assert check(Register(), h).ok is False


def test_reads_must_agree_on_one_order() -> None:
    """Two readers that saw two concurrent writes in opposite orders (the
    classic non-linearizable pattern)."""
    h = ops(
        (0, ("write", 1), None, 0, 10),
        (1, ("write", 2), None, 1, 10),
        (2, ("read",), 1, 2, 3),
        (2, ("read",), 2, 4, 5),
        (3, ("read",), 2, 2, 3),
        (3, ("read",), 1, 4, 5),
    )
    assert check(Register(), h).ok is False


def test_two_successful_cas_from_the_same_value_are_rejected() -> None:
    """A lost update: both clients swapped 0 for their value."""
    h = ops((0, ("cas", 0, 1), True, 0, 3), (1, ("cas", 0, 2), True, 1, 2))
    assert check(Register(), h).ok is False
    h = ops((0, ("cas", 0, 1), True, 0, 3), (1, ("cas", 0, 2), False, 1, 2))
    assert check(Register(), h).ok


def test_pending_operation_may_or_may_not_take_effect() -> None:
    base = [(0, ("write", 1), None, 0, None)]
    assert check(Register(), ops(*base, (1, ("read",), 1, 1, 2))).ok
    assert check(Register(), ops(*base, (1, ("read",), 0, 1, 2))).ok
    assert check(Register(), ops(*base, (1, ("read",), 7, 1, 2))).ok is False


def test_memoisation_keeps_wide_histories_cheap() -> None:
    """Twelve fully concurrent writes of one value: 12! orders, few states."""
    h = ops(*[(i, ("write", 1), None, i, 100) for i in range(12)], (99, ("read",), 0, 101, 102))
    result = check(Register(), h)
    assert result.ok is False
    assert result.explored < 5000


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3)), min_size=1, max_size=8))
def test_any_serial_run_is_accepted(steps: list[tuple[bool, int]]) -> None:
    model, state, history = Register(), 0, []
    for t, (write, value) in enumerate(steps):
        state, out = model.step(state, ("write", value) if write else ("read",))
        history.append(
            Operation(0, ("write", value) if write else ("read",), out, 2 * t, 2 * t + 1)
        )
    assert check(model, history).ok


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=2, max_size=6), st.data())
def test_corrupting_one_read_of_a_serial_run_is_rejected(values: list[int], data: Any) -> None:
    history, t = [], 0
    for v in values:
        history.append(Operation(0, ("write", v), None, t, t + 1))
        history.append(Operation(0, ("read",), v, t + 2, t + 3))
        t += 4
    i = data.draw(st.integers(0, len(values) - 1))
    bad = history[2 * i + 1]
    history[2 * i + 1] = Operation(0, bad.input, bad.output + 1, bad.call, bad.ret)
    assert check(Register(), history).ok is False
