"""The engine, the reference and the HTTP engine expose one API (DESIGN.md's):
the same public methods, with the same parameter names, kinds and defaults, so
a call by keyword means the same on each (found in review: the engine's
``get(doc_id=...)`` was the reference's ``get(docid=...)``, and ``revs_diff``
named its argument ``request`` on one side, ``revs`` on the other)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import settee
import settee.http
from settee.reference.store import ReferenceDB


def _public_methods(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in vars(cls).items()
        if not name.startswith("_") and inspect.isfunction(member)
    }


def _shape(function: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("other", [ReferenceDB, settee.http.Database], ids=["reference", "http"])
def test_every_api_method_has_the_engines_parameters(other: type) -> None:
    engine = _public_methods(settee.Database)
    theirs = _public_methods(other)
    api = [name for name in engine if name in theirs]
    assert {"put", "get", "delete", "bulk_docs", "all_docs", "changes", "revs_diff"} <= set(api)
    differing = {
        name: (_shape(engine[name]), _shape(theirs[name]))
        for name in api
        if _shape(engine[name]) != _shape(theirs[name])
    }
    assert not differing, differing
