"""``multipart/related`` document bodies: how CouchDB's replicator (and clients
such as couchdb-python) send a document with its attachments' bytes attached.

The first part is the document's JSON, whose ``_attachments`` entries that say
``"follows": true`` take their bytes, in order, from the parts after it
(couch_doc:doc_from_multi_part_stream). The parts are parsed here exactly, as
bytes (an attachment may hold any byte, CRLF included); the document that
comes out carries those bytes inline, as base64 ``data``, so the engine sees
one kind of attachment. A ``length`` or ``digest`` sent with a part must match
its bytes.
"""

from __future__ import annotations

import gzip
import zlib
from typing import Any

from settee.serve.protocol import HTTPError, decode_object
from settee.spec.attachments import digest_of

__all__ = ["is_related", "related_document"]


def is_related(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "multipart/related"


def _boundary(content_type: str) -> bytes:
    for param in content_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "boundary" and value.strip().strip('"'):
            try:
                return value.strip().strip('"').encode("ascii")
            except UnicodeEncodeError:
                raise HTTPError(400, "bad_request", "multipart boundary is not ASCII") from None
    raise HTTPError(400, "bad_request", "multipart/related without a boundary")


def _parts(body: bytes, boundary: bytes) -> list[bytes]:
    """The parts' bytes (headers and content) between the delimiters (RFC 2046)."""
    delimiter = b"--" + boundary
    pieces = body.split(delimiter)
    if len(pieces) < 3 or not pieces[-1].startswith(b"--"):
        raise HTTPError(400, "bad_request", "multipart/related body is not closed by its boundary")
    parts = []
    for piece in pieces[1:-1]:
        if not piece.startswith(b"\r\n") or not piece.endswith(b"\r\n"):
            raise HTTPError(400, "bad_request", "malformed multipart/related part")
        parts.append(piece[2:-2])
    return parts


def _content(part: bytes) -> tuple[dict[str, str], bytes]:
    if part.startswith(b"\r\n"):
        # No headers at all (MIME allows it; CouchDB 1.x's replicator sends such
        # parts): the blank line comes first and everything after it is content,
        # blank lines inside the content included.
        return {}, part[2:]
    head, sep, content = part.partition(b"\r\n\r\n")
    if not sep:
        raise HTTPError(400, "bad_request", "multipart/related part without a blank line")
    headers = {}
    for line in head.split(b"\r\n"):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers, content


def related_document(body: bytes, content_type: str) -> dict[str, Any]:
    """The document a ``multipart/related`` body carries, attachments inline."""
    parts = [_content(p) for p in _parts(body, _boundary(content_type))]
    doc = decode_object(parts[0][1], "Document")
    attachments = doc.get("_attachments")
    following = [
        (name, att)
        for name, att in (attachments.items() if isinstance(attachments, dict) else [])
        if isinstance(att, dict) and att.get("follows") is True
    ]
    if len(following) != len(parts) - 1:
        raise HTTPError(
            400,
            "bad_request",
            f"{len(following)} attachments say follows but {len(parts) - 1} parts follow",
        )
    for (name, att), (_headers, data) in zip(following, parts[1:], strict=True):
        data = _decoded(name, att, data)
        _check_sent(name, att, data)
        inline = {"content_type": att.get("content_type", "application/octet-stream")}
        inline["data"] = data  # the engine takes bytes as they are
        if "revpos" in att:
            inline["revpos"] = att["revpos"]
        attachments[name] = inline
    return doc


def _decoded(name: str, att: dict[str, Any], data: bytes) -> bytes:
    """The attachment's bytes: CouchDB sends compressible types gzip-encoded
    (``"encoding": "gzip"``, ``length`` the decoded size); settee stores them plain."""
    encoding = att.get("encoding", "identity")
    if encoding == "identity":
        return data
    if encoding != "gzip":
        raise HTTPError(400, "bad_request", f"attachment {name!r}: unknown encoding {encoding!r}")
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        raise HTTPError(400, "bad_request", f"attachment {name!r}: not valid gzip") from None


def _check_sent(name: str, att: dict[str, Any], data: bytes) -> None:
    length = att.get("length")
    if length is not None and length != len(data):
        raise HTTPError(
            400,
            "bad_request",
            f"attachment {name!r}: {len(data)} bytes follow, length says {length}",
        )
    digest = att.get("digest")
    if isinstance(digest, str) and digest.startswith("md5-") and digest != digest_of(data):
        raise HTTPError(400, "bad_request", f"attachment {name!r}: bytes do not match its digest")
