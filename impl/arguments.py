"""Argument checks of the public read calls, so bad input fails before any I/O
with a ``BadRequest`` that names the argument and the fix (SEMANTICS.md)."""

from __future__ import annotations

from typing import Any

from settee.spec.docs import validate_docid
from settee.spec.errors import BadRequest
from settee.spec.revs import parse_rev

__all__ = [
    "check_bool",
    "check_count",
    "check_key",
    "check_keys",
    "check_rev",
    "check_revs_diff",
    "validate_docid",
]


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be True or False, not {value!r}")
    return value


def check_count(name: str, value: Any, *, optional: bool) -> int | None:
    """A non-negative int (``None`` allowed when ``optional``); bool is not an int here."""
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        allowed = "None or " if optional else ""
        raise BadRequest(f"{name} must be {allowed}an int >= 0, not {value!r}")
    return value


def check_key(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be None or a document id (str), not {value!r}")
    _check_unicode(name, value)
    return value


def check_keys(keys: Any) -> list[str] | None:
    if keys is None:
        return None
    if not isinstance(keys, list | tuple):
        raise BadRequest(f"keys must be None or a list of document ids, not {type(keys).__name__}")
    for key in keys:
        if not isinstance(key, str):
            raise BadRequest(f"keys must hold only str document ids, found {key!r}")
        _check_unicode("keys", key)
    return list(keys)


def check_rev(value: Any) -> str | None:
    if value is None:
        return None
    parse_rev(value)
    return value


def check_revs_diff(request: Any) -> dict[str, list[str]]:
    if not isinstance(request, dict):
        raise BadRequest(f"revs_diff takes a dict {{id: [rev, ...]}}, not {type(request).__name__}")
    checked: dict[str, list[str]] = {}
    for doc_id, revs in request.items():
        if not isinstance(doc_id, str):
            raise BadRequest(f"revs_diff ids must be str, found {doc_id!r}")
        _check_unicode("revs_diff id", doc_id)
        if not isinstance(revs, list | tuple):
            raise BadRequest(f"revs_diff[{doc_id!r}] must be a list of revisions, not {revs!r}")
        for rev in revs:
            parse_rev(rev)
        checked[doc_id] = list(revs)
    return checked


def _check_unicode(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{name} {value!r} is not valid Unicode (lone surrogate)") from None
