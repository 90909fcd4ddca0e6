"""A database's design-document functions: ``validate_doc_update`` on every write
that comes through settee serve, ``filters`` and view ``map`` functions for
``_changes``. Each function is compiled once per design-document revision
(``settee.serve.js``) and dropped when its design document changes.

Which design documents exist is read on each use (one short ``_all_docs``
range over ``_design/``), so a design document written by any request,
replication included, takes effect on the next write or feed.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

import settee
from settee.serve.js import JsFunction, Thrown, runtime
from settee.serve.protocol import HTTPError, query_json
from settee.serve.viewindex import MapOptions, ViewMapper

__all__ = [
    "DesignFunctions",
    "ViewFunctions",
    "module_root",
    "request_object",
    "user_ctx",
    "views_lib",
]


def user_ctx(db_name: str) -> dict[str, Any]:
    """CouchDB's ``userCtx`` for a request: settee serve has no users, every
    request is an admin's."""
    return {"db": db_name, "name": None, "roles": ["_admin"]}


def request_object(
    request: web.BaseRequest, db_name: str, *, body: Any, doc_id: str | None = None
) -> dict[str, Any]:
    """CouchDB's request object for design functions (chttpd_external:json_req_obj),
    but ``uuid`` and ``secObj``, which the caller adds where a function gets them:
    ``body`` as the function sees it, ``form`` the body's fields when it is a form
    sent by POST or PUT."""
    raw_path = request.rel_url.raw_path
    form: dict[str, str] = {}
    content_type = request.headers.get("Content-Type", "").lower()
    form_body = isinstance(body, str) and request.method in ("POST", "PUT")
    if form_body and content_type.startswith(_FORM):
        form = dict(urllib.parse.parse_qsl(body, keep_blank_values=True))
    return {
        "info": {"db_name": db_name},
        "id": doc_id,
        "method": request.method,
        "path": [p for p in request.rel_url.path.split("/") if p],
        "raw_path": str(request.rel_url),
        "requested_path": [p for p in raw_path.split("/") if p],
        "query": _query_object(request.query),
        "headers": dict(request.headers),
        "body": body,
        "peer": request.remote or "",
        "form": form,
        "cookie": _cookies(request.headers.get("Cookie", "")),
        "userCtx": user_ctx(db_name),
    }


_FORM = "application/x-www-form-urlencoded"


def _cookies(header: str) -> dict[str, str]:
    """``req.cookie``: the ``Cookie`` header's pairs (mochiweb's parse_cookie), a
    value's surrounding quotes off."""
    cookies: dict[str, str] = {}
    for pair in header.split(";"):
        name, eq, value = pair.strip().partition("=")
        if name and eq:
            value = value.strip()
            quoted = len(value) > 1 and value[0] == value[-1] == '"'
            cookies[name.strip()] = value[1:-1] if quoted else value
    return cookies


#: The parameters chttpd_external:json_query_keys decodes from JSON for a function.
_JSON_QUERY = frozenset({"startkey", "endkey", "key", "descending"})


def _query_object(query: Mapping[str, str]) -> dict[str, Any]:
    """``req.query``: the query string, ``startkey``, ``endkey``, ``key`` and
    ``descending`` decoded from JSON (a value that is not JSON is a 400, as
    json_query_keys' ?JSON_DECODE throws), the others as sent."""
    return {
        name: query_json({name: value}, name) if name in _JSON_QUERY else value
        for name, value in query.items()
    }


@dataclass
class _Ddoc:
    rev: str
    doc: dict[str, Any]
    #: A function leaves the isolate once nothing refers to it (js.JsFunction): a
    #: live feed that resolved its filter before the design document changed
    #: keeps calling it, as couch_changes keeps the filter it started with.
    compiled: dict[tuple[str, ...], JsFunction] = field(default_factory=dict)


class DesignFunctions:
    """The compiled functions of one database's design documents. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ddocs: dict[str, _Ddoc] = {}
        self._generation = runtime().generation

    def _current(self, db: settee.Database) -> dict[str, _Ddoc]:
        rows = db.all_docs(startkey="_design/", endkey="_design0", inclusive_end=False)["rows"]
        revs = {row["id"]: row["value"]["rev"] for row in rows}
        with self._lock:
            if self._generation != runtime().generation:
                self._ddocs.clear()  # the isolate was replaced: nothing compiled survives
                self._generation = runtime().generation
            for ddoc_id in [d for d in self._ddocs if revs.get(d) != self._ddocs[d].rev]:
                del self._ddocs[ddoc_id]
            missing = [d for d in revs if d not in self._ddocs]
        for ddoc_id in missing:
            try:
                doc = db.get(ddoc_id)
            except settee.NotFound:
                continue  # deleted meanwhile
            with self._lock:
                self._ddocs.setdefault(ddoc_id, _Ddoc(doc["_rev"], doc))
        with self._lock:
            return {d: self._ddocs[d] for d in revs if d in self._ddocs}

    def _named(self, db: settee.Database, ddoc_name: str) -> tuple[str, _Ddoc]:
        """``_design/{ddoc_name}`` and its entry; NotFound ``missing`` or ``deleted``."""
        ddoc_id = "_design/" + ddoc_name
        ddoc = self._current(db).get(ddoc_id)
        if ddoc is None:
            db.get(ddoc_id)  # raises NotFound: "missing" or "deleted"
            raise settee.NotFound("missing")
        return ddoc_id, ddoc

    def _function(
        self, ddoc: _Ddoc, ddoc_id: str, path: tuple[str, ...], source: Any
    ) -> JsFunction:
        with self._lock:
            compiled = ddoc.compiled.get(path)
        if compiled is None:
            where = f"{ddoc_id}: {'.'.join(path)}"
            compiled = runtime().compile(source, where, module_root(ddoc.doc, path))
            with self._lock:
                ddoc.compiled.setdefault(path, compiled)
        return compiled

    # -- validate_doc_update ------------------------------------------------------------------

    def validator(
        self, db: settee.Database, ctx: dict[str, Any], sec: Callable[[], dict[str, Any]]
    ) -> Callable[[dict[str, Any], dict[str, Any] | None], None] | None:
        """A check that runs every ``validate_doc_update`` on one write (new doc, old
        doc or None), raising 403/401 as a function throws ``{forbidden}``/
        ``{unauthorized}``; None when no design document has one. Design documents
        themselves are not validated (CouchDB checks only that an admin writes them)."""
        sources = [
            (ddoc_id, ddoc)
            for ddoc_id, ddoc in self._current(db).items()
            if "validate_doc_update" in ddoc.doc
        ]
        if not sources:
            return None
        security = sec()
        functions: list[JsFunction] = []

        def check(doc: dict[str, Any], old: dict[str, Any] | None) -> None:
            if str(doc.get("_id", "")).startswith("_design/"):
                # Not even compiled for a design document: one that does not compile
                # refused every write, its own fix or deletion too (found probing).
                return
            if not functions:  # all or none: a later document must not pass a subset
                functions.extend([self._validate_doc_update(i, ddoc) for i, ddoc in sources])
            for function in functions:
                try:
                    function(doc, old, ctx, security)
                except Thrown as thrown:
                    raise _refusal(thrown.value) from None

        return check

    def _validate_doc_update(self, ddoc_id: str, ddoc: _Ddoc) -> JsFunction:
        source = ddoc.doc["validate_doc_update"]
        return self._function(ddoc, ddoc_id, ("validate_doc_update",), source)

    # -- views -------------------------------------------------------------------------------

    def view(self, db: settee.Database, ddoc_name: str, view_name: str) -> ViewFunctions:
        """A view's map function (compiled), its sources and reduce; 404 as CouchDB
        when the design document (``missing``) or the view (``missing_named_view``)
        is absent."""
        ddoc_id, ddoc = self._named(db, ddoc_name)
        views = ddoc.doc.get("views")
        view = views.get(view_name) if isinstance(views, dict) else None
        if not isinstance(view, dict):
            raise settee.NotFound("missing_named_view")
        source = view.get("map")
        function = self._function(ddoc, ddoc_id, ("views", view_name, "map"), source)
        mapper = ViewMapper(function, MapOptions.of(ddoc.doc, view))
        reduce = view.get("reduce")
        reducer = None
        if isinstance(reduce, str) and not reduce.startswith("_"):
            reducer = self._function(ddoc, ddoc_id, ("views", view_name, "reduce"), reduce)
        language = ddoc.doc.get("language", "javascript")
        lib = views_lib(ddoc.doc)
        return ViewFunctions(mapper, str(source), reduce, reducer, str(language), lib)

    # -- _changes filters ---------------------------------------------------------------------

    def changes_filter(
        self, db: settee.Database, kind: str, ddoc_name: str, name: str, req: dict[str, Any]
    ) -> Callable[[dict[str, Any]], bool]:
        """``filter=ddoc/name`` (kind ``filters``) or ``filter=_view&view=ddoc/name``
        (kind ``views``: a document passes when the map function emits): a
        predicate over documents; 404 as CouchDB when either is missing."""
        ddoc_id, ddoc = self._named(db, ddoc_name)
        functions = ddoc.doc.get(kind)
        if not isinstance(functions, dict):
            raise settee.NotFound(f"missing json key: {kind}")
        if name not in functions:
            raise settee.NotFound(f"missing json key: {name}")
        if kind == "views":
            view = functions[name]
            source = view.get("map") if isinstance(view, dict) else None
            mapper = self._function(ddoc, ddoc_id, ("views", name, "map"), source)
            return _answering_throws(lambda doc: bool(mapper.emitted(doc)))
        function = self._function(ddoc, ddoc_id, ("filters", name), functions[name])
        return _answering_throws(lambda doc: _truthy(function(doc, req)))

    # -- update functions ---------------------------------------------------------------------

    def update_function(self, db: settee.Database, ddoc_name: str, name: str) -> JsFunction:
        """``updates.{name}`` of ``_design/{ddoc_name}``, compiled; 404 as CouchDB when
        the design document or the function is missing."""
        return self.named_function(db, ddoc_name, "updates", name)[0]

    def named_function(
        self, db: settee.Database, ddoc_name: str, member: str, name: str
    ) -> tuple[JsFunction, dict[str, Any]]:
        """``{member}.{name}`` of ``_design/{ddoc_name}`` (``updates``, ``shows``,
        ``lists``), compiled, and the design document (a render function's ``this``;
        its ``_rev`` is in show and list ETags); 404 as CouchDB (loop.js) when the
        design document or the function is missing."""
        ddoc_id, ddoc = self._named(db, ddoc_name)
        functions = ddoc.doc.get(member)
        if not isinstance(functions, dict) or name not in functions:
            raise HTTPError(
                404, "not_found", f"missing {member} function {name} on design doc {ddoc_id}"
            )
        return self._function(ddoc, ddoc_id, (member, name), functions[name]), ddoc.doc


def module_root(ddoc: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """What the function at ``path`` may ``require`` from (couchjs's compileFunction):
    a map function the views' ``lib`` alone (couch_mrview sends only that), a
    JavaScript reduce nothing, any other function the whole design document."""
    if path[0] != "views":
        return ddoc
    if path[-1] == "reduce":
        return None
    return {"views": {"lib": views_lib(ddoc)}}


def views_lib(ddoc: Mapping[str, Any]) -> Any:
    """The design document's ``views.lib`` (``{}`` when it has none)."""
    views = ddoc.get("views")
    lib = views.get("lib") if isinstance(views, dict) else None
    return lib if lib is not None else {}


@dataclass(frozen=True)
class ViewFunctions:
    mapper: ViewMapper
    map_source: str
    reduce: Any  # None, a builtin name ("_count", ...) or JavaScript source
    reducer: JsFunction | None  # the compiled JavaScript reduce
    language: str
    lib: Any = None  # views.lib, which the map function may require: part of its signature


def _answering_throws(
    passes: Callable[[dict[str, Any]], bool],
) -> Callable[[dict[str, Any]], bool]:
    """``passes``, a value it throws answered as couchjs's handleError names it: a
    thrown ``{error, reason}`` or ``["error", error, reason]`` by its own names,
    anything else ``unnamed_error``. The feed fails (couch_query_servers gets the
    error for the whole batch); a 400, as settee answers a design function's
    error, not CouchDB's 500."""

    def checked(doc: dict[str, Any]) -> bool:
        try:
            return passes(doc)
        except Thrown as thrown:
            value = thrown.value
            if isinstance(value, dict) and {"error", "reason"} <= value.keys():
                raise HTTPError(400, str(value["error"]), _text(value["reason"])) from None
            if isinstance(value, list) and len(value) == 3 and value[0] == "error":
                raise HTTPError(400, str(value[1]), _text(value[2])) from None
            raise HTTPError(400, "unnamed_error", _text(value)) from None

    return checked


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _truthy(value: Any) -> bool:
    """JavaScript's truthiness of a JSON value."""
    if isinstance(value, float) and value != value:
        return False
    return value not in (None, False, 0, "")  # [] and {} are truthy, and unequal to these


def _refusal(value: Any) -> HTTPError:
    if isinstance(value, dict) and len(value) == 1:
        [(key, message)] = value.items()
        reason = message if isinstance(message, str) else str(message)
        if key == "forbidden":
            return HTTPError(403, "forbidden", reason)
        if key == "unauthorized":
            return HTTPError(401, "unauthorized", reason)
        return HTTPError(400, "unknown_error", reason)
    return HTTPError(400, "unknown_error", value if isinstance(value, str) else str(value))
