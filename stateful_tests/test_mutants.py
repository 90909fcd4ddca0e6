"""The proof bites: every deliberately broken engine in ``mutants.py`` is caught.

Each mutant runs against the machines in turn (no shrinking, bounded
examples) until one fails; the table of who caught what after how many
operations is printed (``pytest -s``).
"""

from __future__ import annotations

import pytest

from stateful_tests.campaigns import run_interleavings, run_mutants
from stateful_tests.mutants import MUTANTS


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(name: str) -> None:
    [result] = run_mutants([name], max_examples=100, seed=0)
    print("\n" + result.text())
    assert result.caught_by, f"mutant {name} ({result.description}) escaped every machine"


def test_partial_batch_is_caught_by_the_interleavings() -> None:
    """The MVCC check and the linearizability check see half a batch directly."""
    summary = run_interleavings("stateful_tests.mutants:partial_batch", 100, seed=0, shrink=False)
    print("\n" + summary.text()[:2000])
    assert summary.failures
    assert "saw" in summary.reproducer or "not linearizable" in summary.reproducer
