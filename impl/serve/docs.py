"""Document endpoints: ``/{db}/{docid}`` (GET, PUT, DELETE, with ``open_revs``,
``revs``, ``revs_info``, ``conflicts``, ``new_edits``, ``If-Match``), ``POST
/{db}`` and ``/{db}/_local/{id}``.

Each handler parses the URL and headers on the event loop, then does the rest
(JSON decoding, the engine call, JSON encoding) in one function on a worker.
Status codes follow chttpd_db: 201 for a created revision, 200 for a deletion,
202 for ``batch=ok``; ``ETag`` is the new or returned rev, quoted.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from aiohttp import web

import settee
from settee.serve import mime, multipart, revs
from settee.serve.design import user_ctx
from settee.serve.protocol import (
    HTTPError,
    decode_json,
    decode_object,
    etag,
    etag_matches,
    method_not_allowed,
    query_bool,
    reply,
    require_json_content,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.spec.attachments import MissingStub, digest_of, length_of, since_position
from settee.spec.docids import new_docid
from settee.spec.docs import BODY_FIELDS, IGNORED_FIELDS, READ_FIELDS
from settee.spec.spool import Spooled

__all__ = [
    "MAX_LOCATION",
    "attachment_options",
    "check_doc",
    "handle_doc",
    "handle_local",
    "handle_post_doc",
    "new_doc_id",
    "revisions_win",
    "validate_writes",
    "validated_write",
]

#: Special members CouchDB accepts on input (couch_doc:transfer_fields): the
#: engine's own lists (read, ignored, kept as body members).
_SPECIAL = READ_FIELDS | IGNORED_FIELDS | BODY_FIELDS


#: The multipart types a client may name to get a multipart answer.
_MULTIPART = ("multipart/mixed", "multipart/related")

#: The longest ``Location`` header sent (the header-line limit of common HTTP stacks).
MAX_LOCATION = 8192


def new_doc_id() -> str:
    """An id for a document that came without one: the engine's own (CouchDB's
    ``sequential`` couch_uuids algorithm, ``settee.spec.docids``)."""
    return new_docid()


def revisions_win(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as CouchDB reads it when ``_rev`` and ``_revisions`` both come:
    ``_revisions`` names the revision (couch_doc:transfer_fields skips ``_rev``
    then), so a ``_rev`` that disagrees is not an error. PouchDB sends such docs."""
    if "_revisions" in doc and "_rev" in doc:
        return {k: v for k, v in doc.items() if k != "_rev"}
    return doc


def check_doc(doc: Any) -> None:
    """CouchDB's own document checks, so clients see its error names (the engine
    then applies every rule of SEMANTICS.md §2 and answers ``bad_request``)."""
    if not isinstance(doc, dict):
        raise HTTPError(400, "bad_request", "Document must be a JSON object")
    for key in doc:
        if key.startswith("_") and key not in _SPECIAL:
            raise HTTPError(400, "doc_validation", f"Bad special document member: {key}")
    doc_id = doc.get("_id")
    if isinstance(doc_id, str) and doc_id.startswith("_") and not doc_id.startswith("_design/"):
        raise HTTPError(
            400, "illegal_docid", "Only reserved document ids may start with underscore."
        )


def _header_rev(headers: Mapping[str, str]) -> str | None:
    value = headers.get("If-Match")
    return value.strip().strip('"') if value is not None else None


def _explicit_rev(query: Mapping[str, str], headers: Mapping[str, str]) -> str | None:
    """The rev named by ``?rev=`` and/or ``If-Match`` (chttpd extract_header_rev)."""
    qrev, hrev = query.get("rev"), _header_rev(headers)
    if qrev is not None and hrev is not None and qrev != hrev:
        raise HTTPError(400, "bad_request", "Document rev and etag have different values")
    return qrev if qrev is not None else hrev


def _url_encode_id(doc_id: str) -> str:
    prefix = next((p for p in ("_design/", "_local/") if doc_id.startswith(p)), "")
    rest = doc_id[len(prefix) :]
    return prefix + urllib.parse.quote(rest, safe="", errors="surrogatepass")


def _location(request: web.BaseRequest) -> str:
    return str(request.url.with_query(None))


# -- GET ------------------------------------------------------------------------------------


def _get_doc(db: settee.Database, doc_id: str, query: Mapping[str, str]) -> Any:
    revs_flag = query_bool(query, "revs")
    latest = query_bool(query, "latest")
    if "open_revs" in query:
        raw = query["open_revs"]
        wanted = None if raw == "all" else revs.parse_rev_list(decode_json(raw.encode()))
        if raw != "all" and wanted is None:
            raise HTTPError(400, "bad_request", "open_revs must be all or a JSON list of revs")
        results = revs.open_revs(
            db, doc_id, wanted, latest=latest, revisions=revs_flag, **attachment_options(query)
        )
        if wanted is None and not results:
            raise settee.NotFound("missing")
        return results
    meta = query_bool(query, "meta")
    rev = query.get("rev")
    if latest and rev is not None:
        rev = revs.latest_leaf(db, doc_id, rev)
    doc = db.get(
        doc_id,
        rev=rev,
        revs=revs_flag,
        conflicts=meta or query_bool(query, "conflicts"),
        **attachment_options(query),
    )
    if rev is None and (meta or query_bool(query, "deleted_conflicts")):
        deleted = revs.deleted_conflicts(db, doc_id)
        if deleted:
            doc["_deleted_conflicts"] = deleted
    # With rev= the document comes from open_doc_revs, which adds no meta fields
    # (couch_db:make_doc), as for _conflicts and _deleted_conflicts above.
    if rev is None and (meta or query_bool(query, "revs_info")):
        doc["_revs_info"] = revs.revs_info(db, doc_id, doc["_rev"])
    if rev is None and query_bool(query, "local_seq"):
        # couch_db:doc_meta_info: the document's update seq in its own shard, of the
        # revision returned: read again should a write land between the two reads
        # (found in review: _local_seq of the next revision beside this one's body).
        for _ in range(_CONSISTENT_TRIES):
            info = revs.doc_info(db, doc_id)
            if info is not None and info.winner == doc["_rev"]:
                doc["_local_seq"] = info.seq
                break
            doc = _get_doc(db, doc_id, {k: v for k, v in query.items() if k != "local_seq"})
    return doc


#: Reads of a document and its summary until both name one revision (``local_seq``):
#: each retry means a write landed between them, so a few always suffice but under
#: a writer that never pauses.
_CONSISTENT_TRIES = 8


def attachment_options(query: Mapping[str, str]) -> dict[str, Any]:
    """``?attachments=true`` and ``?atts_since=[revs]`` as ``Database.get`` takes them."""
    options: dict[str, Any] = {"attachments": query_bool(query, "attachments")}
    if "atts_since" in query:
        since = revs.parse_rev_list(decode_json(query["atts_since"].encode()))
        if since is None:
            raise HTTPError(400, "bad_request", "atts_since must be a JSON list of revisions")
        options["atts_since"] = since
    return options


def _without_attachments(query: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in query.items() if k not in ("attachments", "atts_since")}


def _doc_related(db: settee.Database, doc_id: str, query: Mapping[str, str]) -> mime.Related:
    """The document a GET names, its attachments above ``atts_since`` (all with
    ``attachments=true`` alone) following as parts."""
    since = attachment_options(query).get("atts_since")
    doc = _get_doc(db, doc_id, _without_attachments(query))
    position = 0
    if since is not None:
        info = revs.doc_info(db, doc_id)
        if info is not None:
            position = since_position(info.tree, doc["_rev"], since)
    return mime.related(doc, position)


async def _send_related(
    state: State, request: web.BaseRequest, db: settee.Database, doc: mime.Related
) -> web.StreamResponse:
    tag = etag(doc.rev)
    if etag_matches(request.headers, tag):
        return web.Response(status=304, headers={"ETag": tag})
    boundary = mime.new_boundary()
    headers = {"Content-Type": doc.content_type(boundary), "ETag": tag}
    response = web.StreamResponse(status=200, headers=headers)
    response.content_length = doc.length(boundary)
    await response.prepare(request)
    if request.method != "HEAD":
        await mime.write_related(state, response, db, doc, boundary)
    await response.write_eof()
    return response


async def _send_open_revs(
    state: State, request: web.BaseRequest, db: settee.Database, results: list[dict[str, Any]]
) -> web.StreamResponse:
    """``open_revs`` as multipart/mixed: each revision with all its attachments."""
    outer, inner = mime.new_boundary(), mime.new_boundary()
    content_type = f'multipart/mixed; boundary="{outer.decode()}"'
    response = web.StreamResponse(status=200, headers={"Content-Type": content_type})
    await response.prepare(request)
    await response.write(b"--" + outer)
    for result in results:
        if "ok" in result:
            doc = mime.related(result["ok"])
            head = f"\r\nContent-Type: {doc.content_type(inner)}\r\n\r\n".encode()
            await response.write(head)
            await mime.write_related(state, response, db, doc, inner)
        else:
            await response.write(b'\r\nContent-Type: application/json; error="true"\r\n\r\n')
            await response.write(reply(200, result).body)
        await response.write(b"\r\n--" + outer)
    await response.write(b"--")
    await response.write_eof()
    return response


async def _handle_get(
    state: State, request: web.BaseRequest, entry: DbEntry, doc_id: str
) -> web.StreamResponse:
    query = request.query
    accept = request.headers.get("Accept")
    if "open_revs" in query:
        if mime.wants_multipart(accept, _MULTIPART, unless_json=False):
            attachment_options(query)  # atts_since is checked, then ignored, as CouchDB 3
            plain = _without_attachments(query)
            results = await state.run(_get_doc, entry.db, doc_id, plain)
            return await _send_open_revs(state, request, entry.db, results)
    elif mime.wants_multipart(accept, ["multipart/related"], unless_json=False):
        wanted = attachment_options(query)
        if wanted["attachments"] or "atts_since" in wanted:
            doc = await state.run(_doc_related, entry.db, doc_id, query)
            if doc.followers:
                return await _send_related(state, request, entry.db, doc)
    result = await state.run(_get_doc, entry.db, doc_id, query)
    if isinstance(result, list):
        return respond(await state.run(reply, 200, result))
    tag = etag(result["_rev"])
    if etag_matches(request.headers, tag):
        return web.Response(status=304, headers={"ETag": tag})
    return respond(await state.run(reply, 200, result, {"ETag": tag}))


# -- PUT / DELETE / POST ----------------------------------------------------------------------


def validate_writes(entry: DbEntry, docs: list[dict[str, Any]]) -> list[HTTPError | None]:
    """The design documents' ``validate_doc_update`` verdict on each document about
    to be written: None to write it, else the refusal (403, 401, ...)."""
    check = entry.design.validator(entry.db, user_ctx(entry.name), entry.local.security)
    if check is None:
        return [None] * len(docs)
    verdicts: list[HTTPError | None] = []
    for doc in docs:
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


def _validated(entry: DbEntry, doc: dict[str, Any]) -> None:
    [refusal] = validate_writes(entry, [doc])
    if refusal is not None:
        raise refusal


def validated_write(entry: DbEntry, doc: dict[str, Any]) -> dict[str, Any]:
    """``put`` after the design documents' ``validate_doc_update`` accepted it."""
    _validated(entry, doc)
    return entry.db.put(doc)


def _put_doc(
    state: State,
    entry: DbEntry,
    doc_id: str,
    doc: dict[str, Any],
    query: Mapping[str, str],
    headers: Mapping[str, str],
) -> tuple[int, dict[str, Any]]:
    check_doc({**doc, "_id": doc_id})
    doc = {**doc, "_id": doc_id}
    if "_rev" in doc:
        if query.get("rev") not in (None, doc["_rev"]):
            raise HTTPError(
                400,
                "bad_request",
                "Document rev from request body and query string have different values",
            )
        if _header_rev(headers) not in (None, doc["_rev"]):
            raise HTTPError(400, "bad_request", "Document rev and etag have different values")
    else:
        rev = _explicit_rev(query, headers)
        if rev is not None:
            doc["_rev"] = rev
    doc = revisions_win(doc)
    if not query_bool(query, "new_edits", True):
        if "_rev" not in doc and "_revisions" not in doc:
            raise HTTPError(
                400,
                "bad_request",
                "When `new_edits: false`, the document needs `_rev` or `_revisions` specified",
            )
        _validated(entry, doc)
        failed = entry.db.bulk_docs([doc], new_edits=False)
        if failed:  # new_edits=false answers only failures: a missing stub
            raise MissingStub(failed[0]["reason"])
        state.notify(entry)
        new_rev = doc.get("_rev") or _rev_of_revisions(doc["_revisions"])
    else:
        _validated(entry, doc)
        new_rev = entry.db.put(doc)["rev"]
        state.notify(entry)
    return (200 if doc.get("_deleted") is True else 201), {"ok": True, "id": doc_id, "rev": new_rev}


def _rev_of_revisions(revisions: dict[str, Any]) -> str:
    return f"{revisions['start']}-{revisions['ids'][0]}"


def _delete_doc(
    state: State, entry: DbEntry, doc_id: str, rev: str | None
) -> tuple[int, dict[str, Any]]:
    tombstone = {"_id": doc_id, "_deleted": True} | ({"_rev": rev} if rev else {})
    _validated(entry, tombstone)
    result = entry.db.delete(doc_id, rev)
    state.notify(entry)
    return 200, result


def _written(status: int, result: dict[str, Any], location: str | None = None) -> web.Response:
    headers = {"ETag": etag(result["rev"])}
    # Clients refuse longer header lines (Python's http.client above 64 KiB), which would
    # make a write of a very long id look failed. A 201 without Location names the
    # request's own URL (RFC 9110 §15.3.2), and the body carries the id.
    if location is not None and len(location) <= MAX_LOCATION:
        headers["Location"] = location
    return respond(reply(status, result, headers))


async def handle_doc(
    state: State, request: web.BaseRequest, entry: DbEntry, doc_id: str
) -> web.StreamResponse:
    """``/{db}/{docid}`` and ``/{db}/_design/{name}``."""
    method = request.method
    if method in ("GET", "HEAD"):
        return await _handle_get(state, request, entry, doc_id)
    if method == "PUT":
        doc = await _document_of(state, request)
        status, result = await state.run(
            _put_doc, state, entry, doc_id, doc, request.query, request.headers
        )
        if request.query.get("batch") == "ok":
            return respond(reply(202, {"ok": True, "id": doc_id}))
        return _written(status, result, _location(request))
    if method == "DELETE":
        rev = _explicit_rev(request.query, request.headers)
        status, result = await state.run(_delete_doc, state, entry, doc_id, rev)
        return _written(status, result)
    raise method_not_allowed("DELETE,GET,HEAD,PUT")


async def _document_of(state: State, request: web.BaseRequest) -> dict[str, Any]:
    """A PUT's document: JSON, or ``multipart/related`` with its attachments
    spooled as the body arrives."""
    content_type = request.headers.get("Content-Type", "")
    if multipart.is_related(content_type):
        chunks = state.body_chunks(request)
        return await multipart.read_related(chunks, content_type, state.run, state.body_limit)
    return await state.run(decode_object, await state.read_body(request), "Document")


def _post_doc(state: State, entry: DbEntry, body: bytes) -> dict[str, Any]:
    doc = decode_object(body, "Document")
    if doc.get("_id") is None or doc.get("_id") == "":
        doc["_id"] = new_doc_id()  # an _id of another type is the engine's 400
    local = doc["_id"]
    if isinstance(local, str) and local.startswith("_local/") and local != "_local/":
        # couch_doc:validate_docid takes _local/ ids: the same document as PUT makes.
        rev = entry.local.put(local, doc, doc.get("_rev"))
        return {"ok": True, "id": local, "rev": rev}
    check_doc(doc)
    _validated(entry, doc)
    result = entry.db.put(doc)
    state.notify(entry)
    return result


async def handle_post_doc(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``POST /{db}``: create a document, inventing its id when it has none."""
    require_json_content(request.headers)
    body = await state.read_body(request)
    result = await state.run(_post_doc, state, entry, body)
    if request.query.get("batch") == "ok":
        return respond(reply(202, {"ok": True, "id": result["id"]}))
    # Percent-encoded: an id may hold any character, a header line may not; a slash
    # only after _design/ or _local/ (couch_util:url_encode), else a/b would name
    # attachment b of document a.
    encoded = _url_encode_id(result["id"])
    location = str(request.url.with_query(None)).rstrip("/") + "/" + encoded
    return _written(201, result, location)


async def handle_local(
    state: State, request: web.BaseRequest, entry: DbEntry, name: str
) -> web.StreamResponse:
    """``/{db}/_local/{id}``: replication checkpoints and other unreplicated docs."""
    doc_id = "_local/" + name
    if not name:
        raise HTTPError(400, "bad_request", "Invalid _local document id.")
    method = request.method
    if method in ("GET", "HEAD"):
        doc = await state.run(entry.local.get, doc_id)
        return respond(reply(200, doc, {"ETag": etag(doc["_rev"])}))
    if method == "PUT":
        body = await state.read_body(request)
        doc = await state.run(decode_object, body, "Document")
        rev = doc.get("_rev")
        if rev is None:
            rev = _explicit_rev(request.query, request.headers)
        new = await state.run(entry.local.put, doc_id, doc, rev)
        status = 200 if doc.get("_deleted") is True else 201
        # chttpd_db's db_doc_req PUT sends Location for every document it writes.
        return _written(status, {"ok": True, "id": doc_id, "rev": new}, _location(request))
    if method == "DELETE":
        rev = _explicit_rev(request.query, request.headers)
        new = await state.run(entry.local.put, doc_id, {"_deleted": True}, rev)
        return _written(200, {"ok": True, "id": doc_id, "rev": new})
    raise method_not_allowed("DELETE,GET,HEAD,PUT")
