"""Unit tests of the linearizability checker on a register and a counter, and of
the reference model's lifecycle (close, per-shard compaction).

Histories are written as (client, input, output, call, ret); both accepted
and rejected ones, so the checker is known to bite before it judges settee.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import settee.reference
from settee.proof.stateful.history import (
    Record,
    Recorder,
    Scenario,
    check_closed,
    check_history,
    run_setup,
)
from settee.proof.stateful.linearizability import Operation, check


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


# -- the reference model's lifecycle --------------------------------------------------------------

CLOSED = ("error", "SetteeError", "")


def history(*rows: tuple[Any, ...]) -> Recorder:
    """A recorder holding ``(client, input, output, call, ret[, message])`` rows."""
    recorder = Recorder()
    for client, input, output, call, ret, *message in rows:
        recorder.records.append(Record(client, input, call, output, ret, *message))
    return recorder


def scenario(shards: int) -> Scenario:
    return Scenario({"shards": shards, "read_mode": "parallel"}, (), 0)


def test_calls_after_close_must_be_refused_saying_closed() -> None:
    info = ("ok", {"doc_count": 2, "doc_del_count": 0})
    close = (0, ("close",), ("ok", None), 0, 1)
    refused = history(close, (1, ("info",), CLOSED, 2, 3, "database is closed"))
    assert check_history(refused, scenario(1)).ok
    assert not check_closed(refused)
    answered = history(close, (1, ("info",), info, 2, 3))
    assert check_history(answered, scenario(1)).ok is False
    assert check_closed(answered)
    overlapping = history((0, ("close",), ("ok", None), 0, 3), (1, ("info",), info, 1, 2))
    assert check_history(overlapping, scenario(1)).ok
    vague = history((1, ("info",), CLOSED, 0, 1, "something broke"))
    assert check_closed(vague) == ["client 1 ('info',) raised SetteeError('something broke')"]


def test_a_split_write_stopped_by_close_may_have_landed_in_some_shards() -> None:
    """bulk_docs over shards 0 (b) and 1 (a) raised "closed" after shard 0 took its
    part; a reader saw that part before the close."""
    ref = settee.reference.open(None)
    revs = run_setup(ref)
    docs = [{"_id": "b", "_rev": revs["b"], "v": 1}, {"_id": "a", "_rev": revs["a"], "v": 1}]
    ref.put(docs[0])
    seen = ("ok", ref.get("b"))
    rows: tuple[tuple[Any, ...], ...] = (
        (0, ("bulk_docs", docs, True), CLOSED, 0, 5, "database is closed"),
        (1, ("get", "b", {}), seen, 1, 2),
        (2, ("close",), ("ok", None), 3, 4),
    )
    assert check_history(history(*rows), scenario(2)).ok
    assert check_history(history(*rows), scenario(1)).ok is False  # one shard: all or nothing


def test_compaction_is_one_operation_per_shard() -> None:
    """A reader saw shard 0 (b) compacted, then shard 1 (a) not yet, during one
    compact() call: fine per shard, impossible for an atomic compaction."""
    ref = settee.reference.open(None)
    old = run_setup(ref)
    puts = [{"_id": i, "_rev": old[i], "v": 1} for i in ("a", "b")]
    made = [("ok", ref.put(doc)) for doc in puts]
    body_of_a = ("ok", ref.get("a", rev=old["a"]))
    rows = (
        (0, ("put", puts[0]), made[0], 0, 1),
        (0, ("put", puts[1]), made[1], 2, 3),
        (1, ("compact",), ("ok", None), 4, 9),
        (2, ("get", "b", {"rev": old["b"]}), ("error", "NotFound", "missing"), 5, 6),
        (2, ("get", "a", {"rev": old["a"]}), body_of_a, 7, 8),
    )
    assert check_history(history(*rows), scenario(2)).ok
    assert check_history(history(*rows), scenario(1)).ok is False


def test_two_handles_are_ordered_by_acknowledged_writes_only() -> None:
    """A put in flight shows in the readonly handle (client 2) before the writer's
    own get (client 1) that starts later: SEMANTICS §1 allows it (HEADS and the
    writer's snapshots are published one after the other). Once the put returned,
    a readonly read that misses it is stale, and one handle's reads stay ordered."""
    ref = settee.reference.open(None)
    old = run_setup(ref)
    before = ("ok", ref.get("a"))
    doc = {"_id": "a", "_rev": old["a"], "v": 9}
    made = ("ok", ref.put(doc))
    after = ("ok", ref.get("a"))
    reader = Scenario({"shards": 1, "read_mode": "parallel"}, ((), ()), 0, (("get", "a"),))
    put = (0, ("put", doc), made, 0, 9)

    def verdict(*rows: tuple[Any, ...]) -> bool | None:
        return check_history(history(*rows), reader).ok

    assert verdict(put, (2, ("get", "a", {}), after, 1, 2), (1, ("get", "a", {}), before, 3, 4))
    # Without the reader, the same two reads on one handle are not linearizable.
    assert (
        verdict(put, (1, ("get", "a", {}), after, 1, 2), (1, ("get", "a", {}), before, 3, 4))
        is False
    )
    assert verdict(put, (2, ("get", "a", {}), before, 10, 11)) is False  # stale after the ack
    assert (
        verdict(put, (2, ("get", "a", {}), after, 1, 2), (2, ("get", "a", {}), before, 3, 4))
        is False
    )


def test_a_resumed_changes_lists_exactly_what_changed_since_its_token() -> None:
    """Client 1 lists the changes while client 0's put runs, then resumes from that
    answer's token (an engine's own spelling: only the pairing of the two calls
    matters). The put, missing from the first listing, was after its instant, so the
    resumed listing must show it; a put the first listing showed, it must not."""
    ref = settee.reference.open(None)
    old = run_setup(ref)
    first = ref.changes()
    doc = {"_id": "a", "_rev": old["a"], "v": 1}
    made = ("ok", ref.put(doc))
    resumed = ("ok", ref.changes(first["last_seq"]))
    token = "2-engine"
    before = ("ok", {**first, "last_seq": token})
    after = ("ok", {**ref.changes(), "last_seq": token})
    nothing = ("ok", {"results": [], "last_seq": token})

    def verdict(put: tuple[int, int], listed: Any, then: Any) -> bool | None:
        rows = (
            (0, ("put", doc), made, *put),
            (1, ("changes",), listed, 2, 3),
            (1, ("changes", token), then, 5, 6),
        )
        return check_history(history(*rows), scenario(1)).ok

    assert verdict((1, 4), before, resumed)
    assert verdict((1, 4), before, nothing) is False  # the put skipped
    assert verdict((1, 4), after, nothing)
    assert verdict((1, 4), after, resumed) is False  # listed twice
    assert verdict((0, 1), before, resumed) is False  # the put returned before the listing


def test_a_revs_diff_over_several_ids_is_one_instant() -> None:
    """Client 0 updates "b" (shard 0 of 2), then "a" (shard 1); client 1's revs_diff
    over both, asking past every revision (so each id's leaves are its possible
    ancestors), runs across the two puts. It may see neither, the first, or both;
    never the second without the first (SEMANTICS §1, "One instant per call")."""
    ref = settee.reference.open(None)
    old = run_setup(ref)
    far = {"b": ["999-never"], "a": ["999-never"]}
    before = ref.revs_diff(far)
    puts = [{"_id": i, "_rev": old[i], "v": 1} for i in ("b", "a")]
    made = [("ok", ref.put(doc)) for doc in puts]
    after = ref.revs_diff(far)
    rows = ((0, ("put", puts[0]), made[0], 1, 2), (0, ("put", puts[1]), made[1], 3, 4))

    def verdict(b: dict[str, Any], a: dict[str, Any]) -> bool | None:
        seen = (1, ("revs_diff", far), ("ok", {"b": b, "a": a}), 0, 5)
        return check_history(history(*rows, seen), scenario(2)).ok

    assert verdict(before["b"], before["a"])
    assert verdict(after["b"], before["a"])
    assert verdict(after["b"], after["a"])
    assert verdict(before["b"], after["a"]) is False
