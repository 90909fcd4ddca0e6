"""Fixtures of the crash suite, and the count of crash states checked.

Tests add ``("crash_states", n)`` to ``record_property``; the terminal summary
prints the total (also under pytest-xdist, whose workers send user properties
with their reports).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from settee.engines import load_factory
from settee.proof.crash.checker import default_factory

_TOTALS: dict[str, int] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name in ("crash_states", "corruptions", "kills", "truncations"):
            _TOTALS[name] = _TOTALS.get(name, 0) + int(value)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _TOTALS:
        parts = ", ".join(f"{name.replace('_', ' ')} checked: {n}" for name, n in _TOTALS.items())
        terminalreporter.write_line(f"crash_tests: {parts}")


@pytest.fixture(scope="session")
def crash_factory(pytestconfig: pytest.Config) -> Callable[..., Any]:
    """The engine under test, called as ``factory(path, fs=..., **options)``.

    The first ``--engine``/``SETTEE_ENGINE`` spec that is not the reference, else
    ``settee.Database``.
    """
    try:
        specs = list(pytestconfig.getoption("--engine") or [])
    except ValueError:  # the root conftest that defines --engine is not loaded
        specs = []
    specs += [s.strip() for s in os.environ.get("SETTEE_ENGINE", "").split(",") if s.strip()]
    specs = [s for s in specs if not s.startswith("settee.reference")]
    return load_factory(specs[0]) if specs else default_factory
