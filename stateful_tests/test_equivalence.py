"""Engine vs reference, operation by operation (see ``equivalence.py``).

Runs once per engine named by ``--settee-engine``/``SETTEE_ENGINE`` (default
``settee:open``). Budget: the ``ci`` profile keeps this well under a minute on
two cores; ``SETTEE_HYPOTHESIS_PROFILE=verify`` runs the long campaign.
"""

from __future__ import annotations

from typing import Any

from settee.proof.stateful.campaigns import run_equivalence


def test_engine_matches_reference(engine_spec: str, record_property: Any) -> None:
    summary = run_equivalence(engine_spec)
    print("\n" + summary.text())
    record_property("steps", summary.steps)
    assert not summary.failures, summary.text()


def test_reference_matches_itself() -> None:
    """The machine accepts the reference as its own engine (the third-party path)."""
    summary = run_equivalence("settee.reference:open", max_examples=20)
    assert not summary.failures, summary.text()
