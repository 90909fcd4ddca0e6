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


def test_every_settee_error_survives_pickling() -> None:
    """settee verify's worker processes send engine errors back to the parent; a
    CorruptionError that could not be rebuilt broke the pool (found by mutation testing)."""
    import pickle

    from settee.spec.errors import BadRequest, Conflict, CorruptionError, NotFound, SetteeError

    for error in (CorruptionError("/f", 7, "bad crc"), Conflict(), NotFound("deleted")):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
    assert pickle.loads(pickle.dumps(CorruptionError("/f", 7, "x"))).offset == 7
    assert str(pickle.loads(pickle.dumps(BadRequest("b")))) == "b"
    assert str(pickle.loads(pickle.dumps(SetteeError("s")))) == "s"
