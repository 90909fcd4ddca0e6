"""The implementation under test: a factory named ``"MODULE:CALLABLE"``.

The factory is called as ``CALLABLE(path, **options)`` and must return an open
database with settee's public API. The default is ``settee:open``; pytest's
``--engine`` option (registered by the root conftest, repeatable) or the
environment variable ``SETTEE_ENGINE`` (comma separated) name others, so a
third party can run the whole proof against their own engine.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from settee.engines import load_factory

__all__ = [
    "DEFAULT_ENGINE",
    "REFERENCE",
    "engine_specs",
    "hypothesis_profile",
    "load_factory",
    "open_engine",
    "scratch_dir",
    "takes_settee_options",
]

DEFAULT_ENGINE = "settee:open"
REFERENCE = "settee.reference:open"


def takes_settee_options(spec: str) -> bool:
    """Whether engine ``spec`` takes settee's own options (``strict``, ``node_size``):
    settee, its reference and the proof's mutants, all modules of the ``settee`` package."""
    module = spec.partition(":")[0]
    return module == "settee" or module.startswith("settee.")


def open_engine(spec: str, path: str, **options: Any) -> Any:
    """Open the database at ``path`` with the engine ``spec``."""
    return load_factory(spec)(path, **options)


def engine_specs(config: Any = None) -> list[str]:
    """The engines to test: ``--engine`` values, then ``SETTEE_ENGINE``, else the default.

    ``config`` is a pytest config (or None outside pytest); the option itself
    is registered by the root conftest, so a missing option means "none given".
    """
    specs: list[str] = []
    if config is not None:
        specs += list(config.getoption("engine", default=None) or [])
    env = os.environ.get("SETTEE_ENGINE", "")
    specs += [s.strip() for s in env.split(",") if s.strip()]
    return specs or [DEFAULT_ENGINE]


def hypothesis_profile() -> str:
    """The Hypothesis profile in force (``ci`` unless SETTEE_HYPOTHESIS_PROFILE says)."""
    return os.environ.get("SETTEE_HYPOTHESIS_PROFILE", "ci")


def scratch_dir(prefix: str) -> str:
    """A new temporary directory, in memory (``/dev/shm``) when possible: the
    machines open thousands of databases and each creation fsyncs."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)
