"""Fixtures of the proof: ``engine_spec`` is each engine under test.

The ``--engine`` option and the Hypothesis profiles belong to the root
conftest; this file only reads them (see ``engines.engine_specs``).
"""

from __future__ import annotations

from typing import Any

import pytest

from settee.proof.stateful.engines import engine_specs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine_spec" in metafunc.fixturenames:
        specs = engine_specs(metafunc.config)
        metafunc.parametrize("engine_spec", specs, ids=specs)


_TOTALS: dict[str, int] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Sum what the machines checked (workers under xdist send user properties)."""
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name in ("steps", "histories", "interleavings"):
            _TOTALS[name] = _TOTALS.get(name, 0) + int(value)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _TOTALS:
        parts = ", ".join(f"{name} checked: {n}" for name, n in _TOTALS.items())
        terminalreporter.write_line(f"stateful_tests: {parts}")
