"""``POST /{db}/_find``: Mango queries, over a json index or a full scan.

The query runs over the index ``settee.serve.mango`` finds usable (``use_index``
first; else the one with the fewest fields), reading its rows in key order and
each row's document; with none, as CouchDB runs a query no index covers:
documents in id order (design documents skipped), with CouchDB's "No matching
index found" warning. Either way each document is matched against the whole
selector (``settee.spec.selector``), then ``skip``, ``limit`` (default 25) and
``fields`` apply. A ``sort`` that no index serves (anything but ``_id`` without
one) is 400 ``no_usable_index``, as in CouchDB. ``bookmark`` resumes after the
last document of the previous page (its id, or its index key and id).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import time
from collections.abc import Iterator
from typing import Any

from aiohttp import web

import settee
from settee.serve import mango, revs
from settee.serve.protocol import (
    HTTPError,
    decode_json,
    decode_object,
    method_not_allowed,
    reply,
    require_json_content,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.validation import validated_write
from settee.serve.viewindex import ViewIndex
from settee.serve.viewquery import retryable, update_index
from settee.spec import selector
from settee.spec.collation import collate_json

__all__ = ["handle_explain", "handle_find", "handle_index"]

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
    sort_fields: list[str]
    fields: list[str]
    after: list[Any] | None  # the bookmark: [last id] or [last index key, last id]
    conflicts: bool
    execution_stats: bool
    use_index: list[str] | None = None
    allow_fallback: bool = True
    update: bool = True


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


def _sort(sort: Any) -> tuple[list[str], bool]:
    """mango_sort's checks: the sort fields and whether they go descending."""
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
    try:
        for field in fields:
            selector.parse_field(field)
    except selector.BadSelector as exc:
        raise _invalid(exc.error, exc.reason) from exc
    return fields, directions == {"desc"}


def _bookmark(value: Any) -> list[Any] | None:
    if value in ("", "nil"):
        return None
    try:
        if not isinstance(value, str):
            raise ValueError("not a string")
        decoded = decode_json(base64.urlsafe_b64decode(value.encode("ascii") + b"=="))
        json.dumps(decoded, allow_nan=False)  # no 1e400 (inf) either: keys must collate
        if not (isinstance(decoded, list) and len(decoded) in (1, 2)):
            raise ValueError("not a settee bookmark")
        if not isinstance(decoded[-1], str):
            raise ValueError("not a settee bookmark")
    except (ValueError, UnicodeError, binascii.Error, RecursionError, HTTPError) as exc:
        raise _invalid("invalid_bookmark", f"Invalid bookmark value: {_show(value)}") from exc
    return decoded


def make_bookmark(last: list[Any] | None) -> str:
    if last is None:
        return "nil"
    raw = json.dumps(last).encode("utf-8")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _use_index(value: Any) -> list[str] | None:
    if value is None or value == [] or value == "":
        return None
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not 1 <= len(names) <= 2:
        raise _invalid("invalid_use_index", f"Invalid use_index value: {_show(value)}")
    if not all(isinstance(n, str) and n for n in names):
        raise _invalid("invalid_use_index", f"Invalid use_index value: {_show(value)}")
    ddoc = names[0] if names[0].startswith("_design/") else "_design/" + names[0]
    return [ddoc, *names[1:]]


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
    _boolean(body, "stable", True)
    sort_fields, descending = _sort(body.get("sort", []))
    return FindQuery(
        selector=normal,
        limit=_non_neg(body, "limit", DEFAULT_LIMIT),
        skip=_non_neg(body, "skip", 0),
        descending=descending,
        sort_fields=sort_fields,
        fields=fields,
        after=_bookmark(body.get("bookmark", "")),
        conflicts=_boolean(body, "conflicts", False),
        execution_stats=_boolean(body, "execution_stats", False),
        use_index=_use_index(body.get("use_index")),
        allow_fallback=_boolean(body, "allow_fallback", True),
        update=_boolean(body, "update", True),
    )


def _no_usable_index() -> HTTPError:
    return _invalid(
        "no_usable_index", "No index exists for this sort, try indexing by the sort fields."
    )


def plan(db: settee.Database, q: FindQuery) -> tuple[mango.MangoIndex, str | None]:
    """The index a query runs over and the warning its answer carries."""
    indexes = mango.list_indexes(db)
    warning = None
    if q.use_index is not None:
        named = [
            i for i in indexes if i.ddoc == q.use_index[0] and q.use_index[1:] in ([], [i.name])
        ]
        chosen = [i for i in named if mango.usable(i, q.selector, q.sort_fields)]
        if chosen:
            return chosen[0], None
        if not q.allow_fallback:
            raise _invalid(
                "no_usable_index",
                f"{'/'.join(q.use_index)} does not contain a valid index for this query.",
            )
        warning = (
            f"{'/'.join(q.use_index)} was not used because it does not contain a valid "
            "index for this query."
        )
    # A partial index leaves documents out, so it serves only queries that name it
    # (CouchDB's documented rule); a full answer never comes from one by chance.
    candidates = [
        i
        for i in indexes
        if i.ddoc and not i.partial and mango.usable(i, q.selector, q.sort_fields)
    ]
    if candidates:
        return min(candidates, key=lambda i: (len(i.fields), i.ddoc or "", i.name)), warning
    if mango.usable(mango.ALL_DOCS, q.selector, q.sort_fields):
        return mango.ALL_DOCS, warning or NO_INDEX_WARNING
    raise _no_usable_index()


@dataclasses.dataclass(slots=True)
class _Scan:
    """What a scan found and counted."""

    found: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    last: list[Any] | None = None
    keys: int = 0
    docs: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    index: mango.MangoIndex
    warning: str | None
    view: ViewIndex | None  # the json index's rows; None for _all_docs


def open_find(entry: DbEntry, q: FindQuery, index_for: Any) -> _Plan:
    """The index a query runs over, its rows opened (not updated)."""
    index, warning = plan(entry.db, q)
    wanted = 1 if index.ddoc is None else 2
    if q.after is not None and len(q.after) != wanted:
        raise _invalid("invalid_bookmark", "this bookmark is for another index")
    view = None if index.ddoc is None else index_for(entry, index.view_signature())
    return _Plan(index, warning, view)


def run_find(entry: DbEntry, q: FindQuery, found: _Plan, started: float) -> dict[str, Any]:
    """The ``_find`` answer over the planned index as it stands."""
    db = entry.db
    view, warning = found.view, found.warning
    if _matches_nothing(q.selector):
        scan = _Scan()
    elif view is None:
        scan = _scan_all_docs(db, q)
    else:
        scan = _scan_index(db, view, found.index, q)
    if q.conflicts:
        revs.add_conflicts(db, scan.found)
    result: dict[str, Any] = {
        "docs": [selector.extract_fields(doc, q.fields) for doc in scan.found],
        "bookmark": make_bookmark(scan.last if scan.last is not None else q.after),
    }
    if warning is not None:
        result["warning"] = warning
    if q.execution_stats:
        result["execution_stats"] = {
            "total_keys_examined": scan.keys,
            "total_docs_examined": scan.docs,
            "total_quorum_docs_examined": 0,
            "results_returned": len(scan.found),
            "execution_time_ms": round((time.monotonic() - started) * 1000, 3),
        }
    return result


#: A normalised selector of one of these with no arguments is not run at all.
_NOOP_OPERATORS = frozenset({"$all", "$and", "$or", "$in"})


def _matches_nothing(normal: Any) -> bool:
    """A whole selector that is an empty ``$or`` or ``$and`` (after normalising:
    ``{"$nor": []}`` and ``{"a": {"$or": []}}`` are one too) finds no documents,
    though each alone matches any document: mango_cursor:maybe_noop_range makes
    the index range empty (21-empty-selector-tests.py, test_empty_array_or).
    Beside other conditions (``{"age": 22, "$or": []}``) it is simply true."""
    return (
        isinstance(normal, tuple)
        and len(normal) == 2
        and normal[0] in _NOOP_OPERATORS
        and normal[1] == []
    )


def _scan_index(
    db: settee.Database, view: ViewIndex, index: mango.MangoIndex, q: FindQuery
) -> _Scan:
    """Rows of a json index in key order (from the first key the selector allows on
    the first field, to the last), each row's document matched against the selector."""
    scan = _Scan()
    lower, upper = mango.first_field_bounds(index, q.selector)
    start: tuple[Any, str | None] | None = None
    resume = None
    if q.after is not None:
        start, resume = (q.after[0], q.after[1]), q.after[1]
    elif lower is not None and not q.descending:
        start = ([lower], None)
    rows = view.rows(start, None, descending=q.descending, inclusive_end=True)
    to_skip = q.skip
    for page in _pages(rows, _SCAN_PAGE):
        if q.limit == 0:
            break
        ids = [row["d"] for row in page]
        # By "key": a document purged since the index was read has a not_found row,
        # which has no "id".
        docs = {
            r["key"]: r.get("doc")
            for r in db.all_docs(keys=list(dict.fromkeys(ids)), include_docs=True)["rows"]
        }
        for row in page:
            if resume is not None:
                skipped, resume = row["d"] == resume, None
                if skipped:
                    continue
            if not q.descending and _past(row["k"][0], upper):
                return scan
            scan.keys += 1
            doc = docs.get(row["d"])
            if doc is None:
                continue  # deleted since the index was read
            scan.docs += 1
            if not selector.matches(q.selector, doc):
                continue
            if to_skip:
                to_skip -= 1
                continue
            scan.found.append(doc)
            scan.last = [row["k"], row["d"]]
            if len(scan.found) >= q.limit:
                return scan
    return scan


def _past(value: Any, upper: list[tuple[str, Any]]) -> bool:
    """Whether a first-field value is beyond an upper condition (ascending scans)."""
    for op, bound in upper:
        order = collate_json(value, bound)
        if order > 0 or (op == "$lt" and order == 0):
            return True
    return False


def _pages(rows: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    page: list[dict[str, Any]] = []
    for row in rows:
        page.append(row)
        if len(page) >= size:
            yield page
            page = []
    if page:
        yield page


def _scan_all_docs(db: settee.Database, q: FindQuery) -> _Scan:
    """One scan in id order, a page of ``all_docs`` at a time."""
    scan = _Scan()
    found = scan.found
    to_skip = q.skip
    start = q.after[0] if q.after is not None else None
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
            scan.docs += 1
            if not selector.matches(q.selector, row["doc"]):
                continue
            if to_skip:
                to_skip -= 1
                continue
            found.append(row["doc"])
            scan.last = [start]
            if len(found) >= q.limit:
                exhausted = True
                break
    return scan


def _index_answer(entry: DbEntry, method: str, rest: list[str], body: Any) -> tuple[int, Any]:
    db = entry.db

    def write(doc: dict[str, Any]) -> Any:
        return validated_write(entry, doc)

    if not rest and method in ("GET", "HEAD"):  # chttpd answers every HEAD as its GET
        listed = [index.listed() for index in mango.list_indexes(db)]
        return 200, {"total_rows": len(listed), "indexes": listed}
    if not rest and method == "POST":
        if not isinstance(body, dict):
            raise _invalid("bad_request", "Request body must be a JSON object")
        index = mango.parse_index_request(body)
        result = mango.create_index(db, index, write)
        return 200, {"result": result, "id": index.ddoc, "name": index.name}
    if not rest:
        raise method_not_allowed("GET,POST")
    if rest == ["_bulk_delete"]:  # mango_httpd matches this path before {ddoc}/json/{name}
        if method != "POST":
            raise method_not_allowed("POST")
        return 200, _bulk_delete(db, _bulk_delete_ids(body), write)
    if len(rest) >= 3 and rest[-2] == "json":
        # {ddoc}/json/{name}; the ddoc may hold slashes ("_design/x", "_design/a/b").
        if method != "DELETE":
            raise method_not_allowed("DELETE")
        mango.delete_index(db, "/".join(rest[:-2]), rest[-1], write)
        return 200, {"ok": True}
    raise HTTPError(404, "not_found", "Index not found")


def _bulk_delete_ids(body: Any) -> list[str]:
    """``docids`` (and ``w``, which one node has no use for) checked as
    mango_opts:validate_bulk_delete checks them, in its order; a docid that is no
    string (CouchDB takes ``null`` and lists, then fails on them) is refused."""
    if not isinstance(body, dict):
        raise _invalid("bad_request", "Request body must be a JSON object")
    if "docids" not in body:
        raise _invalid("missing_required_key", "Missing required key: docids")
    ids = body["docids"]
    if not isinstance(ids, list):
        raise _invalid(
            "invalid_bulk_docs",
            f"Bulk Delete requires an array of non-null docids. Docids: {_show(ids)}",
        )
    for ddoc in ids:
        if not _index_name(ddoc):
            raise _invalid("invalid_index_name", f"Invalid index name: {_show(ddoc)}")
    w = body.get("w", 2)
    if isinstance(w, bool) or not isinstance(w, int) or w < 1:
        raise _invalid("invalid_pos_integer", f"{_show(w)} is not an integer greater than zero")
    for key in body:
        if key not in ("docids", "w"):
            raise _invalid("invalid_key", f"Invalid key {key} for this request.")
    return ids


def _index_name(value: Any) -> bool:
    """mango_opts:validate_use_index's string forms: ``ddoc``, ``_design/ddoc``,
    each with an optional ``/name``."""
    if not isinstance(value, str):
        return False
    parts = value.split("/")
    return len(parts) <= 2 or (len(parts) == 3 and parts[0] == "_design")


def _bulk_delete(db: settee.Database, ids: list[str], write: Any) -> dict[str, Any]:
    """``POST /{db}/_index/_bulk_delete``: the one index of each design document
    removed (mango_httpd:handle_index_req, mango_idx:delete). Each id answers
    ``{"id", "ok": true}`` in ``success`` or ``{"id", "error"}`` in ``fail``; both
    lists come out last id first, as mango_httpd's fold prepends them."""
    success: list[dict[str, Any]] = []
    fail: list[dict[str, Any]] = []
    indexes = mango.list_indexes(db)
    for given in ids:
        ddoc = given if given.startswith("_design/") else "_design/" + given
        found = [index for index in indexes if index.ddoc == ddoc]
        if len(found) > 1:  # mango_idx:delete matches [Idx] only: CouchDB fails with 500
            raise HTTPError(500, "unknown_error", f"{ddoc} holds more than one index")
        if not found:
            fail.insert(0, {"id": ddoc, "error": "not_found"})
            continue
        try:
            mango.delete_index(db, ddoc, found[0].name, write)
        except HTTPError as exc:
            fail.insert(0, {"id": ddoc, "error": exc.error})
        except settee.Conflict:
            fail.insert(0, {"id": ddoc, "error": "conflict"})
        else:
            success.insert(0, {"id": ddoc, "ok": True})
        indexes = mango.list_indexes(db)  # a docid given twice finds its index gone
    return {"success": success, "fail": fail}


async def handle_index(
    state: State, request: web.BaseRequest, entry: DbEntry, rest: list[str]
) -> web.StreamResponse:
    """``GET|POST /{db}/_index``, ``POST /{db}/_index/_bulk_delete`` and
    ``DELETE /{db}/_index/{ddoc}/json/{name}``."""
    body = None
    if request.method == "POST" and rest in ([], ["_bulk_delete"]):
        require_json_content(request.headers)
        body = await state.run(decode_object, await state.read_body(request))
    status, answer = await state.run(_index_answer, entry, request.method, rest, body)
    if request.method != "GET":
        state.notify(entry)
    return respond(reply(status, answer))


def explain(entry: DbEntry, body: dict[str, Any], q: FindQuery) -> dict[str, Any]:
    """``POST /{db}/_explain``: the index ``_find`` would use and how it would read it
    (CouchDB's shape; ``mrargs`` bounds as this server scans)."""
    index, _warning = plan(entry.db, q)
    if index.ddoc is None:
        start: Any = q.after[0] if q.after else None
        end: Any = None
    else:
        lower, upper = mango.first_field_bounds(index, q.selector)
        start = [lower] if lower is not None and not q.descending else None
        end = [upper[0][1]] if upper and not q.descending else None
    return {
        "dbname": entry.name,
        "index": index.listed(),
        "partitioned": False,
        "selector": body["selector"],
        "opts": {
            "use_index": q.use_index or [],
            "bookmark": body.get("bookmark", "nil"),
            "limit": q.limit,
            "skip": q.skip,
            "sort": {f: "desc" if q.descending else "asc" for f in q.sort_fields},
            "fields": q.fields or "all_fields",
            "r": body.get("r", 1),
            "conflicts": q.conflicts,
            "update": q.update,
            "execution_stats": q.execution_stats,
        },
        "limit": q.limit,
        "skip": q.skip,
        "fields": q.fields or "all_fields",
        "mrargs": {
            "include_docs": True,
            "view_type": "map",
            "reduce": False,
            "start_key": start,
            "end_key": end,
            "direction": "rev" if q.descending else "fwd",
            "update": q.update,
        },
        "covering": False,
    }


async def _find_query(state: State, request: web.BaseRequest) -> tuple[dict[str, Any], FindQuery]:
    if request.method != "POST":
        raise method_not_allowed("POST")
    require_json_content(request.headers)
    body = await state.run(decode_object, await state.read_body(request))
    return body, parse_find(body)


async def handle_find(state: State, request: web.BaseRequest, entry: DbEntry) -> web.StreamResponse:
    _body, q = await _find_query(state, request)
    started = time.monotonic()
    found = await state.run(retryable, open_find, entry, q, state.registry.view_index)
    if found.view is not None and q.update:
        await update_index(state, entry, found.view, found.index)
    result = await state.run(retryable, run_find, entry, q, found, started)
    return respond(reply(200, result))


async def handle_explain(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    body, q = await _find_query(state, request)
    return respond(reply(200, await state.run(explain, entry, body, q)))
