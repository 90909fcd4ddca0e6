"""``POST /{db}/{docid}`` with an HTML form: attachments uploaded by a browser
(chttpd_db:db_doc_req's POST clause, form_submit_test.exs).

The form is ``multipart/form-data`` (else 415 ``bad_content_type``) and, as a
defence against cross-site requests, comes with a ``Referer`` on the server's
own host (``couch_httpd:validate_referer``). Its ``_doc`` field is the document
as JSON, or its ``_rev`` field names the stored revision to start from; each
file of its ``_attachments`` field becomes an attachment named after the file,
replacing one of that name, the others kept. The answer is a PUT's: 201 with
``ok``, ``id``, ``rev`` and the ETag. A form with neither ``_doc`` nor ``_rev``
is a 400 (CouchDB fails it with a 500).
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from settee.serve.protocol import HTTPError, decode_object, written
from settee.serve.registry import DbEntry
from settee.serve.state import State

__all__ = ["handle_form_post"]

_FORM = "multipart/form-data"

#: How a document is written: ``docs.write_doc`` (which routes forms here).
WriteDoc = Callable[[State, DbEntry, dict[str, Any]], tuple[int, dict[str, Any]]]


@dataclass(frozen=True)
class _File:
    name: str
    content_type: str
    data: bytes


async def handle_form_post(
    state: State, request: web.BaseRequest, entry: DbEntry, doc_id: str, write: WriteDoc
) -> web.StreamResponse:
    """The form's document written with ``write`` (``docs.write_doc``: a PUT's checks)."""
    _check_referer(request)
    content_type = request.headers.get("Content-Type", "")
    if content_type.split(";")[0].strip() != _FORM:
        raise HTTPError(415, "bad_content_type", f"Content-Type must be {_FORM}")
    raw = await state.read_body(request)
    form = await state.run(_parse_form, content_type, raw)
    status, result = await state.run(_write_form, state, entry, doc_id, form, write)
    return written(status, result)


def _check_referer(request: web.BaseRequest) -> None:
    """couch_httpd:validate_referer: the form must come from a page of this server."""
    referer = request.headers.get("Referer")
    if referer is None:
        raise HTTPError(400, "bad_request", "Referer header required.")
    host = request.headers.get("X-Forwarded-Host") or request.headers.get("Host")
    if urllib.parse.urlsplit(referer).netloc != host:
        raise HTTPError(400, "bad_request", "Referer header must match host.")


def _parse_form(content_type: str, raw: bytes) -> tuple[dict[str, str], list[_File]]:
    """The form's text fields and the files of its ``_attachments`` field."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    try:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + raw)
    except (ValueError, UnicodeError) as exc:
        raise HTTPError(400, "bad_request", f"the form cannot be read: {exc}") from None
    if not message.is_multipart():
        raise HTTPError(400, "bad_request", "the form has no parts")
    fields: dict[str, str] = {}
    files: list[_File] = []
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        filename = part.get_filename()
        if not isinstance(name, str):
            continue
        if filename is not None:
            if name == "_attachments":
                files.append(_File(filename, part.get_content_type(), data))
            continue
        try:
            fields.setdefault(name, data.decode("utf-8"))
        except UnicodeDecodeError:
            raise HTTPError(400, "bad_request", f"form field {name!r} is not UTF-8") from None
    return fields, files


def _write_form(
    state: State,
    entry: DbEntry,
    doc_id: str,
    form: tuple[dict[str, str], list[_File]],
    write: WriteDoc,
) -> tuple[int, dict[str, Any]]:
    fields, files = form
    if "_doc" in fields:
        doc = decode_object(fields["_doc"].encode("utf-8"), "Document")
        doc["_id"] = doc_id
    elif "_rev" in fields:
        doc = entry.db.get(doc_id, rev=fields["_rev"])
    else:
        raise HTTPError(400, "bad_request", "the form names no _rev (or _doc) to update")
    attachments = doc.get("_attachments")
    attachments = dict(attachments) if isinstance(attachments, dict) else {}
    for upload in files:
        encoded = base64.b64encode(upload.data).decode("ascii")
        attachments[upload.name] = {"content_type": upload.content_type, "data": encoded}
    if attachments:
        doc["_attachments"] = attachments
    return write(state, entry, doc)
