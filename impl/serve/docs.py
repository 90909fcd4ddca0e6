"""Document endpoints: ``/{db}/{docid}`` (GET, PUT, DELETE, with ``open_revs``,
``revs``, ``revs_info``, ``conflicts``, ``new_edits``, ``If-Match``), ``POST /{db}``
and ``/{db}/_local/{id}``. COPY is ``copy.py``'s, the checks of a document sent
``docchecks.py``'s and ``validate_doc_update`` ``validation.py``'s.

Each handler parses the URL and headers on the event loop, then does the rest
(JSON decoding, the engine call, JSON encoding) in one function on a worker.
Status codes follow chttpd_db: 201 for a created revision, 200 for a deletion,
202 for ``batch=ok``; ``ETag`` is the new or returned rev, quoted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

import settee
from settee.serve import mime, multipart, revs
from settee.serve.docchecks import (
    RevParser,
    check_doc,
    check_docid,
    check_openable,
    explicit_rev,
    header_rev,
    new_doc_id,
    revisions_win,
)
from settee.serve.doccopy import handle_copy
from settee.serve.encoding import with_encoding_info
from settee.serve.formupload import handle_form_post
from settee.serve.local import couch_rev, local_etag
from settee.serve.protocol import (
    HTTPError,
    decode_json,
    decode_object,
    doc_url,
    etag,
    etag_matches,
    method_not_allowed,
    naming,
    query_true,
    reply,
    require_json_content,
    respond,
    written,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.validation import check_write
from settee.spec.attachments import MissingStub, since_position
from settee.spec.errors import Conflict, NotFound

__all__ = ["attachment_options", "handle_doc", "handle_local", "handle_post_doc"]

log = logging.getLogger("settee.serve")

#: What chttpd_db:db_doc_req answers a document path (POST: a form upload).
_DOC_METHODS = "DELETE,GET,HEAD,POST,PUT,COPY"

#: The multipart types a client may name to get a multipart answer.
_MULTIPART = ("multipart/mixed", "multipart/related")


def _new_edits(query: Mapping[str, str]) -> bool:
    """parse_doc_query: only ``new_edits=false`` turns interactive edits off."""
    return query.get("new_edits") != "false"


# -- GET ------------------------------------------------------------------------------------


def _get_doc(db: settee.Database, doc_id: str, query: Mapping[str, str]) -> Any:
    revs_flag = query_true(query, "revs")
    latest = query_true(query, "latest")
    raw = query.get("open_revs")
    wanted = None if raw in (None, "all") else revs.request_revs(decode_json(raw.encode()))
    # chttpd_db's GET: an open_revs of [] is no open_revs, a plain read.
    if raw is not None and wanted != []:
        results = revs.open_revs(
            db, doc_id, wanted, latest=latest, revisions=revs_flag, **attachment_options(query)
        )
        if wanted is None and not results:
            raise settee.NotFound("missing")
        if query_true(query, "att_encoding_info"):
            results = [{"ok": with_encoding_info(db, r["ok"])} if "ok" in r else r for r in results]
        return results
    meta = query_true(query, "meta")
    rev = query.get("rev")
    rev = revs.request_rev(rev) if rev is not None else None
    if latest and rev is not None:
        # The leaf of rev's own branch, as PouchDB's suite expects of a server
        # (test.get.js "5857 - GET losing, old revision with latest=true", and a
        # deleted leaf answered as one). CouchDB 3.2+'s GET opens the winner
        # instead (chttpd_db sets Rev to nil), which fails those two tests.
        rev = revs.latest_leaf(db, doc_id, rev)
    if rev is None and query_true(query, "deleted"):
        # parse_doc_query's deleted option: a deleted winner is answered, not 404.
        info = revs.doc_info(db, doc_id)
        if info is not None and info.deleted:
            rev = info.winner
    doc = db.get(
        doc_id,
        rev=rev,
        revs=revs_flag,
        conflicts=meta or query_true(query, "conflicts"),
        **attachment_options(query),
    )
    if rev is None and (meta or query_true(query, "deleted_conflicts")):
        deleted = revs.deleted_conflicts(db, doc_id)
        if deleted:
            doc["_deleted_conflicts"] = deleted
    # With rev= the document comes from open_doc_revs, which adds no meta fields
    # (couch_db:make_doc), as for _conflicts and _deleted_conflicts above.
    if rev is None and (meta or query_true(query, "revs_info")):
        doc["_revs_info"] = revs.revs_info(db, doc_id, doc["_rev"])
    if rev is None and query_true(query, "local_seq"):
        # couch_db:doc_meta_info: the document's update seq in its own shard, of the
        # revision returned: read again should a write land between the two reads
        # (found in review: _local_seq of the next revision beside this one's body).
        for _ in range(_CONSISTENT_TRIES):
            info = revs.doc_info(db, doc_id)
            if info is not None and info.winner == doc["_rev"]:
                doc["_local_seq"] = info.seq
                break
            doc = _get_doc(db, doc_id, {k: v for k, v in query.items() if k != "local_seq"})
    if query_true(query, "att_encoding_info"):
        doc = with_encoding_info(db, doc)
    return doc


#: Reads of a document and its summary until both name one revision (``local_seq``):
#: each retry means a write landed between them, so a few always suffice but under
#: a writer that never pauses.
_CONSISTENT_TRIES = 8


def attachment_options(query: Mapping[str, str]) -> dict[str, Any]:
    """``?attachments=true`` and ``?atts_since=[revs]`` as ``Database.get`` takes them."""
    options: dict[str, Any] = {"attachments": query_true(query, "attachments")}
    if "atts_since" in query:
        options["atts_since"] = revs.request_revs(decode_json(query["atts_since"].encode()))
    return options


def _without_attachments(query: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in query.items() if k not in ("attachments", "atts_since")}


#: A document as multipart/related, and whether it carries meta information.
RelatedDoc = tuple[mime.Related, bool]


def _doc_related(db: settee.Database, doc_id: str, query: Mapping[str, str]) -> RelatedDoc:
    """The document a GET names, its attachments above ``atts_since`` (all with
    ``attachments=true`` alone) following as parts."""
    since = attachment_options(query).get("atts_since")
    doc = _get_doc(db, doc_id, _without_attachments(query))
    position = 0
    if since is not None:
        info = revs.doc_info(db, doc_id)
        if info is not None:
            position = since_position(info.tree, doc["_rev"], since)
    return mime.related(db, doc, position), _has_meta(doc)


def _related_since(
    db: settee.Database, doc: dict[str, Any], since: list[str] | None
) -> mime.Related:
    """``doc`` as multipart/related, its attachments above ``since`` following."""
    position = 0
    if since is not None:
        info = revs.doc_info(db, doc["_id"])
        if info is not None:
            position = since_position(info.tree, doc["_rev"], since)
    return mime.related(db, doc, position)


#: The members that come from a document's meta information (couch_db:doc_meta_info);
#: each is present only when the document has some (no _conflicts without any).
_META_MEMBERS = ("_revs_info", "_conflicts", "_deleted_conflicts", "_local_seq")


def _has_meta(doc: dict[str, Any]) -> bool:
    """chttpd_db:send_doc sends an ``ETag`` (and answers If-None-Match) "only when
    we have no meta": the rev alone would not name such an answer."""
    return any(member in doc for member in _META_MEMBERS)


async def _send_related(
    state: State, request: web.BaseRequest, db: settee.Database, related: RelatedDoc
) -> web.StreamResponse:
    doc, meta = related
    tag = None if meta else etag(doc.rev)
    if tag is not None and etag_matches(request.headers, tag):
        return web.Response(status=304, headers={"ETag": tag})
    boundary = mime.new_boundary()
    headers = {"Content-Type": doc.content_type(boundary)} | ({"ETag": tag} if tag else {})
    response = web.StreamResponse(status=200, headers=headers)
    response.content_length = doc.length(boundary)
    await response.prepare(request)
    if request.method != "HEAD":
        await mime.write_related(state, response, db, doc, boundary)
    await response.write_eof()
    return response


async def _send_open_revs(
    state: State,
    request: web.BaseRequest,
    db: settee.Database,
    results: list[dict[str, Any]],
    since: list[str] | None,
) -> web.StreamResponse:
    """``open_revs`` as multipart/mixed: each revision with its attachments above
    ``atts_since`` (all without it) as parts, the others stubs: couch_db:open_doc_revs
    applies atts_since, and send_docs_multipart sends what is not a stub
    (attachments_multipart_test.exs)."""
    outer, inner = mime.new_boundary(), mime.new_boundary()
    content_type = f'multipart/mixed; boundary="{outer.decode()}"'
    response = web.StreamResponse(status=200, headers={"Content-Type": content_type})
    await response.prepare(request)
    await response.write(b"--" + outer)
    for result in results:
        if "ok" in result:
            doc = await state.run(_related_since, db, result["ok"], since)
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
            since = attachment_options(query).get("atts_since")
            plain = _without_attachments(query)
            results = await state.run(_get_doc, entry.db, doc_id, plain)
            if isinstance(results, list):  # open_revs=[] is a plain read, answered below
                return await _send_open_revs(state, request, entry.db, results, since)
    elif mime.wants_multipart(accept, ["multipart/related"], unless_json=False):
        wanted = attachment_options(query)
        if wanted["attachments"] or "atts_since" in wanted:
            related = await state.run(_doc_related, entry.db, doc_id, query)
            if related[0].followers:
                return await _send_related(state, request, entry.db, related)
    result = await state.run(_get_doc, entry.db, doc_id, query)
    if isinstance(result, list):
        return respond(await state.run(reply, 200, result))
    if _has_meta(result):
        return respond(await state.run(reply, 200, result))
    tag = etag(result["_rev"])
    if etag_matches(request.headers, tag):
        return web.Response(status=304, headers={"ETag": tag})
    return respond(await state.run(reply, 200, result, {"ETag": tag}))


# -- PUT / DELETE / POST ----------------------------------------------------------------------


def _rev_from_request(
    doc: dict[str, Any], query: Mapping[str, str], headers: Mapping[str, str], parse: RevParser
) -> None:
    """chttpd_db:couch_doc_from_req's rev: the body's, which ``?rev=`` and
    ``If-Match`` must agree with, else theirs, set in ``doc``."""
    if "_rev" in doc:
        if query.get("rev") is not None and parse(query["rev"]) != doc["_rev"]:
            raise HTTPError(
                400,
                "bad_request",
                "Document rev from request body and query string have different values",
            )
        if header_rev(headers, parse) not in (None, doc["_rev"]):
            raise HTTPError(400, "bad_request", "Document rev and etag have different values")
    else:
        rev = explicit_rev(query, headers, parse)
        if rev is not None:
            doc["_rev"] = rev


def _doc_from_request(
    doc_id: str, doc: dict[str, Any], query: Mapping[str, str], headers: Mapping[str, str]
) -> dict[str, Any]:
    """The document a PUT writes, as chttpd_db:couch_doc_from_req builds it: the
    body checked (its own ``_id`` too), then the URL's id, and the rev from the
    body, ``?rev=`` or ``If-Match``, which must agree."""
    check_doc(doc)
    doc = {**doc, "_id": doc_id}
    _rev_from_request(doc, query, headers, revs.request_rev)
    doc = revisions_win(doc)
    if not _new_edits(query) and "_rev" not in doc and "_revisions" not in doc:
        raise HTTPError(
            400,
            "bad_request",
            "When `new_edits: false`, the document needs `_rev` or `_revisions` specified",
        )
    return doc


def write_doc(state: State, entry: DbEntry, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Write ``doc`` (checked by ``check_doc``) as a PUT of it would: 201 (200 for a
    deletion) and ``{"ok", "id", "rev"}``; ``validate_doc_update`` applies."""
    return _write_doc(state, entry, doc, new_edits=True)


def _write_doc(
    state: State, entry: DbEntry, doc: dict[str, Any], new_edits: bool
) -> tuple[int, dict[str, Any]]:
    """Write a checked document; CouchDB's status (200 for a deletion) and answer."""
    check_write(entry, doc)
    try:
        if new_edits:
            new_rev = entry.db.put(doc)["rev"]
        else:
            failed = entry.db.bulk_docs([doc], new_edits=False)
    except settee.BadRequest as exc:
        raise naming(exc, doc["_id"]) from None
    if not new_edits:
        if failed:  # new_edits=false answers only failures: a missing stub
            raise MissingStub(failed[0]["reason"])
        new_rev = doc.get("_rev") or _rev_of_revisions(doc["_revisions"])
    state.notify(entry)
    status = 200 if doc.get("_deleted") is True else 201
    return status, {"ok": True, "id": doc["_id"], "rev": new_rev}


#: What a ``batch=ok`` write may meet once its request is checked: chttpd_db spawns
#: that write and logs its failure (a conflict, a validate_doc_update refusal, a
#: missing stub), so none reaches the client. Data settee cannot store at all
#: (an engine ``bad_request``) is still answered: a 202 would claim a write that
#: could never happen.
_BATCH_FAILURES = (Conflict, NotFound, MissingStub, HTTPError)


def _batch_write(write: Callable[[], object], doc_id: Any) -> dict[str, Any]:
    """``batch=ok``: attempt the write, log a failure, answer 202's body regardless."""
    try:
        write()
    except _BATCH_FAILURES as exc:
        log.warning("batch=ok write of %r failed: %s", doc_id, exc)
    return {"ok": True, "id": doc_id}


def _put_doc(
    state: State,
    entry: DbEntry,
    doc_id: str,
    doc: dict[str, Any],
    query: Mapping[str, str],
    headers: Mapping[str, str],
    batch: bool = False,
) -> tuple[int, dict[str, Any]]:
    check_docid(doc_id)
    doc = _doc_from_request(doc_id, doc, query, headers)
    new_edits = _new_edits(query)
    if batch:
        return 202, _batch_write(lambda: _write_doc(state, entry, doc, new_edits), doc_id)
    return _write_doc(state, entry, doc, new_edits)


def _rev_of_revisions(revisions: dict[str, Any]) -> str:
    return f"{revisions['start']}-{revisions['ids'][0]}"


def _delete_doc(
    state: State, entry: DbEntry, doc_id: str, rev: str | None
) -> tuple[int, dict[str, Any]]:
    check_openable(doc_id)
    tombstone = {"_id": doc_id, "_deleted": True} | ({"_rev": rev} if rev else {})
    check_write(entry, tombstone)
    result = entry.db.delete(doc_id, rev)
    state.notify(entry)
    return 200, result


async def handle_doc(
    state: State, request: web.BaseRequest, entry: DbEntry, doc_id: str
) -> web.StreamResponse:
    """``/{db}/{docid}`` and ``/{db}/_design/{name}``."""
    method = request.method
    if method in ("GET", "HEAD"):
        return await _handle_get(state, request, entry, doc_id)
    if method == "PUT":
        # chttpd_db reads batch=ok only for a JSON body, not multipart/related.
        related = multipart.is_related(request.headers.get("Content-Type", ""))
        batch = request.query.get("batch") == "ok" and not related
        doc = await _document_of(state, request)
        status, result = await state.run(
            _put_doc, state, entry, doc_id, doc, request.query, request.headers, batch
        )
        if batch:
            return respond(reply(status, result))
        return written(status, result, doc_url(request, doc_id))
    if method == "DELETE":
        rev = explicit_rev(request.query, request.headers)
        status, result = await state.run(_delete_doc, state, entry, doc_id, rev)
        return written(status, result)
    if method == "COPY":
        return await handle_copy(state, request, entry, doc_id)
    if method == "POST":
        return await handle_form_post(state, request, entry, doc_id, write_doc)
    raise method_not_allowed(_DOC_METHODS)


async def _document_of(state: State, request: web.BaseRequest) -> dict[str, Any]:
    """A PUT's document: JSON, or ``multipart/related`` with its attachments
    spooled as the body arrives."""
    content_type = request.headers.get("Content-Type", "")
    if multipart.is_related(content_type):
        chunks = state.body_chunks(request)
        return await multipart.read_related(chunks, content_type, state.run, state.body_limit)
    return await state.run(decode_object, await state.read_body(request), "Document")


def _post_doc(state: State, entry: DbEntry, body: bytes, batch: bool) -> dict[str, Any]:
    doc = decode_object(body, "Document")
    check_doc(doc)
    if "_id" not in doc:
        # Only an absent _id: couch_doc:validate_docid refused "" and null above.
        doc["_id"] = new_doc_id()
    if batch:
        return _batch_write(lambda: _write_posted(state, entry, doc), doc["_id"])
    return _write_posted(state, entry, doc)


def _write_posted(state: State, entry: DbEntry, doc: dict[str, Any]) -> dict[str, Any]:
    doc_id = doc["_id"]
    if doc_id.startswith("_local/"):
        # couch_doc:validate_docid takes _local/ ids: the same document as PUT makes.
        rev = entry.local.put(doc_id, doc, doc.get("_rev"))
        return {"ok": True, "id": doc_id, "rev": rev}
    check_write(entry, doc)
    try:
        result = entry.db.put(doc)
    except settee.BadRequest as exc:
        raise naming(exc, doc_id) from None
    state.notify(entry)
    return result


async def handle_post_doc(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``POST /{db}``: create a document, inventing its id when it has none."""
    require_json_content(request.headers)
    body = await state.read_body(request)
    batch = request.query.get("batch") == "ok"
    result = await state.run(_post_doc, state, entry, body, batch)
    if batch:
        return respond(reply(202, result))
    # chttpd_db's POST /{db} sends the Location only, no ETag (PUT sends both).
    return written(201, result, doc_url(request, result["id"]), with_etag=False)


# -- _local ------------------------------------------------------------------------------------


async def handle_local(
    state: State, request: web.BaseRequest, entry: DbEntry, name: str
) -> web.StreamResponse:
    """``/{db}/_local/{id}``: replication checkpoints and other unreplicated docs,
    whose revisions CouchDB never checks (local.py)."""
    doc_id = "_local/" + name
    if not name:
        raise HTTPError(400, "bad_request", "Invalid _local document id.")
    method = request.method
    if method in ("GET", "HEAD"):
        doc = await state.run(entry.local.get, doc_id)
        tag = local_etag(doc)
        if etag_matches(request.headers, tag):
            return web.Response(status=304, headers={"ETag": tag})
        return respond(reply(200, doc, {"ETag": tag}))
    if method == "PUT":
        body = await state.read_body(request)
        doc = await state.run(decode_object, body, "Document")
        status, stored = await state.run(_put_local, entry, doc_id, doc, request)
        # chttpd_db's db_doc_req PUT sends Location for every document it writes, and
        # couch_httpd:doc_etag the same ETag a read of the new revision gets.
        answer = {"ok": True, "id": doc_id, "rev": stored["_rev"]}
        return written(status, answer, doc_url(request, doc_id), local_etag(stored))
    if method == "DELETE":
        # chttpd_db opens the document first: a missing one is 404 whatever the rev.
        await state.run(entry.local.get, doc_id)
        rev = explicit_rev(request.query, request.headers, couch_rev)
        new = await state.run(entry.local.put, doc_id, {"_deleted": True}, rev)
        return written(200, {"ok": True, "id": doc_id, "rev": new})
    if method == "COPY":
        return await handle_copy(state, request, entry, doc_id)
    if method == "POST":
        return await handle_form_post(state, request, entry, doc_id, write_doc)
    raise method_not_allowed(_DOC_METHODS)


def _put_local(
    entry: DbEntry, doc_id: str, doc: dict[str, Any], request: web.BaseRequest
) -> tuple[int, dict[str, Any]]:
    """Write a local document: its status (200 for a deletion) and the document
    stored. The body's own ``_id`` is checked, then the URL's is used."""
    check_doc(doc, local=True)
    doc = dict(doc)
    _rev_from_request(doc, request.query, request.headers, couch_rev)
    rev = doc.get("_rev")
    revisions = doc.get("_revisions")
    if isinstance(revisions, dict) and revisions.get("ids"):
        # transfer_fields reads _revisions over _rev: its newest numbers the write.
        rev = f"{revisions['start']}-{revisions['ids'][0]}"
    stored = entry.local.write(doc_id, doc, rev)
    return (200 if doc.get("_deleted") is True else 201), stored
