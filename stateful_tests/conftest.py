"""Fixtures of the proof: ``engine_spec`` is each engine under test.

The ``--engine`` option and the Hypothesis profiles belong to the root
conftest; this file only reads them (see ``engines.engine_specs``).
"""

from __future__ import annotations

import pytest

from stateful_tests.engines import engine_specs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine_spec" in metafunc.fixturenames:
        specs = engine_specs(metafunc.config)
        metafunc.parametrize("engine_spec", specs, ids=specs)
