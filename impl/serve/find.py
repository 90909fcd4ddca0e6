"""``POST /{db}/_find``: Mango queries, as CouchDB 3.5 plans and runs them.

``parse_find`` checks the body as mango_opts:validate_find does; ``plan`` picks
the index (``settee.serve.mangoplan``: usability, ranking and the key range, or
``use_index`` and ``allow_fallback``); the scan reads a json index's rows between
the range's keys (each row's document, or the row itself for a covering index),
or ``_all_docs`` between the ids the selector's ``_id`` range allows. Each
document is matched against the whole selector (``settee.spec.selector``), then
``skip``, ``limit`` (default 25) and ``fields`` apply; the answer carries the
``bookmark`` (the last row's key and id), ``execution_stats`` as CouchDB's
coordinator counts them, and CouchDB's warnings. ``/{db}/_index`` is
``settee.serve.indexes``'s and ``/{db}/_explain`` ``settee.serve.explain``'s.
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
from settee.serve import mango, mangoplan, revs
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
from settee.serve.viewindex import ViewIndex, prefix_bound
from settee.serve.viewquery import retryable, update_index
from settee.spec import selector

__all__ = ["FindQuery", "handle_find", "named_indexes", "plan", "read_find_query"]

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
    use_index: list[str] | None = None  # [ddoc id, name?]
    allow_fallback: bool = True
    update: bool = True
    r: int = 1
    stale: bool = False  # "stale": "ok"
    stable: bool = False
    use_index_names: list[str] = dataclasses.field(default_factory=list)  # as _explain shows


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
    """mango_sort:new's checks: the sort fields and whether they go descending.
    A one-member object whose direction is neither ``asc`` nor ``desc`` is an
    ``invalid_sort_field``, as mango_sort:sort_field matches it."""
    if not isinstance(sort, list):
        raise _invalid(
            "invalid_sort_json", f"Sort must be an array of sort specs, not: {_show(sort)}"
        )
    fields, directions = [], set()
    for spec in sort:
        if isinstance(spec, str) and spec:
            fields.append(spec)
            directions.add("asc")
        elif (
            isinstance(spec, dict)
            and len(spec) == 1
            and spec.get(next(iter(spec)))
            in (
                "asc",
                "desc",
            )
        ):
            [(name, direction)] = spec.items()
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
    if value in ("", "nil", None):
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


def _use_index(value: Any) -> list[str]:
    """mango_opts:validate_use_index: ``"ddoc"``, ``"_design/ddoc"``, either with
    ``/name``, or a list ``[ddoc]`` or ``[ddoc, name]``; else ``invalid_index_name``."""
    if value is None:
        return []
    if isinstance(value, str):
        parts = value.split("/")
        if parts[0] == "_design" and len(parts) in (2, 3):
            return parts[1:]
        if len(parts) <= 2:
            return parts
    elif isinstance(value, list) and len(value) <= 2 and all(isinstance(v, str) for v in value):
        return value
    raise _invalid("invalid_index_name", f"Invalid index name: {_show(value)}")


def _design_id(name: str) -> str:
    return name if name.startswith("_design/") else "_design/" + name


def _stale(value: Any) -> bool:
    """mango_opts:is_ok_or_false: ``"ok"`` (True), ``false`` or ``"false"``. CouchDB
    answers anything else with a 500 (``invalid_ok_or_false_value`` has no message)."""
    if value == "ok":
        return True
    if value is False or value == "false":
        return False
    raise _invalid("invalid_ok_or_false_value", f"Invalid value for stale: {_show(value)}")


def parse_find(body: dict[str, Any]) -> FindQuery:
    """A ``_find`` body checked as mango_opts:validate_find checks it: each option in
    its order, then any unknown key."""
    if "selector" not in body:
        raise _invalid("missing_required_key", "Missing required key: selector")
    raw_selector = body["selector"]
    if not isinstance(raw_selector, dict):
        raise _invalid(
            "invalid_selector_json", f"Selector must be a JSON object, not: {_show(raw_selector)}"
        )
    try:
        normal = selector.normalize(raw_selector)
    except selector.BadSelector as exc:
        raise _invalid(exc.error, exc.reason) from exc
    names = _use_index(body.get("use_index"))
    bookmark = body.get("bookmark", "")
    if bookmark is not None and not isinstance(bookmark, str):
        raise _invalid("invalid_bookmark", f"Invalid bookmark value: {_show(bookmark)}")
    limit = _non_neg(body, "limit", DEFAULT_LIMIT)
    skip = _non_neg(body, "skip", 0)
    sort_fields, descending = _sort(body.get("sort", []))
    fields = _fields(body.get("fields", []))
    partition = _partition(body.get("partition", ""))
    r = body.get("r", 1)
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise _invalid("invalid_pos_integer", f"{_show(r)} is not an integer greater than zero")
    conflicts = _boolean(body, "conflicts", False)
    stale = _stale(body.get("stale", False))
    update = _boolean(body, "update", True)
    stable = _boolean(body, "stable", False)
    execution_stats = _boolean(body, "execution_stats", False)
    allow_fallback = _boolean(body, "allow_fallback", True)
    for key in body:
        if key not in _KNOWN_KEYS:
            raise _invalid("invalid_key", f"Invalid key {key} for this request.")
    if partition:
        # No index is partitioned here, so _all_docs would serve the query, and
        # couch_mrview_util:validate_all_docs_args refuses it on such a database.
        raise _invalid("query_parse_error", "`partition` parameter is not supported on this db")
    return FindQuery(
        selector=normal,
        limit=limit,
        skip=skip,
        descending=descending,
        sort_fields=sort_fields,
        fields=fields,
        after=_bookmark(bookmark),
        conflicts=conflicts,
        execution_stats=execution_stats,
        use_index=[_design_id(names[0]), *names[1:]] if names else None,
        allow_fallback=allow_fallback,
        update=update and not stale,
        r=r,
        stale=stale,
        stable=stable or stale,
        use_index_names=names,
    )


def _partition(value: Any) -> str:
    """couch_partition:validate_partition (mango_opts takes ``""`` as no partition)."""
    if value == "":
        return value
    if not isinstance(value, str):
        raise _invalid("illegal_partition", "Partition must be a string")
    if value.startswith("_"):
        raise _invalid("illegal_partition", "Partition must not start with an underscore")
    if ":" in value:
        raise _invalid("illegal_partition", "Partition must not contain a colon")
    return value


def _fields(fields: Any) -> list[str]:
    if not isinstance(fields, list):
        raise _invalid(
            "invalid_fields", f"Fields must be an array of strings, not: {_show(fields)}"
        )
    for field in fields:
        if not isinstance(field, str):
            raise _invalid("invalid_field", f"Invalid JSON for field spec: {_show(field)}")
        try:
            selector.parse_field(field)
        except selector.BadSelector as exc:
            raise _invalid(exc.error, exc.reason) from exc
    return fields


def _no_usable_index() -> HTTPError:
    return _invalid(
        "no_usable_index", "No index exists for this sort, try indexing by the sort fields."
    )


def named_indexes(indexes: list[mango.MangoIndex], use_index: list[str] | None) -> list[Any]:
    """mango_cursor:maybe_filter_indexes_by_ddoc: the indexes ``use_index`` names."""
    if use_index is None:
        return []
    return [i for i in indexes if i.ddoc == use_index[0] and use_index[1:] in ([], [i.name])]


def _invalid_index(use_index: list[str] | None) -> HTTPError:
    """mango_error for ``{invalid_index, Details}`` (``allow_fallback: false``)."""
    if use_index is None:
        what = "You must specify an index with the `use_index` parameter."
    else:
        shown = ", ".join([use_index[0], *use_index[1:]])
        what = f"{shown} specified by `use_index` could not be found or it is not suitable."
    return _invalid("invalid_index", what)


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    index: mango.MangoIndex | None  # None: _explain with no usable index
    ranges: list[Any] | None  # per leading column; None: the query matches nothing
    warning: str | None  # use_index was not followed
    view: ViewIndex | None = None  # the json index's rows; None for _all_docs


def plan(db: settee.Database, q: FindQuery, *, explain: bool = False) -> _Plan:
    """The index a query runs over and the ranges it reads, as mango_cursor:create,
    mango_idx:get_usable_indexes and mango_cursor_view:create decide them."""
    indexes = mango.list_indexes(db)
    # A partial index leaves documents out: it serves only queries that name it.
    candidates = [i for i in indexes if not i.partial]
    candidates += [i for i in named_indexes(indexes, q.use_index) if i.partial]
    usable = [i for i in candidates if mangoplan.usable(i, q.selector, q.sort_fields)]
    if not usable and not explain:
        raise _no_usable_index()
    chosen = named_indexes(usable, q.use_index)
    if not chosen:
        if not (q.allow_fallback or (q.use_index is None and len(usable) > 1)):
            raise _invalid_index(q.use_index)
        chosen = usable
    if not chosen:
        return _Plan(None, None, None)
    json_indexes = [i for i in chosen if i.ddoc is not None]
    index, ranges = mangoplan.choose(json_indexes or chosen, q.selector)
    if _matches_nothing(q.selector) or ranges == [None]:
        ranges = None
    return _Plan(index, ranges, _use_index_warning(index, q.use_index))


def _use_index_warning(index: mango.MangoIndex, use_index: list[str] | None) -> str | None:
    """mango_cursor:invalid_index_warning: the named index was not the one used."""
    if use_index is None or named_indexes([index], use_index):
        return None
    if len(use_index) == 1:
        return (
            f"{use_index[0]} was not used because it does not contain a valid index for this query."
        )
    return (
        f"{use_index[0]}, {use_index[1]} was not used because it is not a valid index "
        "for this query."
    )


SCAN_WARNING = (
    "The number of documents examined is high in proportion to the number of results "
    "returned. Consider adding a more specific index to improve this."
)
#: mango's index_scan_warning_threshold: more documents examined per result warns.
SCAN_WARNING_RATIO = 10


@dataclasses.dataclass(slots=True)
class _Scan:
    """What a scan found and counted, as CouchDB's coordinator counts it: the shard
    rolls what it examined into the next row it sends (a match), and the rest into
    its ``complete`` message; the coordinator adds them as they arrive, stops at the
    first match past ``limit`` (counted, not returned: mango_cursor_view:handle_doc)
    and drops a matching design document of ``_all_docs`` with what it carried
    (handle_all_docs_message)."""

    found: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    last: list[Any] | None = None
    keys: int = 0
    docs: int = 0
    quorum_docs: int = 0
    pending: list[int] = dataclasses.field(default_factory=lambda: [0, 0, 0])
    to_skip: int = 0

    def examined(self, *, doc: bool = False, quorum: bool = False) -> None:
        self.pending[0] += 1
        self.pending[1] += doc
        self.pending[2] += quorum

    def sent(self) -> None:
        """The examined rows' counts reach the coordinator (a match, or the end)."""
        self.keys += self.pending[0]
        self.docs += self.pending[1]
        self.quorum_docs += self.pending[2]
        self.pending = [0, 0, 0]

    def dropped(self) -> None:
        self.pending = [0, 0, 0]

    def take(self, q: FindQuery, doc: dict[str, Any], last: list[Any]) -> bool:
        """A match reaches the coordinator: skipped, returned, or (past the limit)
        the end of the scan; True when the scan ends."""
        self.sent()
        if self.to_skip:
            self.to_skip -= 1
            return False
        if len(self.found) >= q.limit:
            return True
        self.found.append(doc)
        self.last = last
        return False


def open_find(entry: DbEntry, q: FindQuery, index_for: Any) -> _Plan:
    """The index a query runs over, its rows opened (not updated)."""
    found = plan(entry.db, q)
    assert found.index is not None  # plan raises for _find when no index is usable
    wanted = 1 if found.index.ddoc is None else 2
    if q.after is not None and len(q.after) != wanted:
        raise _invalid("invalid_bookmark", "this bookmark is for another index")
    if found.index.ddoc is None:
        return found
    return dataclasses.replace(found, view=index_for(entry, found.index.view_signature()))


def run_find(entry: DbEntry, q: FindQuery, found: _Plan, started: float) -> dict[str, Any]:
    """The ``_find`` answer over the planned index as it stands."""
    db = entry.db
    assert found.index is not None
    if found.ranges is None:
        # mango_cursor_view:execute runs no scan for an empty range and adds nothing
        # to the answer, not even a bookmark.
        return {"docs": []}
    if found.view is None:
        scan = _scan_all_docs(db, q, found.ranges)
    else:
        scan = _scan_index(db, found.view, found.index, q, found.ranges)
    result: dict[str, Any] = {
        "docs": [selector.extract_fields(doc, q.fields) for doc in scan.found],
        "bookmark": make_bookmark(scan.last if scan.last is not None else q.after),
    }
    if q.execution_stats:
        result["execution_stats"] = {
            "total_keys_examined": scan.keys,
            "total_docs_examined": scan.docs,
            "total_quorum_docs_examined": scan.quorum_docs,
            "results_returned": len(scan.found),
            "execution_time_ms": round((time.monotonic() - started) * 1000, 3),
        }
    warnings = [w for w in (found.warning,) if w is not None]
    if found.index.ddoc is None:
        warnings.append(NO_INDEX_WARNING)
    examined = scan.docs + scan.quorum_docs
    if examined / (len(scan.found) or 1) > SCAN_WARNING_RATIO:
        warnings.append(SCAN_WARNING)
    if warnings:
        result["warning"] = "\n".join(warnings)
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


def _index_bounds(index: mango.MangoIndex, ranges: list[Any], descending: bool) -> tuple[str, str]:
    """The index ids a scan runs between, in its direction (mango_idx_view's
    start_key and end_key, swapped for a descending sort as apply_opts does)."""
    low = prefix_bound(mangoplan.start_key(index, ranges), above=False)
    end = mangoplan.end_key(index, ranges)
    assert end and end[-1] is mangoplan.MAX  # an end key always closes with MAX
    high = prefix_bound(end[:-1], above=True)
    return (high, low) if descending else (low, high)


def _covered_doc(index: mango.MangoIndex, row: dict[str, Any]) -> dict[str, Any]:
    """mango_cursor_view:derive_doc_from_index: the document a covering index's row
    stands for (its id and each column's value)."""
    doc: dict[str, Any] = {"_id": row["d"]}
    for path, value in zip(index.paths, row["k"], strict=False):
        target = doc
        for name in path[:-1]:
            nested = target.get(name)
            if not isinstance(nested, dict):
                nested = target[name] = {}
            target = nested
        target[path[-1]] = value
    return doc


def _scan_index(
    db: settee.Database, view: ViewIndex, index: mango.MangoIndex, q: FindQuery, ranges: list[Any]
) -> _Scan:
    """Rows of a json index in key order between the planned bounds, each row's
    document (or, for a covering index, the row itself) matched against the selector."""
    scan = _Scan(to_skip=q.skip)
    covering = mangoplan.covers(index, q.fields, q.selector)
    start: tuple[Any, str | None] | str
    start, end = _index_bounds(index, ranges, q.descending)
    resume = None
    if q.after is not None:
        start, resume = (q.after[0], q.after[1]), q.after[1]
    rows = view.rows(start, end, descending=q.descending, inclusive_end=True)
    for page in _pages(rows, _SCAN_PAGE):
        docs: dict[str, Any] = {}
        if not covering:
            ids = list(dict.fromkeys(row["d"] for row in page))
            # By "key": a document purged since the index was read has a not_found
            # row, which has no "id".
            listed = db.all_docs(keys=ids, include_docs=True)["rows"]
            docs = {r["key"]: r.get("doc") for r in listed}
            if q.conflicts:
                # Read with conflicts (mrargs conflicts = true), so the selector sees
                # them (19-find-conflicts.py).
                revs.add_conflicts(db, [doc for doc in docs.values() if doc])
        for row in page:
            if resume is not None:
                skipped, resume = row["d"] == resume, None
                if skipped:
                    continue
            doc = _covered_doc(index, row) if covering else docs.get(row["d"])
            read = doc is not None and not covering
            scan.examined(doc=read and q.r == 1, quorum=read and q.r > 1)
            if doc is None or not selector.matches(q.selector, doc):
                continue  # (None: deleted since the index was read)
            if scan.take(q, doc, [row["k"], row["d"]]):
                return scan
    scan.sent()
    return scan


def _pages(rows: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    page: list[dict[str, Any]] = []
    for row in rows:
        page.append(row)
        if len(page) >= size:
            yield page
            page = []
    if page:
        yield page


def _id_bound(value: Any) -> str | bool:
    """An ``_all_docs`` range end as CouchDB's raw id order sees it: a string, or
    True above every id (``MAX``), False below every id (any value not a string:
    Erlang orders every number, list and object before every binary)."""
    if value is mangoplan.MAX:
        return True
    return value if isinstance(value, str) else False


def _all_docs_range(ranges: list[Any], descending: bool) -> tuple[str | None, str | None] | None:
    """``(startkey, endkey)`` of the scan (None: open), or None when no id fits."""
    low = _id_bound(mangoplan.start_key(mango.ALL_DOCS, ranges))
    high = _id_bound(mangoplan.end_key(mango.ALL_DOCS, ranges))
    if descending:
        # From the high end down: nothing is at or below a bound under every id.
        if high is False or low is True:
            return None
        return (None if high is True else high), (None if low is False else low)
    if low is True or high is False:
        return None
    return (None if low is False else low), (None if high is True else high)


def _scan_all_docs(db: settee.Database, q: FindQuery, ranges: list[Any]) -> _Scan:
    """One scan in id order between the ``_id`` range's ends, a page of ``all_docs``
    at a time. Design documents are read and counted, not returned (handle_all_docs_message
    drops them after the shard has examined them)."""
    scan = _Scan(to_skip=q.skip)
    bounds = _all_docs_range(ranges, q.descending)
    if bounds is None:
        return scan
    start, end = bounds
    resume = None
    if q.after is not None:
        start = resume = q.after[0]
    exhausted = False
    while not exhausted:
        page = db.all_docs(
            startkey=start,
            endkey=end,
            limit=_SCAN_PAGE + 1,
            include_docs=True,
            descending=q.descending,
        )["rows"]
        exhausted = len(page) <= _SCAN_PAGE
        rows = page[:_SCAN_PAGE]
        if rows and rows[0]["id"] == resume:
            rows = rows[1:]  # the previous page's last document
        if q.conflicts:
            revs.add_conflicts(db, [row["doc"] for row in rows])
        for row in rows:
            start = resume = row["id"]
            scan.examined(doc=q.r == 1, quorum=q.r > 1)
            if not selector.matches(q.selector, row["doc"]):
                continue
            if start.startswith("_design/"):
                scan.dropped()
                continue
            if scan.take(q, row["doc"], [start]):
                return scan
    scan.sent()
    return scan


async def read_find_query(
    state: State, request: web.BaseRequest
) -> tuple[dict[str, Any], FindQuery]:
    if request.method != "POST":
        raise method_not_allowed("POST")
    require_json_content(request.headers)
    body = await state.run(decode_object, await state.read_body(request))
    return body, parse_find(body)


async def handle_find(state: State, request: web.BaseRequest, entry: DbEntry) -> web.StreamResponse:
    _body, q = await read_find_query(state, request)
    started = time.monotonic()
    found = await state.run(retryable, open_find, entry, q, state.registry.view_index)
    if found.view is not None and q.update:
        await update_index(state, entry, found.view, found.index)
    result = await state.run(retryable, run_find, entry, q, found, started)
    return respond(reply(200, result))
