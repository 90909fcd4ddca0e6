"""The proof's default Hypothesis profile, ``ci``, for the tests under settee.proof.

Loaded by pytest when it collects this package, before any of its test modules is
imported, so a session that never runs the proof keeps its own Hypothesis
settings. ``--hypothesis-profile`` or ``SETTEE_HYPOTHESIS_PROFILE`` choose another.
"""

from __future__ import annotations

import pytest

from settee.proof.plugin import choose_profile


def pytest_configure(config: pytest.Config) -> None:
    choose_profile(config, default="ci")
