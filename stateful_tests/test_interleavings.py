"""Concurrent clients under the deterministic scheduler, and under real threads.

Hypothesis draws the scenario (clients' programs, shards) and every
scheduling choice, so a failure shrinks to a short program and a short
schedule, both printed. The checks: the history is linearizable against the
reference, and no read saw half a batch (``history.check_mvcc``).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from stateful_tests.budget import scaled
from stateful_tests.campaigns import run_interleavings
from stateful_tests.history import Scenario, random_scenario
from stateful_tests.interleavings import run_scheduled, run_threads

STATS: Counter[str] = Counter()


def test_scheduled_interleavings_are_linearizable(engine_spec: str, record_property: Any) -> None:
    summary = run_interleavings(engine_spec)
    print("\n" + summary.text())
    record_property("steps", summary.steps)
    record_property("histories", summary.histories)
    record_property("interleavings", summary.interleaving_steps)
    assert not summary.failures, summary.text()


def test_a_schedule_replays_identically() -> None:
    """Same choices, same schedule and same answers: interleavings are reproducible."""
    scenario = Scenario(
        {"shards": 2, "read_mode": "parallel"},
        (
            (("put", "a", {"v": 1}, True), ("get", "a"), ("group",)),
            (("bulk", [("a", {"v": 2}, True), ("c", {"v": 1}, False)]), ("changes",)),
        ),
        2,
    )
    runs = []
    for _ in range(3):
        choose = random.Random(7).randrange
        result = run_scheduled("settee:open", scenario, lambda labels, c=choose: c(len(labels)))
        assert not result.problems, result.report()
        answers = [(r.client, r.input, r.output, r.call, r.ret) for r in result.recorder.records]
        runs.append((result.schedule, repr(answers)))
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize("read_mode", ["parallel", "serialized"])
def test_real_threads_are_linearizable(
    engine_spec: str, read_mode: str, record_property: Any
) -> None:
    """Many short seeded runs on free OS threads; each history checked the same way."""
    rng = random.Random(f"stress-{read_mode}")
    runs = scaled(25)
    for _ in range(runs):
        scenario = random_scenario(rng, read_mode=read_mode)
        result = run_threads(engine_spec, scenario)
        assert not result.problems, result.report()
    record_property("histories", runs)
