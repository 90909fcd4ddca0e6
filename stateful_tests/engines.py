"""The implementation under test: a factory named ``"MODULE:CALLABLE"``.

The factory is called as ``CALLABLE(path, **options)`` and must return an open
database with settee's public API. The default is ``settee:open``; pytest's
``--settee-engine`` option (registered by ``settee.proof.plugin``, repeatable)
or the environment variable ``SETTEE_ENGINE`` (comma separated) name others,
so a third party can run the whole proof against their own engine.
"""

from __future__ import annotations

import inspect
import os
import tempfile
from collections.abc import Callable
from typing import Any

from settee.engines import load_factory

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINE_ENV",
    "REFERENCE",
    "accepts_option",
    "engine_specs",
    "load_factory",
    "open_engine",
    "scratch_dir",
    "takes_settee_options",
]

DEFAULT_ENGINE = "settee:open"
REFERENCE = "settee.reference:open"
#: The environment twin of ``--settee-engine`` (comma separated).
ENGINE_ENV = "SETTEE_ENGINE"


def takes_settee_options(spec: str) -> bool:
    """Whether engine ``spec`` takes settee's own options (``strict``, ``node_size``):
    settee, its reference and the proof's mutants, all modules of the ``settee`` package."""
    module = spec.partition(":")[0]
    return module == "settee" or module.startswith("settee.")


def accepts_option(factory: Callable[..., Any], name: str) -> bool:
    """Whether ``factory`` takes keyword ``name``: its ``accepted_options`` when it lists
    them (a factory taking ``**options`` that refuses some, as ``settee.http:open``
    refuses ``fs``), else its signature (``**kwargs`` takes everything); a callable
    without a signature (a builtin) is assumed to take settee's whole API."""
    listed = getattr(factory, "accepted_options", None)
    if listed is not None:
        return name in listed
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def open_engine(spec: str, path: str, **options: Any) -> Any:
    """Open the database at ``path`` with the engine ``spec``."""
    return load_factory(spec)(path, **options)


def engine_specs(config: Any = None) -> list[str]:
    """The engines to test: ``--settee-engine`` values, then ``SETTEE_ENGINE``, else
    the default.

    ``config`` is a pytest config (or None outside pytest); a config without the
    option (the plugin disabled) means "none given".
    """
    specs: list[str] = []
    if config is not None:
        specs += list(config.getoption("settee_engine", default=None) or [])
    env = os.environ.get(ENGINE_ENV, "")
    specs += [s.strip() for s in env.split(",") if s.strip()]
    return specs or [DEFAULT_ENGINE]


def scratch_dir(prefix: str) -> str:
    """A new temporary directory, in memory (``/dev/shm``) when possible: the
    machines open thousands of databases and each creation fsyncs."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)
