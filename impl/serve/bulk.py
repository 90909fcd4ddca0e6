"""The endpoints that take many documents in one request, as replicators use
them: ``_bulk_docs`` (``new_edits``, ``all_or_nothing``, ``_local/`` documents
among the others), ``_bulk_get`` (JSON, or multipart with the attachments as
parts), ``_revs_diff`` and ``_missing_revs``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from aiohttp import web

import settee
from settee.docinfo import DocInfo
from settee.serve import mime, revs
from settee.serve.docchecks import check_doc, docid_problem, new_doc_id, revisions_win
from settee.serve.encoding import with_encoding_info
from settee.serve.protocol import (
    HTTPError,
    decode_object,
    naming,
    query_true,
    reply,
    require_json_content,
    require_method,
    respond,
    too_large,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.validation import validate_writes
from settee.spec.attachments import since_position
from settee.spec.docs import validate_doc
from settee.spec.revs import check_rev

__all__ = ["handle_bulk_docs", "handle_bulk_get", "handle_missing_revs", "handle_revs_diff"]


def _bulk_docs(state: State, entry: DbEntry, raw: bytes) -> Any:
    payload = decode_object(raw)
    docs = payload.get("docs")
    if docs is None:
        raise HTTPError(400, "bad_request", "POST body must include `docs` parameter.")
    if not isinstance(docs, list):
        raise HTTPError(400, "bad_request", "`docs` parameter must be an array.")
    new_edits = payload.get("new_edits", True)
    if not isinstance(new_edits, bool):
        raise HTTPError(400, "bad_request", "`new_edits` parameter must be a boolean.")
    for doc in docs:  # every one before any is stored (couch_db:doc_from_json_obj_validate)
        check_doc(doc)
    # _local/ documents are stored last: a request refused (a 400 for another
    # document) must have stored none of them (found in review).
    local_docs = {i: doc for i, doc in enumerate(docs) if _is_local(doc)}
    docs = [doc for i, doc in enumerate(docs) if i not in local_docs]
    prepared = []
    for doc in docs:
        if "_id" not in doc:  # only when absent: check_doc refused "" and null
            doc = {**doc, "_id": new_doc_id()}
        doc = revisions_win(doc)
        if not new_edits and "_rev" not in doc and "_revisions" not in doc:
            raise HTTPError(
                400,
                "bad_request",
                "When `new_edits: false`, the document needs `_rev` or `_revisions` specified",
            )
        prepared.append(doc)
    if new_edits and payload.get("all_or_nothing") is True:
        return reply(417, _not_atomic(_with_local(local_docs, prepared, new_edits=True)))
    verdicts = validate_writes(entry, prepared, replicated=not new_edits)
    accepted = [doc for doc, refusal in zip(prepared, verdicts, strict=True) if refusal is None]
    try:
        results = entry.db.bulk_docs(accepted, new_edits=new_edits) if accepted else []
    except settee.BadRequest as exc:
        raise naming(exc, _too_large_id(entry, accepted, new_edits)) from None
    if accepted:
        state.notify(entry)
    if len(accepted) < len(prepared):
        results = _with_refusals(prepared, verdicts, results, new_edits)
    local = {i: _bulk_local(entry, doc) for i, doc in local_docs.items()}
    if local:
        results = _with_local(local, results, new_edits)
    return reply(201, results)


def _too_large_id(entry: DbEntry, docs: list[dict[str, Any]], new_edits: bool) -> Any:
    """The id of the first document past ``max_document_size``, as CouchDB names it
    in its 413 (None when the refusal was for something else)."""
    limit = entry.db.config["max_document_size"]
    for doc in docs:
        try:
            validate_doc(doc, new_edits=new_edits, max_document_size=limit)
        except settee.BadRequest as exc:
            if too_large(exc):
                return doc["_id"]
    return None


def _not_atomic(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The 417 rows of ``"all_or_nothing": true``: CouchDB 3 refuses every document
    and writes none (fabric_doc_update:validate_atomic_update; bulk_docs_test.exs)."""
    return [
        {
            "id": doc["_id"],
            "rev": _given_rev(doc),
            "error": "not_implemented",
            "reason": "all_or_nothing is not supported",
        }
        for doc in docs
    ]


def _given_rev(doc: dict[str, Any]) -> str:
    """The revision a document in a write names, as couch_doc:rev_to_str shows its
    ``revs``: ``_revisions``' newest, else ``_rev``, else ``0-`` (a new document)."""
    revisions = doc.get("_revisions")
    if isinstance(revisions, dict) and isinstance(revisions.get("ids"), list) and revisions["ids"]:
        return f"{revisions.get('start')}-{revisions['ids'][0]}"
    rev = doc.get("_rev")
    return rev if isinstance(rev, str) else "0-"


def _is_local(doc: Any) -> bool:
    return isinstance(doc, dict) and str(doc.get("_id", "")).startswith("_local/")


def _bulk_local(entry: DbEntry, doc: dict[str, Any]) -> dict[str, Any]:
    """A ``_local/`` document inside ``_bulk_docs``: stored as ``PUT /db/_local/id``
    stores it (CouchDB accepts them here), its answer row or error row."""
    doc_id = str(doc["_id"])
    try:
        if doc_id == "_local/":
            raise HTTPError(400, "bad_request", "Invalid _local document id.")
        rev = entry.local.put(doc_id, doc, doc.get("_rev"))
    except (HTTPError, settee.SetteeError) as exc:
        return {"id": doc_id, "error": exc.error, "reason": exc.reason}
    return {"ok": True, "id": doc_id, "rev": rev}


def _with_local(
    local: dict[int, dict[str, Any]], results: list[dict[str, Any]], new_edits: bool
) -> list[dict[str, Any]]:
    """The answer rows with the ``_local/`` documents' rows in their places."""
    if not new_edits:
        return [row for row in local.values() if "error" in row] + results
    others = iter(results)
    total = len(local) + len(results)
    return [local[i] if i in local else next(others) for i in range(total)]


def _with_refusals(
    docs: list[dict[str, Any]],
    verdicts: list[HTTPError | None],
    results: list[dict[str, Any]],
    new_edits: bool,
) -> list[dict[str, Any]]:
    """The answer rows in request order, a refused document's row in its place (with
    ``new_edits=false`` only failures have rows, so refusals come first, each with
    the revision it carried: couch_db:prep_and_validate_replicated_updates tags its
    errors {Id, Rev}, which chttpd_db:update_doc_result_to_json/1 shows)."""
    refused = [(doc, v) for doc, v in zip(docs, verdicts, strict=True) if v is not None]
    if not new_edits:
        return [
            {"id": doc["_id"], "rev": _given_rev(doc), "error": v.error, "reason": v.reason}
            for doc, v in refused
        ] + results
    refusals = iter({"id": doc["_id"], "error": v.error, "reason": v.reason} for doc, v in refused)
    written = iter(results)
    return [next(refusals) if v is not None else next(written) for v in verdicts]


async def handle_bulk_docs(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    require_method(request, "POST")
    require_json_content(request.headers)
    raw = await state.read_body(request)
    return respond(await state.run(_bulk_docs, state, entry, raw))


def _bulk_get_one(
    db: settee.Database, item: Any, query: Mapping[str, str], *, stubs: bool = False
) -> dict[str, Any]:
    """One ``docs`` item's answer; ``stubs``: every attachment as a stub (the
    multipart answer sends the bytes as parts instead)."""
    if not isinstance(item, dict) or not item:  # bulk_get_parse_arg matches {[_ | _]}
        return _bulk_error(None, None, "bad_request", "document must be a JSON object")
    doc_id, rev = item.get("id"), item.get("rev")
    if "id" not in item:
        return _bulk_error(None, None, "bad_request", "document id missed")
    problem = docid_problem(doc_id)  # chttpd_db:bulk_get_parse_doc_id
    if problem is not None:
        return _bulk_error(doc_id, None, "illegal_docid", problem)
    if rev is not None:
        try:
            rev = _couch_rev(rev)  # bulk_get_parse_revs: couch_doc:parse_rev
        except HTTPError:
            return _bulk_error(doc_id, rev, "bad_request", revs.INVALID_REV)
    refusal = _atts_since_error(doc_id, item)
    if refusal is not None:
        return refusal
    since = item.get("atts_since") or None  # [] names no revision: stubs, as when absent
    if str(doc_id).startswith("_local/") or (rev is not None and not _storable(rev)):
        # No revision tree holds a _local document, nor a rev settee cannot store
        # (0-x): couch_db:open_doc_revs_int finds none, and bulk_get_docs answers
        # that as any missing document or revision.
        return _bulk_error(doc_id, "undefined" if rev is None else rev, "not_found", "missing")
    try:
        results = revs.open_revs(
            db,
            doc_id,
            None if rev is None else [rev],
            latest=query_true(query, "latest"),
            revisions=query_true(query, "revs"),
            attachments=not stubs and query_true(query, "attachments"),
            atts_since=None if stubs else since,
        )
    except settee.BadRequest as exc:
        return _bulk_error(doc_id, rev, "bad_request", str(exc))
    if not results:
        return _bulk_error(doc_id, "undefined" if rev is None else rev, "not_found", "missing")
    if query_true(query, "att_encoding_info"):  # parse_doc_query's option
        results = [{"ok": with_encoding_info(db, r["ok"])} if "ok" in r else r for r in results]
    docs = [
        r if "ok" in r else _bulk_error(doc_id, r["missing"], "not_found", "missing")["docs"][0]
        for r in results
    ]
    return {"id": doc_id, "docs": docs}


def _atts_since_error(doc_id: Any, item: dict[str, Any]) -> dict[str, Any] | None:
    """chttpd_db:parse_field's refusal of an item's ``atts_since``, if any: not a
    list, or a list holding a bad rev; the row's ``rev`` is the bad value itself."""
    if "atts_since" not in item:
        return None
    since = item["atts_since"]
    if not isinstance(since, list):
        return _bulk_error(doc_id, since, "bad_request", "att_since value must be array of revs.")
    for rev in since:
        if revs.parse_rev_list([rev]) is None:
            return _bulk_error(doc_id, rev, "bad_request", "Invalid rev format")
    return None


def _bulk_error(doc_id: Any, rev: Any, error: str, reason: str) -> dict[str, Any]:
    body = {"id": doc_id, "rev": rev, "error": error, "reason": reason}
    return {"id": doc_id, "docs": [{"error": body}]}


def _bulk_get_items(raw: bytes, query: Mapping[str, str]) -> list[Any]:
    for name in ("open_revs", "new_edits", "w", "rev", "atts_since"):
        if name in query:
            raise HTTPError(400, "bad_request", f'"{name}" query parameter is not acceptable')
    payload = decode_object(raw)
    docs = payload.get("docs")
    if not isinstance(docs, list):
        raise HTTPError(400, "bad_request", "Missing JSON list of 'docs'.")
    return docs


def _bulk_get(db: settee.Database, raw: bytes, query: Mapping[str, str]) -> Any:
    items = _bulk_get_items(raw, query)
    return reply(200, {"results": [_bulk_get_one(db, item, query) for item in items]})


def _bulk_get_related(db: settee.Database, raw: bytes, query: Mapping[str, str]) -> list[Any]:
    """``_bulk_get``'s answers for a multipart response: each revision as a
    ``mime.Related`` (its attachments above the item's ``atts_since`` following),
    each error as its JSON body."""
    out: list[Any] = []
    for item in _bulk_get_items(raw, query):
        answer = _bulk_get_one(db, item, query, stubs=True)
        since = item.get("atts_since") if isinstance(item, dict) else None
        found = since and any("ok" in entry for entry in answer["docs"])
        info = revs.doc_info(db, item["id"]) if found else None
        for entry in answer["docs"]:
            if "ok" in entry:
                out.append(mime.related(db, entry["ok"], _since_position(info, entry["ok"], since)))
            else:
                out.append(entry["error"])
    return out


def _since_position(info: DocInfo | None, doc: dict[str, Any], since: Any) -> int:
    """``atts_since``'s position for the revision ``doc`` is (0: none named)."""
    return 0 if info is None else since_position(info.tree, doc["_rev"], since)


async def _send_bulk_get(
    state: State, request: web.BaseRequest, db: settee.Database, answers: list[Any], mixed: bool
) -> web.StreamResponse:
    outer, inner = mime.new_boundary(), mime.new_boundary()
    kind = "multipart/mixed" if mixed else "multipart/related"
    headers = {"Content-Type": f'{kind}; boundary="{outer.decode()}"'}
    response = web.StreamResponse(status=200, headers=headers)
    await response.prepare(request)
    for answer in answers:
        await response.write(b"\r\n--" + outer)
        if isinstance(answer, mime.Related) and answer.followers:
            head = (
                b"\r\nX-Doc-Id: "
                + mime.header_value(answer.doc_id)
                + b"\r\nX-Rev-Id: "
                + mime.header_value(answer.rev)
                + f"\r\nContent-Type: {answer.content_type(inner)}\r\n\r\n".encode()
            )
            await response.write(head)
            await mime.write_related(state, response, db, answer, inner)
        elif isinstance(answer, mime.Related):
            await response.write(b"\r\nContent-Type: application/json\r\n\r\n" + answer.json)
        else:
            await response.write(b'\r\nContent-Type: application/json; error="true"\r\n\r\n')
            await response.write(reply(200, answer).body)
    if answers:
        await response.write(b"\r\n--" + outer + b"--\r\n")
    await response.write_eof()
    return response


async def handle_bulk_get(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    require_method(request, "POST")
    require_json_content(request.headers)
    raw = await state.read_body(request)
    accept = request.headers.get("Accept")
    if mime.wants_multipart(accept, ("multipart/mixed", "multipart/related"), unless_json=True):
        answers = await state.run(_bulk_get_related, entry.db, raw, request.query)
        mixed = mime.wants_multipart(accept, ("multipart/mixed",), unless_json=True)
        return await _send_bulk_get(state, request, entry.db, answers, mixed)
    return respond(await state.run(_bulk_get, entry.db, raw, request.query))


def _couch_rev(value: Any) -> str:
    """A revision as couch_doc:parse_rev reads it (fabric:get_missing_revs parses
    each one) and couch_doc:rev_to_str writes it back: the position an integer, a
    32-digit hash as hex in lower case; anything else 400 "Invalid rev format"."""
    pos, dash, hash_ = value.partition("-") if isinstance(value, str) else ("", "", "")
    if not dash or not re.fullmatch(r"\+?[0-9]+", pos):  # list_to_integer's syntax
        raise HTTPError(400, "bad_request", revs.INVALID_REV)
    if len(hash_) == 32:
        if not re.fullmatch(r"[0-9a-fA-F]{32}", hash_):
            raise HTTPError(400, "bad_request", revs.INVALID_REV)  # list_to_integer(_, 16)
        hash_ = hash_.lower()
    # The integer's digits, written without int(): a position may have any length.
    return f"{pos.lstrip('+').lstrip('0') or '0'}-{hash_}"


def _storable(rev: str) -> bool:
    try:
        check_rev(rev)
    except settee.BadRequest:
        return False
    return True


def _checked_revs_diff(db: settee.Database, asked: dict[str, Any]) -> dict[str, Any]:
    """``db.revs_diff`` of a request's revisions as CouchDB reads them: a rev it
    parses but settee could never store (``0-x``, a position past 2**63 - 1) is
    missing, as no document holds it, and one it cannot parse is a 400."""
    known: dict[str, list[str]] = {}
    unknown: dict[str, list[str]] = {}
    for doc_id, value in asked.items():
        if not isinstance(value, list):
            raise HTTPError(400, "bad_request", "Invalid list of revisions")
        for rev in map(_couch_rev, value):
            (known if _storable(rev) else unknown).setdefault(doc_id, []).append(rev)
    result = db.revs_diff(known)
    for doc_id, extra in unknown.items():
        entry = result.setdefault(doc_id, {"missing": []})
        listed = set(entry["missing"])
        entry["missing"] = entry["missing"] + [r for r in dict.fromkeys(extra) if r not in listed]
    return result


def _revs_diff(db: settee.Database, raw: bytes) -> Any:
    return reply(200, _checked_revs_diff(db, decode_object(raw)))


async def handle_revs_diff(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    require_method(request, "POST")
    require_json_content(request.headers)
    raw = await state.read_body(request)
    return respond(await state.run(_revs_diff, entry.db, raw))


def _missing_revs(db: settee.Database, raw: bytes) -> Any:
    diff = _checked_revs_diff(db, decode_object(raw))
    missing = {doc_id: e["missing"] for doc_id, e in diff.items()}
    return reply(200, {"missing_revs": missing})


async def handle_missing_revs(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``POST /{db}/_missing_revs``: ``_revs_diff`` without ``possible_ancestors``
    (chttpd_db), the form replicators before CouchDB 1.1 asked."""
    require_method(request, "POST")
    require_json_content(request.headers)
    raw = await state.read_body(request)
    return respond(await state.run(_missing_revs, entry.db, raw))
