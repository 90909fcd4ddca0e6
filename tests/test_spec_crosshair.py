"""CrossHair checks the PEP316 contracts (``pre:``/``post:`` docstring lines)
of the pure spec modules and fails on any counterexample.

Each module runs in its own ``crosshair check`` subprocess, two at a time, with
a small per-condition budget, so the whole test stays near a minute. A
timed-out condition is "not falsified", not a failure; CrossHair exits 1 only
when it found a counterexample, which it prints as ``file:line: error: ...``.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

SPEC = Path(__file__).resolve().parent.parent / "spec"
MODULES = ["revtree.py", "keys.py", "revs.py", "routing.py", "config.py", "docs.py"]
PER_CONDITION_TIMEOUT = "1.5"
TOTAL_TIMEOUT = 240  # seconds per module; a hang must fail, not block CI


def crosshair(module: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "crosshair",
        "check",
        "--analysis_kind=PEP316",
        f"--per_condition_timeout={PER_CONDITION_TIMEOUT}",
        str(SPEC / module),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TOTAL_TIMEOUT, check=False)


def test_spec_contracts_hold() -> None:
    pytest.importorskip("crosshair")
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(MODULES, pool.map(crosshair, MODULES), strict=True))
    failures = {
        module: (proc.stdout + proc.stderr).strip()
        for module, proc in results.items()
        if proc.returncode != 0
    }
    assert not failures, "CrossHair found contract violations:\n" + "\n".join(
        f"--- {module} (exit {results[module].returncode})\n{out}"
        for module, out in failures.items()
    )
