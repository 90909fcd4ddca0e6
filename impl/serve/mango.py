"""Mango ``json`` indexes: ``/{db}/_index`` and the index ``_find`` picks.

An index is what CouchDB stores for it (mango_idx_view): a view in a design
document whose ``language`` is ``"query"``, ``{"map": {"fields": {f: "asc"},
"partial_filter_selector": {...}}, "reduce": "_count", "options": {"def":
{"fields": [...]}}}``. Its rows are kept by the same persistent, incremental
``ViewIndex`` (a settee database, so a B+tree) as JavaScript views; the map is
native: a document that has every indexed field (and matches the partial
filter, if any) emits the key ``[value of each field]``, others emit nothing.

Which index ``_find`` uses, and the key range it reads, is
``settee.serve.mangoplan``'s to decide, as CouchDB's query planner does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import settee
from settee.serve.protocol import HTTPError
from settee.serve.viewindex import signature
from settee.spec import selector

__all__ = [
    "ALL_DOCS",
    "MangoIndex",
    "create_index",
    "delete_index",
    "list_indexes",
    "parse_index_request",
]


def _bad(error: str, reason: str) -> HTTPError:
    return HTTPError(400, error, reason)


@dataclasses.dataclass(frozen=True, slots=True)
class MangoIndex:
    """One index: ``ddoc`` None for the special ``_all_docs`` index."""

    ddoc: str | None
    name: str
    fields: tuple[str, ...]
    partial: Any = None  # the partial_filter_selector as given (a JSON object), or None
    descending: bool = False  # its fields given as {"f": "desc"} (rows still ascend)
    _partial_normal: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.partial:
            object.__setattr__(self, "_partial_normal", selector.normalize(self.partial))

    @property
    def paths(self) -> tuple[tuple[str, ...], ...]:
        return tuple(selector.parse_field(f) for f in self.fields)

    def definition(self) -> dict[str, Any]:
        """``def`` as ``GET /{db}/_index`` shows it."""
        out: dict[str, Any] = {"fields": [{f: self.direction} for f in self.fields]}
        if self.partial:
            out["partial_filter_selector"] = self.partial
        return out

    def listed(self) -> dict[str, Any]:
        kind = "special" if self.ddoc is None else "json"
        shown: dict[str, Any] = {"ddoc": self.ddoc, "name": self.name, "type": kind}
        if self.ddoc is not None:
            shown["partitioned"] = False
        return shown | {"def": self.definition()}

    def view(self) -> dict[str, Any]:
        """The design document view that stores this index (mango_idx_view)."""
        map_part: dict[str, Any] = {"fields": {f: self.direction for f in self.fields}}
        map_part["partial_filter_selector"] = self.partial or {}
        return {"map": map_part, "reduce": "_count", "options": {"def": {"fields": self.fields}}}

    @property
    def direction(self) -> str:
        """How ``def`` names its fields' direction (mango_sort: one for all)."""
        return "desc" if self.descending else "asc"

    def view_signature(self) -> str:
        """The signature of the ``ViewIndex`` holding the rows: a hash of what
        decides them (the fields and the partial filter)."""
        source = json.dumps({"fields": self.fields, "partial": self.partial}, sort_keys=True)
        return signature("mango:" + source, "query")

    def emitted(self, doc: dict[str, Any]) -> list[tuple[Any, Any]]:
        """The rows ``doc`` puts in the index: ``([values], None)``, or none."""
        values = []
        for path in self.paths:
            found, value = selector.field_value(doc, path)
            if not found:
                return []
            values.append(value)
        if self._partial_normal is not None and not selector.matches(self._partial_normal, doc):
            return []
        return [(values, None)]


#: CouchDB's special index: documents by ``_id``.
ALL_DOCS = MangoIndex(None, "_all_docs", ("_id",))


# -- creating, listing and deleting ---------------------------------------------------------


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 200 else text[:200] + "..."


def _fields_of(raw: Any) -> tuple[tuple[str, ...], bool]:
    """Index fields checked as mango_sort:new checks them (names, or one-member
    objects naming ``asc`` or ``desc``, all one way)."""
    if not isinstance(raw, list):
        raise _bad("invalid_sort_json", f"Sort must be an array of sort specs, not: {_show(raw)}")
    if not raw:  # CouchDB would store an index of no columns
        raise _bad("invalid_index_fields", "Index fields must be a non-empty array of fields")
    fields, directions = [], set()
    for spec in raw:
        if isinstance(spec, dict) and len(spec) == 1:
            [(name, direction)] = spec.items()
            if direction in ("asc", "desc"):
                spec = name
                directions.add(direction)
        if not isinstance(spec, str) or not spec:
            raise _bad("invalid_sort_field", f"Invalid sort field: {_show(spec)}")
        try:
            selector.parse_field(spec)
        except selector.BadSelector as exc:
            raise _bad(exc.error, exc.reason) from None
        fields.append(spec)
    if len(directions) > 1:
        raise _bad(
            "unsupported_mixed_sort",
            "Sorts currently only support a single direction for all fields.",
        )
    return tuple(fields), directions == {"desc"}


def _optional_name(body: dict[str, Any], key: str) -> str | None:
    """mango_opts:validate_non_empty_string, for ``name`` and ``ddoc``."""
    if key not in body:
        return None
    value = body[key]
    if value == "":
        raise _bad("invalid_empty_string", "Index name or ddoc cannot be empty string")
    if not isinstance(value, str):
        raise _bad("invalid_string", f"Invalid string: {_show(value)}")
    return value


_REQUEST_KEYS = ("index", "type", "name", "ddoc", "w", "partitioned")
_DEFINITION_KEYS = ("fields", "partial_filter_selector")


def parse_index_request(body: dict[str, Any]) -> MangoIndex:
    """The index a ``POST /{db}/_index`` body describes (default names: a hash of it),
    checked in the order of mango_opts:validate_idx_create, mango_idx:new and
    mango_idx_view:validate_new; a ``text`` or ``nouveau`` index is CouchDB's 503
    for a server without that service."""
    if "index" not in body:
        raise _bad("missing_required_key", "Missing required key: index")
    kind = body.get("type", "json")
    if not isinstance(kind, str):
        raise _bad("invalid_string", f"Invalid string: {_show(kind)}")
    ddoc, name = _optional_name(body, "ddoc"), _optional_name(body, "name")
    w = body.get("w", 2)
    if isinstance(w, bool) or not isinstance(w, int) or w < 1:
        raise _bad("invalid_pos_integer", f"{_show(w)} is not an integer greater than zero")
    partitioned = body.get("partitioned", False)
    if not isinstance(partitioned, bool):
        raise _bad("invalid_partitioned_value", f"Invalid partitioned value: {_show(partitioned)}")
    _no_other_keys(body, _REQUEST_KEYS)
    if kind in ("text", "nouveau"):
        raise HTTPError(503, "required index service unavailable", kind)
    if kind != "json":
        raise _bad("invalid_index", f"Invalid type for index: {kind}")
    index = body["index"]
    if not isinstance(index, dict):
        raise _bad("invalid_index", f"JSON indexes must be an object, not: {_show(index)}")
    if "fields" not in index:
        raise _bad("missing_required_key", "Missing required key: fields")
    fields, descending = _fields_of(index["fields"])
    partial = index.get("partial_filter_selector")
    if partial is not None or "partial_filter_selector" in index:
        if not isinstance(partial, dict):
            what = f"Selector must be a JSON object, not: {_show(partial)}"
            raise _bad("invalid_selector_json", what)
        try:
            selector.normalize(partial)
        except selector.BadSelector as exc:
            raise _bad(exc.error, exc.reason) from None
        partial = partial or None
    _no_other_keys(index, _DEFINITION_KEYS)
    if partitioned:
        what = "partitioned option cannot be true in a non-partitioned database."
        raise _bad("invalid_design_doc", what)
    generated = hashlib.sha1(
        json.dumps([fields, partial, *([True] if descending else [])], sort_keys=True).encode()
    ).hexdigest()
    ddoc = ddoc or generated
    ddoc_id = ddoc if ddoc.startswith("_design/") else "_design/" + ddoc
    if ddoc_id == "_design/":
        # mango_httpd checks the id with couch_doc:validate_docid before writing.
        raise _bad("illegal_docid", "Illegal document id `_design/`")
    return MangoIndex(ddoc_id, name or generated, fields, partial, descending)


def _no_other_keys(body: dict[str, Any], known: tuple[str, ...]) -> None:
    for key in body:
        if key not in known:
            raise _bad("invalid_key", f"Invalid key {key} for this request.")


def _design_docs(db: settee.Database) -> list[dict[str, Any]]:
    rows = db.all_docs(startkey="_design/", endkey="_design0", include_docs=True)["rows"]
    return [row["doc"] for row in rows if "doc" in row]


def _from_view(ddoc_id: str, name: str, view: Any) -> MangoIndex | None:
    if not isinstance(view, dict) or not isinstance(view.get("map"), dict):
        return None
    fields = view["map"].get("fields")
    if not isinstance(fields, dict) or not fields:
        return None
    partial = view["map"].get("partial_filter_selector") or None
    if partial is not None and not isinstance(partial, dict):
        return None
    try:
        names, descending = _fields_of([{f: d} for f, d in fields.items()])
        return MangoIndex(ddoc_id, name, names, partial, descending)
    except (HTTPError, selector.BadSelector):
        return None  # a design document written by hand that is not an index


def list_indexes(db: settee.Database) -> list[MangoIndex]:
    """``_all_docs`` and every json index the design documents define, by ddoc and name."""
    found = [ALL_DOCS]
    for ddoc in _design_docs(db):
        views = ddoc.get("views")
        if ddoc.get("language") != "query" or not isinstance(views, dict):
            continue
        for name in sorted(views):
            index = _from_view(ddoc["_id"], name, views[name])
            if index is not None:
                found.append(index)
    return found


def create_index(db: settee.Database, index: MangoIndex, write: Any) -> str:
    """Store ``index`` in its design document (``write``: the validated put);
    ``"created"``, or ``"exists"`` when that document already holds it."""
    assert index.ddoc is not None
    try:
        doc = db.get(index.ddoc)
    except settee.NotFound:
        doc = {"_id": index.ddoc}
    views = doc.get("views") if isinstance(doc.get("views"), dict) else {}
    stored = _from_view(index.ddoc, index.name, views.get(index.name))
    if doc.get("language") == "query" and stored == index:
        return "exists"
    if "_rev" in doc and doc.get("language") != "query":
        # mango_util:check_lang, as load_ddoc opens the design document.
        what = f"Existing design doc has an invalid language: {_show(doc.get('language'))}"
        raise _bad("invalid_ddoc_lang", what)
    write({**doc, "language": "query", "views": {**views, index.name: index.view()}})
    return "created"


def delete_index(db: settee.Database, ddoc: str, name: str, write: Any) -> None:
    """Remove index ``name`` from ``ddoc``; the design document goes when nothing but
    its language is left (mango_idx:delete; a member of its own keeps it)."""
    ddoc_id = ddoc if ddoc.startswith("_design/") else "_design/" + ddoc
    try:
        doc = db.get(ddoc_id)
    except settee.NotFound:
        raise HTTPError(404, "not_found", "missing") from None
    views = doc.get("views") if isinstance(doc.get("views"), dict) else {}
    if doc.get("language") != "query" or _from_view(ddoc_id, name, views.get(name)) is None:
        raise HTTPError(404, "not_found", "missing")
    rest = {k: v for k, v in views.items() if k != name}
    kept = {k: v for k, v in doc.items() if k != "views"}
    if rest:
        write({**doc, "views": rest})
    elif {k for k in kept if not k.startswith("_")} != {"language"}:
        write(kept)
    else:
        write({"_id": ddoc_id, "_rev": doc["_rev"], "_deleted": True})
