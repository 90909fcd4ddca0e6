"""Multipart answers: documents with their attachments' bytes as parts, as
CouchDB sends them to replicators and to clients that ask (SEMANTICS.md §18).

* ``GET /{db}/{doc}?attachments=true`` (or ``atts_since``) with ``Accept:
  multipart/related``: one ``multipart/related`` body, the document's JSON
  first, then each attachment whose data is sent, in document order
  (couch_doc:doc_to_multi_part_stream); with a ``Content-Length``.
* ``open_revs`` with ``Accept: multipart/mixed``: one part per revision, each a
  ``multipart/related`` of the document and all its attachments, or JSON
  (chttpd_db:send_docs_multipart).
* ``POST /{db}/_bulk_get`` with ``Accept: multipart/mixed`` (or ``related``) and
  not ``application/json``: one part per revision, the same way, with
  ``X-Doc-Id``/``X-Rev-Id`` headers (chttpd_db:send_docs_multipart_bulk_get).

In the JSON, an attachment whose bytes follow reads ``{"content_type",
"revpos", "digest", "length", "follows": true}``; the others stay stubs. The
bytes are read a chunk at a time on a worker as the client takes them, never
held whole. Which ``Accept`` values choose multipart is ``wants_multipart``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

import settee
from settee.serve.encoding import gzip_chunks, with_encoding_info
from settee.serve.protocol import encode_json
from settee.serve.state import State

__all__ = [
    "Related",
    "header_value",
    "new_boundary",
    "related",
    "wants_multipart",
    "write_related",
]


def _media_ranges(accept: str) -> list[tuple[str, float]]:
    """``Accept`` as ``(type/subtype, q)`` pairs, lower-cased; a bad q is 0."""
    ranges = []
    for item in accept.split(","):
        media, *params = item.split(";")
        q = 1.0
        for param in params:
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if media.strip():
            ranges.append((media.strip().lower(), q))
    return ranges


def wants_multipart(accept: str | None, types: Iterable[str], *, unless_json: bool) -> bool:
    """Whether ``Accept`` names one of the multipart ``types`` (or ``multipart/*``)
    with q > 0; with ``unless_json``, not if it also accepts ``application/json``
    (as ``_bulk_get``). [differs: CouchDB (mochiweb) also counts ``*/*`` and a
    missing ``Accept``; settee answers those with the JSON the documentation
    shows, so a generic HTTP client is not handed multipart it did not ask for.]"""
    ranges = _media_ranges(accept or "")
    named = {*types, "multipart/*"}
    if not any(media in named and q > 0 for media, q in ranges):
        return False
    return not (unless_json and any(m == "application/json" and q > 0 for m, q in ranges))


def new_boundary() -> bytes:
    return uuid.uuid4().hex.encode("ascii")


@dataclass(frozen=True, slots=True)
class _Follower:
    """An attachment whose bytes follow the document's JSON."""

    name: str
    content_type: str
    length: int  # of the bytes sent: gzip-encoded ones when ``encoded``
    encoded: bool = False

    def head(self, boundary: bytes) -> bytes:
        # The name goes in a quoted header value: quotes escaped, line breaks
        # percent-encoded, so a hostile attachment name cannot forge part headers.
        quoted = self.name.replace("\\", "\\\\").replace('"', '\\"')
        return (
            b"\r\n--"
            + boundary
            + b'\r\nContent-Disposition: attachment; filename="'
            + header_value(quoted)
            + b'"\r\nContent-Type: '
            + header_value(self.content_type)
            + b"\r\nContent-Length: "
            + str(self.length).encode("ascii")
            + (b"\r\nContent-Encoding: gzip" if self.encoded else b"")
            + b"\r\n\r\n"
        )


@dataclass(frozen=True, slots=True)
class Related:
    """One document revision as a multipart/related body (or plain JSON when no
    attachment follows)."""

    doc_id: str
    rev: str
    #: The document's JSON, with CouchDB's trailing newline.
    json: bytes
    followers: tuple[_Follower, ...]

    def content_type(self, boundary: bytes) -> str:
        if not self.followers:
            return "application/json"
        return f'multipart/related; boundary="{boundary.decode("ascii")}"'

    def length(self, boundary: bytes) -> int:
        """The exact bytes ``write_related`` writes."""
        if not self.followers:
            return len(self.json)
        opening = len(b"--" + boundary + b"\r\nContent-Type: application/json\r\n\r\n")
        parts = sum(len(f.head(boundary)) + f.length for f in self.followers)
        return opening + len(self.json) + parts + len(b"\r\n--" + boundary + b"--")


#: The members couch_att:to_json adds after ``follows`` with att_encoding_info.
_ENCODING_INFO = ("encoding", "encoded_length")


def related(db: settee.Database, doc: dict[str, Any], above: int = 0) -> Related:
    """``doc`` (attachments as stubs) with the attachments whose revpos is above
    ``above`` (``atts_since``'s position; 0: all) marked ``"follows": true`` in
    place of ``"stub": true``. A compressible attachment is described and sent
    gzip-encoded, as CouchDB sends its stored bytes (SendEncodedAtts, with
    att_encoding_info: settee.serve.encoding); this reads it once to know the
    encoded length, so call it on a worker."""
    attachments = doc.get("_attachments") or {}
    shown: dict[str, Any] = {}
    followers = []
    for name, stub in with_encoding_info(db, doc).get("_attachments", {}).items():
        if stub["revpos"] > above:
            fields = {k: v for k, v in stub.items() if k not in _ENCODING_INFO and k != "stub"}
            encoding = {k: stub[k] for k in _ENCODING_INFO if k in stub}
            shown[name] = fields | {"follows": True} | encoding
            length = encoding.get("encoded_length", stub["length"])
            followers.append(_Follower(name, stub["content_type"], length, bool(encoding)))
        else:
            shown[name] = stub
    body = {**doc, "_attachments": shown} if attachments else doc
    return Related(doc["_id"], doc["_rev"], encode_json(body), tuple(followers))


def header_value(text: str) -> bytes:
    """``text`` for a part header line: UTF-8, line breaks percent-encoded."""
    return text.replace("\r", "%0D").replace("\n", "%0A").encode("utf-8", "surrogatepass")


async def write_related(
    state: State, response: web.StreamResponse, db: settee.Database, doc: Related, boundary: bytes
) -> None:
    """Write ``doc`` as ``content_type(boundary)`` says: the JSON, then each
    attachment's bytes streamed from the engine a chunk at a time."""
    if not doc.followers:
        await response.write(doc.json)
        return
    await response.write(b"--" + boundary + b"\r\nContent-Type: application/json\r\n\r\n")
    await response.write(doc.json)
    for follower in doc.followers:
        await response.write(follower.head(boundary))
        _meta, chunks = await state.run(db.attachment_chunks, doc.doc_id, follower.name, doc.rev)
        if follower.encoded:
            chunks = gzip_chunks(chunks)
        while (chunk := await state.run(next, chunks, None)) is not None:
            await response.write(chunk)
    await response.write(b"\r\n--" + boundary + b"--")
