"""``/{db}/{docid}/{attachment}``: one attachment's bytes (SEMANTICS.md §18).

``GET``/``HEAD`` answer the bytes with their content type, ``Content-MD5`` and
an ``ETag`` of the digest; ``PUT`` (raw bytes, ``Content-Type``, ``?rev=``)
stores a new revision holding them, the document's other attachments kept as
stubs (a document that does not exist yet is created); ``DELETE ?rev=``
stores a revision without it. Writes pass the database's
``validate_doc_update`` functions like any other write.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from aiohttp import web

import settee
from settee.serve import revs
from settee.serve.docchecks import check_doc, check_openable
from settee.serve.encoding import accepts_gzip, compressible, encoded_length, gzip_chunks
from settee.serve.protocol import (
    MAX_LOCATION,
    HTTPError,
    attachment_url,
    etag_matches,
    method_not_allowed,
    reply,
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
    """The revision a request names, each form read by couch_doc:parse_rev (400
    "Invalid rev format"): ``?rev=`` or ``If-Match``, which must agree
    (chttpd_db:extract_header_rev). [differs] A GET reads ``If-Match`` too, as
    attachments.rst documents ("Alternative to rev query parameter");
    chttpd_db's GET reads ``rev`` alone (parse_doc_query)."""
    rev = query.get("rev")
    rev = revs.request_rev(rev) if rev is not None else None
    match = headers.get("If-Match")
    if match is None:
        return rev
    tag = revs.request_rev(match.strip('"'))
    if rev is not None and tag != rev:
        raise HTTPError(400, "bad_request", "Document rev and etag have different values")
    return tag


def _open(
    db: settee.Database, doc_id: str, name: str, rev: str | None
) -> tuple[dict[str, Any], Iterator[bytes], str]:
    """The attachment's record and bytes, and the revision they are of: the one the
    document read names, so every later read of this answer (another range, the
    encoded length) is of these same bytes whatever is written meanwhile."""
    doc = db.get(doc_id, rev=rev)  # NotFound "missing"/"deleted" for the document itself
    try:
        att, chunks = db.attachment_chunks(doc_id, name, rev=doc["_rev"])
    except settee.NotFound:
        raise HTTPError(404, "not_found", _MISSING) from None
    return att, chunks, doc["_rev"]


def _stubs(doc: dict[str, Any]) -> dict[str, Any]:
    return {name: {"stub": True} for name in doc.get("_attachments", {})}


def _revision(db: settee.Database, doc_id: str, rev: str) -> dict[str, Any]:
    """The revision a write names, as chttpd_db's attachment PUT/DELETE opens it
    (fabric:open_revs): one the document does not hold is 409 ``missing_rev``."""
    try:
        check_openable(doc_id)
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
    if rev is None:
        check_openable(doc_id)
    doc = entry.db.get(doc_id) if rev is None else _revision(entry.db, doc_id, rev)
    attachments = _stubs(doc)
    if name not in attachments:
        raise HTTPError(404, "not_found", _MISSING)
    if rev is None:
        raise HTTPError(409, "conflict", "Document update conflict.")
    del attachments[name]
    doc["_attachments"] = attachments
    return validated_write(entry, doc)


#: One range of a ``Range: bytes=...`` header: ``first-last``, ``first-`` or ``-suffix``.
_ONE_RANGE = re.compile(r"([0-9]{1,19})-([0-9]{0,19})|-([0-9]{1,19})")
#: CouchDB answers fewer than this many ranges as multipart/byteranges, more whole.
_MAX_RANGES = 10


def _byte_ranges(header: str | None, length: int) -> list[tuple[int, int]] | None:
    """The inclusive byte ranges ``[first, last]`` a ``Range`` header asks of ``length``
    bytes, in the order asked; None to send them all (no header, a first range of
    ``bytes=0-``, ten ranges or more, or a form that is not ``bytes=``: RFC 9110 lets
    a server ignore Range). A range that runs backward is 416, as are ranges none
    of which holds a byte; one past the end among others is left out (RFC 9110
    14.1.1). As chttpd_db:parse_ranges, ends past the last byte are cut to it."""
    if header is None:
        return None
    unit, _, spec = header.strip().partition("=")
    specs = [part.strip() for part in spec.split(",")] if unit == "bytes" else []
    found = [_ONE_RANGE.fullmatch(part) for part in specs]
    if not found or None in found or len(found) >= _MAX_RANGES:
        return None
    ranges: list[tuple[int, int]] = []
    for match in found:
        first_text, last_text, suffix = match.groups()  # type: ignore[union-attr]
        if suffix is not None:
            first, last = max(0, length - int(suffix)), length - 1
            if int(suffix) == 0:
                continue  # no byte
        else:
            first = int(first_text)
            if first == 0 and not last_text and not ranges:
                return None  # chttpd_db:parse_ranges: bytes=0- is the whole entity, a 200
            if last_text and int(last_text) < first:
                raise _unsatisfiable(length)  # backward: CouchDB refuses it (parse_ranges)
            last = min(int(last_text), length - 1) if last_text else length - 1
        if first < length:
            ranges.append((first, last))
    if not ranges:
        raise _unsatisfiable(length)
    return ranges


def _unsatisfiable(length: int) -> HTTPError:
    return HTTPError(
        416,
        "requested_range_not_satisfiable",
        "Requested range not satisfiable",
        headers={"Content-Range": f"bytes */{length}"},
    )


class _StoppedShort(Exception):
    """Reading an attachment's chunks failed after ``read`` bytes, with its answer
    under way."""

    def __init__(self, read: int, cause: settee.SetteeError) -> None:
        super().__init__(f"after {read} bytes: {cause}")
        self.read = read
        self.cause = cause


async def _send_bytes(
    state: State, response: web.StreamResponse, chunks: Iterator[bytes], first: int, last: int
) -> None:
    """Write bytes ``[first, last]`` of the attachment ``chunks`` hold, a chunk at a
    time (each read on a worker as the client takes the last)."""
    at = 0  # offset of the next chunk's first byte
    try:
        while at <= last and (chunk := await state.run(next, chunks, None)) is not None:
            piece = chunk[max(0, first - at) : last - at + 1]
            at += len(chunk)
            if piece:
                await response.write(piece)
    except settee.SetteeError as exc:
        raise _StoppedShort(at, exc) from exc


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
    if request.method == "GET" and length:
        # The first chunk is read before the status is sent, so damage in it (all of
        # an attachment up to 64 KiB) is CouchDB's error answer (410 corruption), not
        # a 200 cut short at 0 bytes (found by the fault sweep).
        head = await state.run(next, chunks, None)
        chunks = itertools.chain(() if head is None else (head,), chunks)
    response = web.StreamResponse(status=status, headers=headers)
    response.content_length = last - first + 1
    await response.prepare(request)
    if request.method == "GET":
        try:
            await _send_bytes(state, response, chunks, first, last)
        except _StoppedShort as stop:
            # The status and length are sent: all that is left is to stop short, which
            # the client sees, and to say why where the operator looks (found in
            # review: a damaged chunk cut the answer with nothing logged).
            log.error(
                "%s %s: stopped after %d bytes: %s",
                request.method,
                request.path,
                stop.read,
                stop.cause,
            )
            response.force_close()
            return response
    await response.write_eof()
    return response


async def _stream_ranges(
    state: State,
    request: web.BaseRequest,
    att: dict[str, Any],
    reopen: Callable[[], tuple[dict[str, Any], Iterator[bytes], str]],
    headers: dict[str, str],
    ranges: list[tuple[int, int]],
) -> web.StreamResponse:
    """Several ranges as one 206 ``multipart/byteranges`` answer (RFC 9110 14.6), as
    chttpd_db:send_ranges_multipart: each part its Content-Type and Content-Range,
    then its bytes, read afresh from the attachment's start (ranges may come in
    any order, and overlap)."""
    boundary = uuid.uuid4().hex
    headers = {k: v for k, v in headers.items() if k != "Content-Type"}
    headers["Content-Type"] = f'multipart/byteranges; boundary="{boundary}"'
    response = web.StreamResponse(status=206, headers=headers)
    await response.prepare(request)
    if request.method != "GET":
        await response.write_eof()
        return response
    length = att["length"]
    part_type = " ".join(str(att["content_type"]).splitlines())  # a line of its own
    try:
        for first, last in ranges:
            head = (
                f"--{boundary}\r\nContent-Type: {part_type}\r\n"
                f"Content-Range: bytes {first}-{last}/{length}\r\n\r\n"
            )
            await response.write(head.encode("utf-8", "surrogatepass"))
            _att, chunks, _rev = await state.run(reopen)
            await _send_bytes(state, response, chunks, first, last)
            await response.write(b"\r\n")
    except (settee.SetteeError, _StoppedShort) as exc:
        cause = exc.cause if isinstance(exc, _StoppedShort) else exc
        log.error("%s %s: stopped in a byte range: %s", request.method, request.path, cause)
        response.force_close()
        return response
    await response.write(f"--{boundary}--\r\n".encode())
    await response.write_eof()
    return response


async def _send_encoded(
    state: State,
    request: web.BaseRequest,
    entry: DbEntry,
    where: tuple[str, str, str],
    att: dict[str, Any],
    chunks: Iterator[bytes],
    headers: dict[str, str],
) -> web.StreamResponse:
    """An attachment CouchDB would hold gzip-encoded (settee.serve.encoding): whole,
    as chttpd_db serves no range of an encoded one (``Accept-Ranges: none``), and
    encoded for a client whose ``Accept-Encoding`` takes gzip."""
    headers = {**headers, "Accept-Ranges": "none"}
    if not accepts_gzip(request.headers.get("Accept-Encoding")):
        return await _stream(state, request, att["length"], chunks, headers)
    doc_id, name, rev = where
    length = await state.run(encoded_length, entry.db, doc_id, name, rev, att["digest"])
    # Content-MD5 is of the body as sent (RFC 2616 14.15), which is no longer the
    # attachment's bytes; CouchDB sends none at all.
    headers = {k: v for k, v in headers.items() if k != "Content-MD5"}
    headers["Content-Encoding"] = "gzip"
    return await _stream(state, request, length, gzip_chunks(chunks), headers)


async def handle_attachment(
    state: State, request: web.BaseRequest, entry: DbEntry, doc_id: str, name: str
) -> web.StreamResponse:
    method = request.method
    rev = _rev_of(request.query, request.headers)
    if method in ("GET", "HEAD"):
        att, chunks, pinned = await state.run(_open, entry.db, doc_id, name, rev)
        tag = '"' + att["digest"].removeprefix("md5-") + '"'
        headers = {
            "Content-Type": att["content_type"],
            "Cache-Control": "must-revalidate",  # as chttpd_db's attachment GET sends
            "ETag": tag,
            "Content-MD5": att["digest"].removeprefix("md5-"),
            "Accept-Ranges": "bytes",
            # chttpd_util:maybe_add_csp_header("attachments", ..., "sandbox"): on by
            # default ([csp] attachments_enable), so an HTML attachment runs no script.
            "Content-Security-Policy": "sandbox",
        }
        if etag_matches(request.headers, tag):
            return web.Response(
                status=304, headers={k: headers[k] for k in ("ETag", "Cache-Control")}
            )
        if compressible(att["content_type"]):
            return await _send_encoded(
                state, request, entry, (doc_id, name, pinned), att, chunks, headers
            )
        ranges = None
        # If-Range (RFC 9110 §13.1.5): a range of the version the client holds only;
        # another version goes whole, or a resumed download would splice two.
        if request.headers.get("If-Range", tag) == tag:
            ranges = _byte_ranges(request.headers.get("Range"), att["length"])
        if ranges is not None and len(ranges) > 1:
            reopen = functools.partial(_open, entry.db, doc_id, name, pinned)
            return await _stream_ranges(state, request, att, reopen, headers, ranges)
        wanted = None if ranges is None else ranges[0]
        return await _stream(state, request, att["length"], chunks, headers, wanted)
    if method == "PUT":
        coding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if coding not in ("identity", "gzip"):  # db_attachment_req's own refusal
            reason = "Only gzip and identity content-encodings are supported"
            raise HTTPError(415, "bad_content_type", reason)
        data = await state.spool_body(request)
        content_type = request.headers.get("Content-Type", "application/octet-stream")
        result = await state.run(_put, entry, doc_id, name, data, content_type, rev)
        state.notify(entry)
        # chttpd_db:db_attachment_req sends the attachment's URL as Location.
        headers = {"ETag": f'"{result["rev"]}"'}
        location = attachment_url(request, doc_id, name)
        if location is not None and len(location) <= MAX_LOCATION:  # as protocol.written
            headers["Location"] = location
        return respond(reply(201, result, headers))
    if method == "DELETE":
        result = await state.run(_delete, entry, doc_id, name, rev)
        state.notify(entry)
        return respond(reply(200, result, {"ETag": f'"{result["rev"]}"'}))
    raise method_not_allowed("DELETE,GET,HEAD,PUT")
