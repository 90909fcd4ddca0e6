"""The type gate: mypy over the engine, the reference and the spec, inside the suite."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_is_clean_on_impl_spec_reference() -> None:
    files = sorted(
        str(p) for folder in ("impl", "spec", "reference") for p in (ROOT / folder).rglob("*.py")
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--no-error-summary",
            *files,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
