"""``COPY /{db}/{docid}`` (and ``/{db}/_local/{id}``) with a ``Destination``
header: the source revision written under another id, as a new document or
over the revision the destination names (chttpd_db:db_doc_req's COPY).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from aiohttp import web

import settee
from settee.serve import revs
from settee.serve.docchecks import check_docid, check_openable, explicit_rev
from settee.serve.local import couch_rev
from settee.serve.protocol import HTTPError, doc_url, written
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.validation import check_write
from settee.spec.spool import SpoolWriter

__all__ = ["handle_copy"]


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
    check_openable(doc_id)
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
    check_write(entry, doc)
    result = entry.db.put(doc)
    state.notify(entry)
    return result


async def handle_copy(
    state: State, request: web.BaseRequest, entry: DbEntry, source_id: str
) -> web.StreamResponse:
    """``COPY /{db}/{docid}`` with ``Destination``: 201 (a copied deletion too, as
    chttpd_db answers), with the copy's Location and ETag."""
    local = source_id.startswith("_local/")
    source_rev = explicit_rev(
        request.query, request.headers, couch_rev if local else revs.request_rev
    )
    target = _copy_destination(request.headers)
    result = await state.run(_copy_doc, state, entry, source_id, source_rev, target)
    return written(201, result, doc_url(request, result["id"]))
