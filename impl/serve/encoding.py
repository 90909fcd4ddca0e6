"""Attachments of compressible types as CouchDB's clients see them: gzip-encoded.

CouchDB stores an attachment whose content type its ``[attachments]
compressible_types`` names (``text/*``, ``application/javascript``,
``application/json``, ``application/xml`` by default) gzip-compressed at
``compression_level`` 8 (couch_db:with_stream, couch_stream:gzip_init), and
says so: ``att_encoding_info=true`` adds ``"encoding": "gzip"`` and
``"encoded_length"`` to the attachment's JSON (couch_att:to_json); a GET that
accepts gzip gets the encoded bytes with ``Content-Encoding: gzip``, and no
byte ranges are served of it (chttpd_db:db_attachment_req); multipart answers
always send the encoded bytes (couch_doc:doc_to_multi_part_stream with
SendEncodedAtts true).

settee stores every attachment as it is (SEMANTICS.md §18) and compresses on
the way out, as zlib compresses CouchDB's stream (gzip wrapper, level 8,
memory level 8), so ``encoded_length`` is the length CouchDB stores. The
``digest`` stays the md5 of the bytes themselves: CouchDB's is the md5 of its
compressed bytes, which its own suite notes varies with the zlib build
(attachments_test.exs). Encoded lengths are remembered by digest.
"""

from __future__ import annotations

import re
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import settee

__all__ = [
    "COMPRESSIBLE_TYPES",
    "accepts_gzip",
    "compressible",
    "encoded_length",
    "gzip_chunks",
    "with_encoding_info",
]

#: The default ``[attachments] compressible_types`` (couch_db.hrl).
COMPRESSIBLE_TYPES = ("text/*", "application/javascript", "application/json", "application/xml")
#: The default ``[attachments] compression_level``.
_LEVEL = 8

#: couch_db:compressible_att_type's patterns: the type, ``*`` as any run of
#: characters, parameters after a ``;`` allowed, case ignored.
_PATTERNS = tuple(
    re.compile(r"^\s*" + re.escape(t).replace(r"\*", ".*") + r"(?:\s*;.*?)?\s*$", re.I | re.S)
    for t in COMPRESSIBLE_TYPES
)


def compressible(content_type: object) -> bool:
    """Whether CouchDB stores an attachment of ``content_type`` gzip-encoded."""
    return isinstance(content_type, str) and any(p.match(content_type) for p in _PATTERNS)


def gzip_chunks(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The gzip encoding of ``chunks``, a piece at a time (never held whole)."""
    z = zlib.compressobj(_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS, 8)
    for chunk in chunks:
        out = z.compress(chunk)
        if out:
            yield out
    yield z.flush()


_CACHED = 4096
_lock = threading.Lock()
_lengths: OrderedDict[str, int] = OrderedDict()


def encoded_length(
    db: settee.Database, doc_id: str, name: str, rev: str | None, digest: str
) -> int:
    """The gzip length of an attachment (read once per digest)."""
    with _lock:
        if digest in _lengths:
            _lengths.move_to_end(digest)
            return _lengths[digest]
    _meta, chunks = db.attachment_chunks(doc_id, name, rev=rev)
    length = sum(len(piece) for piece in gzip_chunks(chunks))
    with _lock:
        _lengths[digest] = length
        while len(_lengths) > _CACHED:
            _lengths.popitem(last=False)
    return length


def with_encoding_info(db: settee.Database, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with ``encoding``/``encoded_length`` on each compressible attachment,
    stub, inline or following alike (couch_att:to_json with ShowEncoding)."""
    attachments = doc.get("_attachments")
    if not isinstance(attachments, dict):
        return doc
    shown = {}
    for name, att in attachments.items():
        if compressible(att.get("content_type")):
            try:
                length = encoded_length(db, doc["_id"], name, doc["_rev"], att["digest"])
            except settee.NotFound:  # the revision compacted away since it was read
                shown[name] = att
                continue
            att = {**att, "encoding": "gzip", "encoded_length": length}
        shown[name] = att
    return {**doc, "_attachments": shown}


def accepts_gzip(header: str | None) -> bool:
    """Whether ``Accept-Encoding`` takes gzip (mochiweb's accepted_encodings, which
    couch_httpd:accepted_encodings asks of ``["gzip", "identity"]``): named with
    q > 0, or ``*`` with q > 0 and gzip not named."""
    named: dict[str, float] = {}
    for item in (header or "").split(","):
        coding, *params = item.split(";")
        q = 1.0
        for param in params:
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if coding.strip():
            named[coding.strip().lower()] = q
    if "gzip" in named:
        return named["gzip"] > 0
    return named.get("*", 0) > 0
