"""Document endpoints: ``/{db}/{docid}`` (GET, PUT, DELETE, COPY, with
``open_revs``, ``revs``, ``revs_info``, ``conflicts``, ``new_edits``,
``If-Match``), ``POST /{db}`` and ``/{db}/_local/{id}``.

Each handler parses the URL and headers on the event loop, then does the rest
(JSON decoding, the engine call, JSON encoding) in one function on a worker.
Status codes follow chttpd_db: 201 for a created revision, 200 for a deletion,
202 for ``batch=ok``; ``ETag`` is the new or returned rev, quoted.
"""

from __future__ import annotations

import logging
import re
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

import settee
from settee.serve import mime, multipart, revs
from settee.serve.design import user_ctx
from settee.serve.local import couch_rev, local_etag
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
from settee.spec.errors import Conflict, NotFound
from settee.spec.spool import Spooled, SpoolWriter

__all__ = [
    "MAX_LOCATION",
    "attachment_options",
    "check_doc",
    "check_docid",
    "docid_problem",
    "handle_doc",
    "handle_local",
    "handle_post_doc",
    "new_doc_id",
    "revisions_win",
    "validate_writes",
    "validated_write",
]

log = logging.getLogger("settee.serve")

#: Special members CouchDB accepts on input (couch_doc:transfer_fields): the
#: engine's own lists (read, ignored, kept as body members).
_SPECIAL = READ_FIELDS | IGNORED_FIELDS | BODY_FIELDS

#: What chttpd_db:db_doc_req answers a document path: POST (a form upload) is
#: CouchDB's too, but settee does not take it, so its 405 does not offer it.
_DOC_METHODS = "DELETE,GET,HEAD,PUT,COPY"

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


def docid_problem(doc_id: Any) -> str | None:
    """Why couch_doc:validate_docid refuses ``doc_id`` (its exact reason), or None."""
    if not isinstance(doc_id, str):
        return "Document id must be a string"
    if doc_id == "":
        return "Document id must not be empty"
    if doc_id in ("_design/", "_local/"):
        return f"Illegal document id `{doc_id}`"
    if not _is_utf8(doc_id):
        return "Document id must be valid UTF-8"
    if doc_id.startswith("_") and not doc_id.startswith(("_design/", "_local/")):
        return "Only reserved document ids may start with underscore."
    return None


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, as JSON's "\ud800" decodes
        return False
    return True


def check_docid(doc_id: Any) -> None:
    """400 ``illegal_docid`` with couch_doc:validate_docid's reason, if it has one."""
    problem = docid_problem(doc_id)
    if problem is not None:
        raise HTTPError(400, "illegal_docid", problem)


def _bad_member(key: str) -> HTTPError:
    return HTTPError(400, "doc_validation", f"Bad special document member: {key}")


def check_doc(doc: Any, local: bool = False) -> None:
    """CouchDB's own document checks, member by member in the order sent, as
    couch_doc:transfer_fields makes them, so clients see its error names and
    reasons (the engine then applies every rule of SEMANTICS.md §2 and answers
    ``bad_request``). A ``_local/`` document's ``_rev`` (``local``, or its
    ``_id`` says so) is read as CouchDB reads it (``0-5`` passes); any other's
    by settee's rules."""
    if not isinstance(doc, dict):
        raise HTTPError(400, "bad_request", "Document must be a JSON object")
    local = local or (isinstance(doc.get("_id"), str) and doc["_id"].startswith("_local/"))
    revisions_seen = False  # transfer_fields skips a _rev that follows _revisions
    for key, value in doc.items():
        if key == "_id":
            check_docid(value)
        elif key == "_rev" and not revisions_seen:
            parse = couch_rev if local else revs.request_rev
            parse(value)
        elif key == "_revisions":
            _check_revisions(value)
            revisions_seen = True
        elif key.startswith("_") and not _is_member(key, value):
            raise _bad_member(key)


#: Special members transfer_fields reads only with a value of this type: any other
#: falls to its last clause, "Bad special document member".
_MEMBER_TYPES: dict[str, type] = {"_deleted": bool, "_attachments": dict}


def _is_member(key: str, value: Any) -> bool:
    return key in _SPECIAL and isinstance(value, _MEMBER_TYPES.get(key, object))


def _check_revisions(value: Any) -> None:
    """``_revisions`` as couch_doc:transfer_fields reads it, with its reasons."""
    if not isinstance(value, dict):
        raise _bad_member("_revisions")
    start, ids = value.get("start"), value.get("ids")
    if not isinstance(start, int) or isinstance(start, bool):
        raise HTTPError(400, "doc_validation", "_revisions.start isn't an integer.")
    if not isinstance(ids, list):
        raise HTTPError(400, "doc_validation", "_revisions.ids isn't a array.")
    for rev_id in ids:
        # parse_revid has no clause for a negative start: "isn't a string" too.
        if not isinstance(rev_id, str) or start < 0:
            raise HTTPError(400, "doc_validation", "RevId isn't a string")
        if start != 0 and len(rev_id) == 32 and not re.fullmatch(r"[0-9a-fA-F]{32}", rev_id):
            raise HTTPError(400, "doc_validation", "RevId isn't a valid hexadecimal")


RevParser = Callable[[Any], str]


def _header_rev(headers: Mapping[str, str], parse: RevParser) -> str | None:
    value = headers.get("If-Match")
    return parse(value.strip().strip('"')) if value is not None else None


def _explicit_rev(
    query: Mapping[str, str], headers: Mapping[str, str], parse: RevParser = revs.request_rev
) -> str | None:
    """The rev named by ``?rev=`` and/or ``If-Match``, each read as couch_doc:parse_rev
    reads it (chttpd_db:extract_header_rev)."""
    qrev = query.get("rev")
    qrev = parse(qrev) if qrev is not None else None
    hrev = _header_rev(headers, parse)
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
        wanted = None if raw == "all" else revs.request_revs(decode_json(raw.encode()))
        results = revs.open_revs(
            db, doc_id, wanted, latest=latest, revisions=revs_flag, **attachment_options(query)
        )
        if wanted is None and not results:
            raise settee.NotFound("missing")
        return results
    meta = query_bool(query, "meta")
    rev = query.get("rev")
    rev = revs.request_rev(rev) if rev is not None else None
    if latest:
        # chttpd_db opens the winner "despite of a rev passed", even one the
        # document does not have (its GET clause sets Rev to nil).
        rev = None
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
    return mime.related(doc, position), _has_meta(doc)


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


def _doc_from_request(
    doc_id: str, doc: dict[str, Any], query: Mapping[str, str], headers: Mapping[str, str]
) -> dict[str, Any]:
    """The document a PUT writes, as chttpd_db:couch_doc_from_req builds it: the
    body checked (its own ``_id`` too), then the URL's id, and the rev from the
    body, ``?rev=`` or ``If-Match``, which must agree."""
    check_doc(doc)
    doc = {**doc, "_id": doc_id}
    if "_rev" in doc:
        if query.get("rev") is not None and revs.request_rev(query["rev"]) != doc["_rev"]:
            raise HTTPError(
                400,
                "bad_request",
                "Document rev from request body and query string have different values",
            )
        if _header_rev(headers, revs.request_rev) not in (None, doc["_rev"]):
            raise HTTPError(400, "bad_request", "Document rev and etag have different values")
    else:
        rev = _explicit_rev(query, headers)
        if rev is not None:
            doc["_rev"] = rev
    doc = revisions_win(doc)
    if not query_bool(query, "new_edits", True) and "_rev" not in doc and "_revisions" not in doc:
        raise HTTPError(
            400,
            "bad_request",
            "When `new_edits: false`, the document needs `_rev` or `_revisions` specified",
        )
    return doc


def _write_doc(
    state: State, entry: DbEntry, doc: dict[str, Any], new_edits: bool
) -> tuple[int, dict[str, Any]]:
    """Write a checked document; CouchDB's status (200 for a deletion) and answer."""
    _validated(entry, doc)
    if new_edits:
        new_rev = entry.db.put(doc)["rev"]
    else:
        failed = entry.db.bulk_docs([doc], new_edits=False)
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
    new_edits = query_bool(query, "new_edits", True)
    if batch:
        return 202, _batch_write(lambda: _write_doc(state, entry, doc, new_edits), doc_id)
    return _write_doc(state, entry, doc, new_edits)


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
        # chttpd_db reads batch=ok only for a JSON body, not multipart/related.
        related = multipart.is_related(request.headers.get("Content-Type", ""))
        batch = request.query.get("batch") == "ok" and not related
        doc = await _document_of(state, request)
        status, result = await state.run(
            _put_doc, state, entry, doc_id, doc, request.query, request.headers, batch
        )
        if batch:
            return respond(reply(status, result))
        return _written(status, result, _location(request))
    if method == "DELETE":
        rev = _explicit_rev(request.query, request.headers)
        status, result = await state.run(_delete_doc, state, entry, doc_id, rev)
        return _written(status, result)
    if method == "COPY":
        return await _handle_copy(state, request, entry, doc_id)
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
    batch = request.query.get("batch") == "ok"
    result = await state.run(_post_doc, state, entry, body, batch)
    if batch:
        return respond(reply(202, result))
    return _written(201, result, _doc_url(request, result["id"]))


def _doc_url(request: web.BaseRequest, doc_id: str) -> str:
    """The absolute URL of ``doc_id`` in the request's database. Percent-encoded: an
    id may hold any character, a header line may not; a slash only after _design/
    or _local/ (couch_util:url_encode), else a/b would name attachment b of a."""
    database = request.rel_url.raw_path.split("/")[1]
    return str(request.url.with_path(f"/{database}/{_url_encode_id(doc_id)}", encoded=True))


# -- COPY ---------------------------------------------------------------------------------------

#: A Destination that names another server: couch_httpd_db refuses it.
_ABSOLUTE = re.compile(r"https?://")


def _copy_destination(headers: Mapping[str, str]) -> tuple[str, str | None]:
    """The id and optional rev of a COPY's ``Destination: id[?rev=R]``, as
    couch_httpd_db:parse_copy_destination_header reads it (the id unquoted as
    chttpd:unquote does, ``+`` as a space)."""
    destination = headers.get("Destination")
    if destination is None:
        raise HTTPError(400, "bad_request", "Destination header is mandatory for COPY.")
    if _ABSOLUTE.match(destination):
        raise HTTPError(400, "bad_request", "Destination URL must be relative.")
    raw_id, question, query = destination.partition("?")
    rev = None
    if question:
        # CouchDB takes whatever follows the one "=" (the key's name is not read).
        _key, equals, rev = query.partition("=")
        if not equals or "?" in query or "=" in rev:
            raise HTTPError(400, "bad_request", "Destination must be docid or docid?rev=rev.")
    try:
        doc_id = urllib.parse.unquote_plus(raw_id, errors="strict")
    except UnicodeDecodeError:
        raise HTTPError(400, "illegal_docid", "Document id must be valid UTF-8") from None
    check_docid(doc_id)
    if rev is not None:
        rev = couch_rev(rev) if doc_id.startswith("_local/") else revs.request_rev(rev)
    return doc_id, rev


def _source_of_copy(entry: DbEntry, doc_id: str, rev: str | None) -> dict[str, Any]:
    """The revision a COPY reads (chttpd_db:couch_doc_open): the winner, or ``rev``."""
    if doc_id.startswith("_local/"):
        return entry.local.get(doc_id)
    return entry.db.get(doc_id, rev=rev)


def _copied_attachments(db: settee.Database, source: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The source's attachments with their bytes, spooled (never held whole), so the
    copy stores them under its own id: a stub names the previous revision of the
    same document, which the destination does not have."""
    copied = {}
    for name in source.get("_attachments", {}):
        meta, chunks = db.attachment_chunks(source["_id"], name, rev=source["_rev"])
        writer = SpoolWriter()
        try:
            for chunk in chunks:
                writer.write(chunk)
        except BaseException:
            writer.abandon()
            raise
        copied[name] = {"content_type": meta["content_type"], "data": writer.finish()}
    return copied


def _copy_doc(
    state: State,
    entry: DbEntry,
    source_id: str,
    source_rev: str | None,
    target: tuple[str, str | None],
) -> dict[str, Any]:
    """chttpd_db:db_doc_req's COPY: the source revision written under the target id,
    as a new document or (with the target's rev) over that revision."""
    target_id, target_rev = target
    source = _source_of_copy(entry, source_id, source_rev)
    doc = {k: v for k, v in source.items() if k not in ("_id", "_rev", "_attachments")}
    doc["_id"] = target_id
    if target_rev is not None:
        doc["_rev"] = target_rev
    if target_id.startswith("_local/"):
        # A local document holds no attachments (couch_db_updater stores its body).
        rev = entry.local.put(target_id, doc, target_rev)
        return {"ok": True, "id": target_id, "rev": rev}
    if "_attachments" in source and not source_id.startswith("_local/"):
        doc["_attachments"] = _copied_attachments(entry.db, source)
    _validated(entry, doc)
    result = entry.db.put(doc)
    state.notify(entry)
    return result


async def _handle_copy(
    state: State, request: web.BaseRequest, entry: DbEntry, source_id: str
) -> web.StreamResponse:
    """``COPY /{db}/{docid}`` with ``Destination``: 201 (a copied deletion too, as
    chttpd_db answers), with the copy's Location and ETag."""
    local = source_id.startswith("_local/")
    source_rev = _explicit_rev(
        request.query, request.headers, couch_rev if local else revs.request_rev
    )
    target = _copy_destination(request.headers)
    result = await state.run(_copy_doc, state, entry, source_id, source_rev, target)
    return _written(201, result, _doc_url(request, result["id"]))


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
        headers = {"ETag": local_etag(stored), "Location": _location(request)}
        answer = {"ok": True, "id": doc_id, "rev": stored["_rev"]}
        return respond(reply(status, answer, headers))
    if method == "DELETE":
        # chttpd_db opens the document first: a missing one is 404 whatever the rev.
        await state.run(entry.local.get, doc_id)
        rev = _explicit_rev(request.query, request.headers, couch_rev)
        new = await state.run(entry.local.put, doc_id, {"_deleted": True}, rev)
        return _written(200, {"ok": True, "id": doc_id, "rev": new})
    if method == "COPY":
        return await _handle_copy(state, request, entry, doc_id)
    raise method_not_allowed(_DOC_METHODS)


def _put_local(
    entry: DbEntry, doc_id: str, doc: dict[str, Any], request: web.BaseRequest
) -> tuple[int, dict[str, Any]]:
    """Write a local document: its status (200 for a deletion) and the document
    stored. The body's own ``_id`` is checked, then the URL's is used."""
    check_doc(doc, local=True)
    rev = doc.get("_rev")
    if rev is None:
        rev = _explicit_rev(request.query, request.headers, couch_rev)
    stored = entry.local.write(doc_id, doc, rev)
    return (200 if doc.get("_deleted") is True else 201), stored
