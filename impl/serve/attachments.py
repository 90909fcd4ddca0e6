"""``/{db}/{docid}/{attachment}``: one attachment's bytes (SEMANTICS.md §18).

``GET``/``HEAD`` answer the bytes with their content type, ``Content-MD5`` and
an ``ETag`` of the digest; ``PUT`` (raw bytes, ``Content-Type``, ``?rev=``)
stores a new revision holding them, the document's other attachments kept as
stubs (a document that does not exist yet is created); ``DELETE ?rev=``
stores a revision without it. Writes pass the database's
``validate_doc_update`` functions like any other write.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from typing import Any

from aiohttp import web

import settee
from settee.serve.docchecks import check_doc
from settee.serve.protocol import (
    MAX_LOCATION,
    HTTPError,
    etag_matches,
    method_not_allowed,
    reply,
    request_url,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.validation import validated_write
from settee.spec.spool import Spooled

__all__ = ["handle_attachment"]

log = logging.getLogger("settee.serve")

_MISSING = "Document is missing attachment"


def _rev_of(query: Mapping[str, str], headers: Mapping[str, str]) -> str | None:
    rev = query.get("rev")
    match = headers.get("If-Match")
    if rev is not None and match is not None and match.strip('"') != rev:
        raise HTTPError(400, "bad_request", "Document rev and etag have different values")
    return rev if rev is not None else (match.strip('"') if match else None)


def _open(
    db: settee.Database, doc_id: str, name: str, rev: str | None
) -> tuple[dict[str, Any], Iterator[bytes]]:
    db.get(doc_id, rev=rev)  # NotFound "missing"/"deleted" for the document itself
    try:
        return db.attachment_chunks(doc_id, name, rev=rev)
    except settee.NotFound:
        raise HTTPError(404, "not_found", _MISSING) from None


def _stubs(doc: dict[str, Any]) -> dict[str, Any]:
    return {name: {"stub": True} for name in doc.get("_attachments", {})}


def _revision(db: settee.Database, doc_id: str, rev: str) -> dict[str, Any]:
    """The revision a write names, as chttpd_db's attachment PUT/DELETE opens it
    (fabric:open_revs): one the document does not hold is 409 ``missing_rev``."""
    try:
        return db.get(doc_id, rev=rev)
    except settee.NotFound:
        raise HTTPError(409, "not_found", "missing_rev") from None


def _put(
    entry: DbEntry, doc_id: str, name: str, data: Spooled, content_type: str, rev: str | None
) -> dict[str, Any]:
    if rev is None:
        doc: dict[str, Any] = {"_id": doc_id}
        check_doc(doc)  # chttpd_db: couch_db:validate_docid, before the write's own checks
    else:
        doc = _revision(entry.db, doc_id, rev)
    attachments = _stubs(doc)
    attachments[name] = {"content_type": content_type, "data": data}  # spooled: never whole
    doc["_attachments"] = attachments
    return validated_write(entry, doc)


def _delete(entry: DbEntry, doc_id: str, name: str, rev: str | None) -> dict[str, Any]:
    # Without a rev, chttpd_db first opens the document and finds the attachment
    # (404 for either missing), and only then answers the edit's conflict.
    doc = entry.db.get(doc_id) if rev is None else _revision(entry.db, doc_id, rev)
    attachments = _stubs(doc)
    if name not in attachments:
        raise HTTPError(404, "not_found", _MISSING)
    if rev is None:
        raise HTTPError(409, "conflict", "Document update conflict.")
    del attachments[name]
    doc["_attachments"] = attachments
    return validated_write(entry, doc)


#: ``Range: bytes=first-last``, ``bytes=first-`` or ``bytes=-suffix``: one range.
_ONE_RANGE = re.compile(r"bytes=(?:([0-9]{1,19})-([0-9]{0,19})|-([0-9]{1,19}))")


def _byte_range(header: str | None, length: int) -> tuple[int, int] | None:
    """The inclusive byte range ``[first, last]`` a ``Range`` header asks of ``length``
    bytes; None to send them all (no header, ``bytes=0-``, several ranges, or a form
    that is not ``bytes=``: RFC 9110 lets a server ignore Range); 416 when no byte
    of it exists or it runs backward. CouchDB answers one range of an attachment
    stored as is with 206 (chttpd_db:parse_ranges)."""
    if header is None:
        return None
    found = _ONE_RANGE.fullmatch(header.strip())
    if found is None:
        return None
    first_text, last_text, suffix = found.groups()
    if suffix is not None:
        first, last = max(0, length - int(suffix)), length - 1
        if int(suffix) == 0:
            first = length  # no byte: unsatisfiable below
    else:
        first = int(first_text)
        if first == 0 and not last_text:
            return None  # chttpd_db:parse_ranges: bytes=0- is the whole entity, a 200
        last = min(int(last_text), length - 1) if last_text else length - 1
        if last_text and int(last_text) < first:
            last = -1  # a backward range: CouchDB refuses it (parse_ranges), below
    if first >= length or first > last:
        raise HTTPError(
            416,
            "requested_range_not_satisfiable",
            "Requested range not satisfiable",
            headers={"Content-Range": f"bytes */{length}"},
        )
    return first, last


async def _stream(
    state: State,
    request: web.BaseRequest,
    length: int,
    chunks: Iterator[bytes],
    headers: dict[str, str],
    wanted: tuple[int, int] | None = None,
) -> web.StreamResponse:
    """The bytes a chunk at a time (each read on a worker as the client takes the
    last), so an attachment is never held whole, with its length up front; with
    ``wanted``, only bytes ``[first, last]`` of them, as a 206."""
    first, last = wanted if wanted is not None else (0, length - 1)
    status = 200
    if wanted is not None:
        status = 206
        headers = {**headers, "Content-Range": f"bytes {first}-{last}/{length}"}
    response = web.StreamResponse(status=status, headers=headers)
    response.content_length = last - first + 1
    await response.prepare(request)
    if request.method == "GET":
        at = 0  # offset of the next chunk's first byte
        try:
            while at <= last and (chunk := await state.run(next, chunks, None)) is not None:
                piece = chunk[max(0, first - at) : last - at + 1]
                at += len(chunk)
                if piece:
                    await response.write(piece)
        except settee.SetteeError as exc:
            # The status and length are sent: all that is left is to stop short, which
            # the client sees, and to say why where the operator looks (found in
            # review: a damaged chunk cut the answer with nothing logged).
            log.error("%s %s: stopped after %d bytes: %s", request.method, request.path, at, exc)
            response.force_close()
            return response
    await response.write_eof()
    return response


async def handle_attachment(
    state: State, request: web.BaseRequest, entry: DbEntry, doc_id: str, name: str
) -> web.StreamResponse:
    method = request.method
    rev = _rev_of(request.query, request.headers)
    if method in ("GET", "HEAD"):
        att, chunks = await state.run(_open, entry.db, doc_id, name, rev)
        tag = '"' + att["digest"].removeprefix("md5-") + '"'
        headers = {
            "Content-Type": att["content_type"],
            "Cache-Control": "must-revalidate",  # as chttpd_db's attachment GET sends
            "ETag": tag,
            "Content-MD5": att["digest"].removeprefix("md5-"),
            "Accept-Ranges": "bytes",
        }
        if etag_matches(request.headers, tag):
            return web.Response(
                status=304, headers={k: headers[k] for k in ("ETag", "Cache-Control")}
            )
        wanted = None
        # If-Range (RFC 9110 §13.1.5): a range of the version the client holds only;
        # another version goes whole, or a resumed download would splice two.
        if request.headers.get("If-Range", tag) == tag:
            wanted = _byte_range(request.headers.get("Range"), att["length"])
        return await _stream(state, request, att["length"], chunks, headers, wanted)
    if method == "PUT":
        data = await state.spool_body(request)
        content_type = request.headers.get("Content-Type", "application/octet-stream")
        result = await state.run(_put, entry, doc_id, name, data, content_type, rev)
        state.notify(entry)
        # chttpd_db:db_attachment_req sends the attachment's URL as Location.
        headers = {"ETag": f'"{result["rev"]}"'}
        location = request_url(request)
        if location is not None and len(location) <= MAX_LOCATION:  # as protocol.written
            headers["Location"] = location
        return respond(reply(201, result, headers))
    if method == "DELETE":
        result = await state.run(_delete, entry, doc_id, name, rev)
        state.notify(entry)
        return respond(reply(200, result, {"ETag": f'"{result["rev"]}"'}))
    raise method_not_allowed("DELETE,GET,HEAD,PUT")
