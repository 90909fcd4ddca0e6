"""``multipart/related`` document bodies: how CouchDB's replicator (and clients
such as couchdb-python) send a document with its attachments' bytes attached.

The first part is the document's JSON, whose ``_attachments`` entries that say
``"follows": true`` take their bytes, in order, from the parts after it
(couch_doc:doc_from_multi_part_stream). The body is parsed as it arrives, as
bytes (an attachment may hold any byte, CRLF included): the JSON part is
collected (it is a document, bounded like one), and each attachment part goes
straight to a ``Spooled`` file, gzip-decoded on the way when the document says
``"encoding": "gzip"``, so an attachment is never held whole (SEMANTICS.md §18).
The document that comes out carries the spooled bytes as its attachments'
``data``. A ``length`` or ``digest`` sent with a part must match its bytes.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from settee.serve.gunzip import Gunzip
from settee.serve.protocol import HTTPError, decode_object
from settee.spec.spool import MEMORY_LIMIT, Spooled, SpoolWriter

__all__ = ["RelatedReader", "boundary_of", "is_related", "read_related"]

#: Runs a blocking call on a worker thread (``State.run``).
Run = Callable[..., Awaitable[Any]]
#: The most bytes of part headers accepted (CouchDB's replicator sends ~100).
MAX_PART_HEADERS = 64 * 1024


def is_related(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "multipart/related"


def boundary_of(content_type: str) -> bytes:
    for param in content_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "boundary" and value.strip().strip('"'):
            try:
                return value.strip().strip('"').encode("ascii")
            except UnicodeEncodeError:
                raise HTTPError(400, "bad_request", "multipart boundary is not ASCII") from None
    raise HTTPError(400, "bad_request", "multipart/related without a boundary")


def _malformed(what: str) -> HTTPError:
    return HTTPError(400, "bad_request", f"multipart/related body: {what}")


class RelatedReader:
    """Reads a multipart body (RFC 2046) from ``chunks`` as they arrive: each part's
    headers, then its content handed to a sink piece by piece.

    Only the bytes that might be the start of the next delimiter are held back, so
    a part's content, however large, passes through in pieces."""

    def __init__(self, chunks: AsyncIterator[bytes], boundary: bytes) -> None:
        self._chunks = chunks
        # The delimiter is CRLF "--" boundary; a body may begin with the delimiter
        # itself, without the CRLF, so one is put in front (any preamble is skipped).
        self._buf = bytearray(b"\r\n")
        self._delimiter = b"\r\n--" + boundary
        self._eof = False

    async def _more(self) -> bool:
        if self._eof:
            return False
        try:
            self._buf += await anext(self._chunks)
        except StopAsyncIteration:
            self._eof = True
            return False
        return True

    async def _have(self, n: int) -> bool:
        while len(self._buf) < n:
            if not await self._more():
                return False
        return True

    async def _until(self, marker: bytes, sink: Callable[[bytes], Awaitable[None]]) -> None:
        """Hand ``sink`` the bytes before the next ``marker`` and consume the marker."""
        keep = len(marker) - 1
        while True:
            found = self._buf.find(marker)
            if found >= 0:
                await sink(bytes(self._buf[:found]))
                del self._buf[: found + len(marker)]
                return
            if len(self._buf) > keep:
                await sink(bytes(self._buf[: len(self._buf) - keep]))
                del self._buf[: len(self._buf) - keep]
            if not await self._more():
                raise _malformed("it is not closed by its boundary")

    async def start(self) -> None:
        """Skip the preamble, up to and including the first delimiter."""

        async def skip(_: bytes) -> None:
            return None

        await self._until(self._delimiter, skip)

    async def next_part(self) -> dict[str, str] | None:
        """After a delimiter: the next part's headers, or None after the closing one."""
        if not await self._have(2):
            raise _malformed("it ends after a boundary")
        if self._buf.startswith(b"--"):
            return None
        while self._buf[:1] in (b" ", b"\t"):  # transport padding (RFC 2046 5.1.1)
            del self._buf[:1]
            await self._have(2)
        if not self._buf.startswith(b"\r\n"):
            raise _malformed("a boundary is not followed by a line break")
        del self._buf[:2]
        return await self._headers()

    async def _headers(self) -> dict[str, str]:
        if not await self._have(2):
            raise _malformed("a part ends in its headers")
        if self._buf.startswith(b"\r\n"):
            # No headers at all (MIME allows it; CouchDB 1.x's replicator sends such
            # parts): the blank line comes first, everything after it is content.
            del self._buf[:2]
            return {}
        head = bytearray()

        async def collect(piece: bytes) -> None:
            head.extend(piece)
            if len(head) > MAX_PART_HEADERS:
                raise _malformed(f"part headers longer than {MAX_PART_HEADERS} bytes")

        await self._until(b"\r\n\r\n", collect)
        headers = {}
        for line in bytes(head).split(b"\r\n"):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return headers

    async def content(self, sink: Callable[[bytes], Awaitable[None]]) -> None:
        """The current part's content, to ``sink``, up to the next delimiter."""
        await self._until(self._delimiter, sink)


class _PartSpool:
    """One attachment part on its way to a ``Spooled``: decoded from gzip if the
    document says so, written a MiB at a time on a worker, at most ``limit``
    decoded bytes (a small gzip part must not unpack into an unbounded file)."""

    def __init__(self, name: str, encoding: object, run: Run, limit: int) -> None:
        if encoding not in ("identity", "gzip"):
            what = f"attachment {name!r}: unknown encoding {encoding!r}"
            raise HTTPError(400, "bad_request", what)
        self._name = name
        self._gunzip = Gunzip(f"attachment {name!r}") if encoding == "gzip" else None
        self._run = run
        self._limit = limit
        self._writer = SpoolWriter()
        self._pending: list[bytes] = []
        self._held = self._total = 0
        #: The md5 of the bytes as sent: CouchDB's digest of a gzip part is of them.
        self._sent_md5 = hashlib.md5()

    @property
    def sent_digest(self) -> str:
        return "md5-" + base64.b64encode(self._sent_md5.digest()).decode("ascii")

    async def write(self, piece: bytes) -> None:
        self._sent_md5.update(piece)
        if self._gunzip is not None:
            piece = self._gunzip.feed(piece, self._limit - self._total + 1)
        self._total += len(piece)
        if self._total > self._limit:
            raise HTTPError(413, "too_large", f"attachment {self._name!r} is too large")
        self._pending.append(piece)
        self._held += len(piece)
        if self._held >= MEMORY_LIMIT:
            await self._flush()

    async def _flush(self) -> None:
        await self._run(self._writer.write, b"".join(self._pending))
        self._pending, self._held = [], 0

    async def finish(self) -> Spooled:
        if self._gunzip is not None:
            self._gunzip.finish()
        await self._flush()
        return self._writer.finish()

    def abandon(self) -> None:
        self._writer.abandon()


async def read_related(
    chunks: AsyncIterator[bytes], content_type: str, run: Run, limit: int
) -> dict[str, Any]:
    """The document a ``multipart/related`` body carries, its attachments spooled."""
    reader = RelatedReader(chunks, boundary_of(content_type))
    await reader.start()
    if await reader.next_part() is None:
        raise _malformed("it has no parts")
    json_part = bytearray()

    async def collect(piece: bytes) -> None:
        json_part.extend(piece)

    await reader.content(collect)
    doc = await run(decode_object, bytes(json_part), "Document")
    attachments = doc.get("_attachments")
    following = [
        (name, att)
        for name, att in (attachments.items() if isinstance(attachments, dict) else [])
        if isinstance(att, dict) and att.get("follows") is True
    ]
    sent = 0
    while await reader.next_part() is not None:
        if sent == len(following):
            raise _count_mismatch(len(following), "more")
        name, att = following[sent]
        attachments[name] = await _attachment(reader, name, att, run, limit)
        sent += 1
    if sent != len(following):
        raise _count_mismatch(len(following), f"{sent}")
    return doc


def _count_mismatch(following: int, parts: str) -> HTTPError:
    return HTTPError(
        400, "bad_request", f"{following} attachments say follows but {parts} parts follow"
    )


async def _attachment(
    reader: RelatedReader, name: str, att: dict[str, Any], run: Run, limit: int
) -> dict[str, Any]:
    spool = _PartSpool(name, att.get("encoding", "identity"), run, limit)
    try:
        await reader.content(spool.write)
        data = await spool.finish()
    except BaseException:
        spool.abandon()
        raise
    _check_sent(name, att, data, spool.sent_digest)
    inline: dict[str, Any] = {
        "content_type": att.get("content_type", "application/octet-stream"),
        "data": data,
    }
    if "revpos" in att:
        inline["revpos"] = att["revpos"]
    return inline


def _check_sent(name: str, att: dict[str, Any], data: Spooled, sent_digest: str) -> None:
    """A ``length`` must count the stored (decoded) bytes; a ``digest`` may be of
    them or of the bytes as sent (CouchDB digests a gzip part as it was sent)."""
    length = att.get("length")
    if length is not None and (type(length) is not int or length != data.length):
        raise HTTPError(
            400,
            "bad_request",
            f"attachment {name!r}: {data.length} bytes follow, length says {length!r}",
        )
    digest = att.get("digest")
    if (
        isinstance(digest, str)
        and digest.startswith("md5-")
        and digest
        not in (
            data.digest,
            sent_digest,
        )
    ):
        raise HTTPError(400, "bad_request", f"attachment {name!r}: bytes do not match its digest")
