"""CrossHair checks the PEP316 contracts (``pre:``/``post:`` docstring lines)
of the pure spec modules and fails on any counterexample.

Each module runs in its own ``crosshair check`` subprocess, one test per module,
so that pytest-xdist spreads them over its workers like any other test (one test
running two subprocesses at once took a third core from a two-core gate). The
budget is counted in iterations, not seconds: each condition stops after
``UNINTERESTING_ITERATIONS`` iterations that explore nothing new. CrossHair seeds
its own path choices and Z3 with fixed seeds, so with no clock in the budget the
same code gets the same verdict on an idle machine and under load (a
``--per_condition_timeout`` made the amount of checking, and so the verdict,
depend on the machine's load, and the whole test time out under it). The path
limit is CPU seconds, far above what any path takes, so that it never decides;
Z3's query limit is half of it, in wall seconds, far above any query. CrossHair
exits 1 only when it found a counterexample, printed as ``file:line: error: ...``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SPEC = Path(__file__).resolve().parent.parent / "spec"
MODULES = ["revtree.py", "keys.py", "revs.py", "routing.py", "config.py", "docs.py"]
UNINTERESTING_ITERATIONS = "10"
PER_PATH_CPU_SECONDS = "20"
TOTAL_TIMEOUT = 240  # wall seconds per module (each takes < 10 s idle); a hang must fail


def crosshair(module: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "crosshair",
        "check",
        "--analysis_kind=PEP316",
        f"--max_uninteresting_iterations={UNINTERESTING_ITERATIONS}",
        f"--per_path_timeout={PER_PATH_CPU_SECONDS}",
        str(SPEC / module),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TOTAL_TIMEOUT, check=False)


@pytest.mark.parametrize("module", MODULES)
def test_spec_contracts_hold(module: str) -> None:
    pytest.importorskip("crosshair")
    proc = crosshair(module)
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0, f"CrossHair found contract violations in {module}:\n{out}"
