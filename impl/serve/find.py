"""``POST /{db}/_find``: Mango queries over a full scan of ``_all_docs``.

settee serve has no Mango indexes yet, so every query runs as CouchDB runs
one that no index covers: documents in id order (design documents skipped),
matched against the selector (``settee.spec.selector``), then ``skip``,
``limit`` (default 25) and ``fields``; the answer carries CouchDB's
"No matching index found" warning. As in CouchDB, a ``sort`` other than by
``_id`` needs an index and is refused with 400 ``no_usable_index``.
``bookmark`` resumes after the last document of the previous page.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import time
from typing import Any

from aiohttp import web

import settee
from settee.serve import revs
from settee.serve.protocol import (
    HTTPError,
    decode_object,
    method_not_allowed,
    reply,
    require_json_content,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.spec import revtree, selector

__all__ = ["handle_find"]

NO_INDEX_WARNING = "No matching index found, create an index to optimize query time."
DEFAULT_LIMIT = 25
#: Documents read per ``all_docs`` call while scanning.
_SCAN_PAGE = 200
_KNOWN_KEYS = frozenset(
    {
        "selector",
        "use_index",
        "bookmark",
        "limit",
        "skip",
        "sort",
        "fields",
        "partition",
        "r",
        "conflicts",
        "stale",
        "update",
        "stable",
        "execution_stats",
        "allow_fallback",
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class FindQuery:
    selector: Any  # normalised
    limit: int
    skip: int
    descending: bool
    fields: list[str]
    after: str | None  # the bookmark's last id
    conflicts: bool
    execution_stats: bool


def _invalid(error: str, reason: str) -> HTTPError:
    return HTTPError(400, error, reason)


def _non_neg(body: dict[str, Any], name: str, default: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _invalid(
            "invalid_non_neg_integer",
            f"{_show(value)} is not an integer greater than or equal to zero",
        )
    return value


def _boolean(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise _invalid("invalid_boolean", f"Invalid boolean value: {_show(value)}")
    return value


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 200 else text[:200] + "..."


def _descending(sort: Any) -> bool:
    """mango_sort's checks, then the only sort a full scan serves: by ``_id``."""
    if not isinstance(sort, list):
        raise _invalid(
            "invalid_sort_json", f"Sort must be an array of sort specs, not: {_show(sort)}"
        )
    fields, directions = [], set()
    for spec in sort:
        if isinstance(spec, str) and spec:
            fields.append(spec)
            directions.add("asc")
        elif isinstance(spec, dict) and len(spec) == 1:
            [(name, direction)] = spec.items()
            if direction not in ("asc", "desc"):
                raise _invalid("invalid_sort_dir", f"Invalid sort direction: {_show(direction)}")
            fields.append(name)
            directions.add(direction)
        else:
            raise _invalid("invalid_sort_field", f"Invalid sort field: {_show(spec)}")
    if len(directions) > 1:
        raise _invalid(
            "unsupported_mixed_sort",
            "Sorts currently only support a single direction for all fields.",
        )
    if fields and fields != ["_id"]:
        raise _invalid(
            "no_usable_index", "No index exists for this sort, try indexing by the sort fields."
        )
    return directions == {"desc"}


def _bookmark(value: Any) -> str | None:
    if value in ("", "nil"):
        return None
    try:
        if not isinstance(value, str):
            raise ValueError("not a string")
        decoded = json.loads(base64.urlsafe_b64decode(value.encode("ascii") + b"=="))
        if not (isinstance(decoded, list) and len(decoded) == 1 and isinstance(decoded[0], str)):
            raise ValueError("not a settee bookmark")
    except (ValueError, UnicodeError, binascii.Error) as exc:
        raise _invalid("invalid_bookmark", f"Invalid bookmark value: {_show(value)}") from exc
    return str(decoded[0])


def make_bookmark(last_id: str | None) -> str:
    if last_id is None:
        return "nil"
    raw = json.dumps([last_id]).encode("utf-8")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def parse_find(body: dict[str, Any]) -> FindQuery:
    for key in body:
        if key not in _KNOWN_KEYS:
            raise _invalid("invalid_key", f"Invalid key {key} for this request.")
    if "selector" not in body:
        raise _invalid("missing_required_key", "Missing required key: selector")
    raw_selector = body["selector"]
    if not isinstance(raw_selector, dict):
        raise _invalid(
            "invalid_selector_json", f"Selector must be a JSON object, not: {_show(raw_selector)}"
        )
    try:
        normal = selector.normalize(raw_selector)
        fields = body.get("fields", [])
        if not isinstance(fields, list):
            raise _invalid(
                "invalid_fields", f"Fields must be an array of strings, not: {_show(fields)}"
            )
        for field in fields:
            if not isinstance(field, str):
                raise _invalid("invalid_field", f"Invalid JSON for field spec: {_show(field)}")
            selector.parse_field(field)
    except selector.BadSelector as exc:
        raise _invalid(exc.error, exc.reason) from exc
    r = body.get("r", 1)
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise _invalid("invalid_pos_integer", f"{_show(r)} is not an integer greater than zero")
    for flag in ("update", "stable", "allow_fallback"):
        _boolean(body, flag, True)
    return FindQuery(
        selector=normal,
        limit=_non_neg(body, "limit", DEFAULT_LIMIT),
        skip=_non_neg(body, "skip", 0),
        descending=_descending(body.get("sort", [])),
        fields=fields,
        after=_bookmark(body.get("bookmark", "")),
        conflicts=_boolean(body, "conflicts", False),
        execution_stats=_boolean(body, "execution_stats", False),
    )


def run_find(db: settee.Database, q: FindQuery) -> dict[str, Any]:
    """The ``_find`` answer: one scan in id order, a page of ``all_docs`` at a time."""
    started = time.monotonic()
    found: list[dict[str, Any]] = []
    examined = 0
    to_skip = q.skip
    last_id = q.after
    start = q.after
    exhausted = q.limit == 0
    while not exhausted:
        page = db.all_docs(
            startkey=start, limit=_SCAN_PAGE + 1, include_docs=True, descending=q.descending
        )["rows"]
        rows = [row for row in page if row["id"] != start]  # the bookmark's doc was sent
        exhausted = len(page) <= _SCAN_PAGE
        for row in rows[:_SCAN_PAGE]:
            start = row["id"]
            if start.startswith("_design/"):
                continue
            examined += 1
            if not selector.matches(q.selector, row["doc"]):
                continue
            if to_skip:
                to_skip -= 1
                continue
            found.append(row["doc"])
            last_id = start
            if len(found) >= q.limit:
                exhausted = True
                break
    if q.conflicts:
        _add_conflicts(db, found)
    result: dict[str, Any] = {
        "docs": [selector.extract_fields(doc, q.fields) for doc in found],
        "bookmark": make_bookmark(last_id),
        "warning": NO_INDEX_WARNING,
    }
    if q.execution_stats:
        result["execution_stats"] = {
            "total_keys_examined": 0,
            "total_docs_examined": examined,
            "total_quorum_docs_examined": 0,
            "results_returned": len(found),
            "execution_time_ms": round((time.monotonic() - started) * 1000, 3),
        }
    return result


def _add_conflicts(db: settee.Database, docs: list[dict[str, Any]]) -> None:
    infos = revs.doc_infos(db, [doc["_id"] for doc in docs])
    for doc in docs:
        info = infos.get(doc["_id"])
        conflicts = revtree.conflicts(info.tree) if info is not None else []
        if conflicts:
            doc["_conflicts"] = conflicts


async def handle_find(state: State, request: web.BaseRequest, entry: DbEntry) -> web.StreamResponse:
    if request.method != "POST":
        raise method_not_allowed("POST")
    require_json_content(request.headers)
    raw = await state.read_body(request)
    body = await state.run(decode_object, raw)
    q = parse_find(body)
    result = await state.run(run_find, entry.db, q)
    return respond(reply(200, result))
