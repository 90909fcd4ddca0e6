"""The design documents' ``validate_doc_update`` on a write: the verdict on each
document about to be written, asked by every write that comes through settee
serve (document PUT, POST, DELETE and COPY, attachments, ``_bulk_docs``, the
design documents ``_index`` writes).
"""

from __future__ import annotations

from typing import Any

import settee
from settee.serve.design import user_ctx
from settee.serve.js import js_available, runtime
from settee.serve.protocol import HTTPError
from settee.serve.reducers import rank_of
from settee.serve.registry import DbEntry, is_replicator_db
from settee.serve.repspec import replicator_doc_refusal
from settee.spec.attachments import digest_of, length_of
from settee.spec.spool import Spooled

__all__ = ["check_write", "design_doc_refusal", "validate_writes", "validated_write"]


def validate_writes(
    entry: DbEntry, docs: list[dict[str, Any]], *, replicated: bool = False
) -> list[HTTPError | None]:
    """The verdict on each document about to be written: None to write it, else the
    refusal. A design document is checked as couch_mrview:validate checks one (400
    ``invalid_design_doc``), any other by the ``validate_doc_update`` functions
    (403, 401, ...), as couch_db:validate_doc_update splits them. In a
    ``_replicator`` database a document must describe a replication (403) unless
    it is ``replicated`` (``new_edits=false``), as its before_doc_update skips them."""
    check = entry.design.validator(entry.db, user_ctx(entry.name), entry.local.security)
    replicator = is_replicator_db(entry.name) and not replicated
    verdicts: list[HTTPError | None] = []
    for doc in docs:
        if str(doc.get("_id", "")).startswith("_design/"):
            verdicts.append(design_doc_refusal(doc))
            continue
        if replicator and (refusal := replicator_doc_refusal(doc)) is not None:
            verdicts.append(refusal)
            continue
        if check is None:
            verdicts.append(None)
            continue
        try:
            check(_as_json(doc), _old_doc(entry.db, doc))
            verdicts.append(None)
        except HTTPError as exc:
            verdicts.append(exc)
    return verdicts


def _as_json(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as ``validate_doc_update`` sees it: attachments whose bytes the
    server holds (standalone and multipart PUTs) shown as stubs with their length
    and digest, as CouchDB's to_json_obj shows them; everything else as sent."""
    attachments = doc.get("_attachments")
    if not isinstance(attachments, dict):
        return doc
    shown = {}
    for name, att in attachments.items():
        data = att.get("data") if isinstance(att, dict) else None
        if isinstance(data, bytes | Spooled):
            att = {k: v for k, v in att.items() if k != "data"}
            att |= {"length": length_of(data), "digest": digest_of(data), "stub": True}
        shown[name] = att
    return {**doc, "_attachments": shown}


def _old_doc(db: settee.Database, doc: dict[str, Any]) -> dict[str, Any] | None:
    """The revision a write replaces, as ``validate_doc_update`` receives it: the one
    its ``_rev`` names, else the current winner, else None (a new document)."""
    for rev in (doc.get("_rev"), None):
        try:
            return db.get(doc["_id"], rev=rev) if rev is not None else db.get(doc["_id"])
        except (settee.NotFound, settee.BadRequest):
            continue
    return None


def check_write(entry: DbEntry, doc: dict[str, Any]) -> None:
    [refusal] = validate_writes(entry, [doc])
    if refusal is not None:
        raise refusal


def validated_write(entry: DbEntry, doc: dict[str, Any]) -> dict[str, Any]:
    """``put`` after the design documents' ``validate_doc_update`` accepted it."""
    check_write(entry, doc)
    return entry.db.put(doc)


def _ddoc_fields(map_type: str) -> list[list[tuple[str, tuple[str, ...]]]]:
    """couch_mrview:validate_ddoc_fields (CouchDB 3.5): paths into a design document,
    each step a member ("*" for every member) and the JSON types its value may
    have; a map function is an object in a Mango (``"language": "query"``) one.
    A design document stored with another (``"validate_doc_update": 7``) was taken,
    and then refused every write to its database (found probing)."""
    views, each_view = ("views", ("object",)), ("*", ("object",))
    return [
        [("filters", ("object",)), ("*", ("object", "string"))],
        [("language", ("string",))],
        [("lists", ("object",)), ("*", ("object", "string"))],
        [("options", ("object",))],
        [("options", ("object",)), ("include_design", ("boolean",))],
        [("options", ("object",)), ("local_seq", ("boolean",))],
        [("options", ("object",)), ("partitioned", ("boolean",))],
        [("rewrites", ("string", "array"))],
        [("shows", ("object",)), ("*", ("object", "string"))],
        [("updates", ("object",)), ("*", ("object", "string"))],
        [("validate_doc_update", ("string",))],
        [views, ("lib", ("object",))],
        [views, each_view, ("map", (map_type,))],
        [views, each_view, ("reduce", ("string",))],
    ]


_JSON_TYPES: dict[str, type] = {"object": dict, "string": str, "array": list, "boolean": bool}
#: The builtin reduces couch_mrview:validate takes, each by prefix as it matches them
#: (``_top_N`` and ``_bottom_N`` with their N checked: ``reducers.rank_of``).
_BUILTIN_REDUCES = ("_sum", "_count", "_stats", "_approx_count_distinct", "_first", "_last")


def design_doc_refusal(doc: dict[str, Any]) -> HTTPError | None:
    """400 ``invalid_design_doc`` with CouchDB's reason when a design document's
    members have types couch_mrview:validate refuses, it says it is partitioned, a
    view has no map function or names a builtin reduce there is none of; None when
    it may be stored."""
    for steps in _ddoc_fields("object" if doc.get("language") == "query" else "string"):
        wrong = _wrong_field(doc, steps, ())
        if wrong is not None:
            where, types = wrong
            reason = f"`{'.'.join(where)}` field must have {' or '.join(types)} type"
            return HTTPError(400, "invalid_design_doc", reason)
    if doc.get("options", {}).get("partitioned") is True:  # no database is partitioned
        reason = "partitioned option cannot be true in a non-partitioned database."
        return HTTPError(400, "invalid_design_doc", reason)
    views = doc.get("views", {})
    for name, view in views.items():
        if name != "lib" and "map" not in view:
            return HTTPError(400, "invalid_design_doc", f"View `{name}` must contain map function")
    if doc.get("language", "javascript") not in ("javascript", "query"):
        return None  # an unknown language is stored unchecked, as CouchDB stores it
    for name, view in views.items():
        reduce = view.get("reduce", "") if name != "lib" else ""
        if reduce.startswith(("_top_", "_bottom_")):
            refused = rank_of(reduce)
            if refused is not None:
                return HTTPError(400, "invalid_design_doc", refused)
        elif reduce.startswith("_") and not reduce.startswith(_BUILTIN_REDUCES):
            reason = f"`{reduce}` is not a supported reduce function."
            return HTTPError(400, "invalid_design_doc", reason)
    if doc.get("language", "javascript") == "javascript":
        return _compile_refusal(views)
    return None


def _compile_refusal(views: dict[str, Any]) -> HTTPError | None:
    """couch_query_servers:try_compile of each view's map and JavaScript reduce, as
    couch_mrview:validate compiles them when a design document is saved: 400
    ``compilation_error`` for one that does not compile (it was stored, and every
    query of the view failed). Without the JavaScript engine nothing can be
    compiled: the design document is stored, and its views answer 400 when queried."""
    if js_available() is not None:
        return None
    for name, view in views.items():
        if name == "lib":
            continue
        functions = [("map", view["map"])]
        reduce = view.get("reduce", "")
        if reduce and not reduce.startswith("_"):
            functions.append(("reduce", reduce))
        for kind, source in functions:
            try:
                runtime().compile(source, f"{kind} of view {name}")
            except HTTPError as exc:
                reason = f"Compilation of the {kind} function in the '{name}' view failed: "
                return HTTPError(400, "compilation_error", reason + exc.reason)
    return None


def _wrong_field(
    value: Any, steps: list[tuple[str, tuple[str, ...]]], at: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The first member along ``steps`` whose value has none of its types (its path
    and those types), or None; absent members are fine."""
    if not steps or not isinstance(value, dict):
        return None
    (key, types), rest = steps[0], steps[1:]
    for name in list(value) if key == "*" else [key]:
        if name not in value:
            continue
        member = value[name]
        if not any(isinstance(member, _JSON_TYPES[t]) for t in types):
            return (*at, name), types
        wrong = _wrong_field(member, rest, (*at, name))
        if wrong is not None:
            return wrong
    return None
