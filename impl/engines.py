"""Naming an implementation of settee's API: ``"MODULE:CALLABLE"``.

The proof (``settee verify --engine``, ``pytest --settee-engine``, ``SETTEE_ENGINE``)
takes any factory called as ``CALLABLE(path, **options)``; this is the one
place that turns such a name into the callable.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["load_factory"]


def load_factory(spec: str) -> Callable[..., Any]:
    """Import ``"MODULE:CALLABLE"`` (CALLABLE may be dotted); ``LookupError`` naming
    what is wrong."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise LookupError(f"engine spec {spec!r} must look like 'MODULE:CALLABLE'")
    try:
        factory: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise LookupError(f"cannot import {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        factory = getattr(factory, part, None)
    if not callable(factory):
        raise LookupError(f"{spec}: {attr!r} is not a callable of {module_name!r}")
    return factory
