"""Attachment bytes that are never held whole: spooled to a temporary file as
they arrive, their length and md5 digest counted on the way (SEMANTICS.md §18).

A ``Spooled`` is what a streamed attachment write hands the store: ``settee
serve`` spools a ``PUT /db/doc/att`` body and each ``multipart/related`` part,
and the embedded API spools a binary file given as an attachment's ``data``.
The engine's writer then copies it into chunk terms 64 KiB at a time, so no
layer between the socket (or the caller's file) and the shard file holds more
than a chunk or two. The first ``MEMORY_LIMIT`` bytes stay in memory; beyond
that the bytes live in an anonymous temporary file that the operating system
deletes when it is closed (or the process dies), so nothing is left behind.
"""

from __future__ import annotations

import base64
import hashlib
import tempfile
import threading
from collections.abc import Iterator
from typing import IO, Any

from settee.spec.errors import BadRequest, SetteeError
from settee.spec.values import describe, plain_bytes

__all__ = ["MEMORY_LIMIT", "PIECE", "SpoolWriter", "Spooled", "spool_file"]

#: Bytes a spool keeps in memory before it moves them to a temporary file.
MEMORY_LIMIT = 1 << 20
#: Bytes ``Spooled.chunks`` yields at a time: one chunk term's worth (FORMAT.md).
PIECE = 65_536


#: What proves a ``Spooled`` came from ``SpoolWriter.finish``.
_SEAL = object()


class Spooled:
    """Immutable attachment bytes in a temporary file; made by ``SpoolWriter``.

    Compared and hashed by identity (the bytes are not read to compare them).
    Reading is thread-safe: each ``chunks`` reads under a lock, so two readers
    interleave whole pieces, never half-seeks.
    """

    __slots__ = ("_file", "_lock", "digest", "length")

    def __init__(self, file: IO[bytes], length: int, digest: str, *, seal: object = None) -> None:
        if seal is not _SEAL:
            # Its length and digest are trusted: only a SpoolWriter, which counted and
            # digested the bytes itself, may make one (a hand-made one with a wrong
            # length or digest was stored as given, found in review).
            raise TypeError("a Spooled is made by SpoolWriter.finish(), not by hand")
        self._file = file
        self._lock = threading.Lock()
        #: Number of bytes.
        self.length = length
        #: CouchDB's digest of the bytes, ``"md5-"`` and base64 (spec.attachments.digest_of).
        self.digest = digest

    def chunks(self, size: int = PIECE) -> Iterator[bytes]:
        """The bytes, ``size`` at a time (nothing for no bytes); may be called again."""
        offset = 0
        while offset < self.length:
            with self._lock:
                self._file.seek(offset)
                piece = self._file.read(min(size, self.length - offset))
            if not piece:
                raise SetteeError(f"spooled attachment bytes ended at {offset} of {self.length}")
            offset += len(piece)
            yield piece

    def read(self) -> bytes:
        """All the bytes at once (the reference model and small attachments)."""
        return b"".join(self.chunks())

    def close(self) -> None:
        """Give back the temporary file now rather than when collected."""
        with self._lock:
            self._file.close()

    def __len__(self) -> int:
        return self.length

    @property
    def closed(self) -> bool:
        """Whether ``close`` gave its bytes back: they can no longer be read."""
        return self._file.closed

    def __del__(self) -> None:
        # Closing here, not leaving it to the file, spares a ResourceWarning. A
        # hand-made one was refused before it had a file: nothing to close.
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()

    def __repr__(self) -> str:
        return f"<Spooled {self.length} bytes {self.digest}>"


class SpoolWriter:
    """Collects bytes piece by piece into a ``Spooled``."""

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=MEMORY_LIMIT)  # noqa: SIM115
        self._md5 = hashlib.md5()
        self._length = 0

    def write(self, piece: bytes) -> None:
        self._file.write(piece)
        self._md5.update(piece)
        self._length += len(piece)

    def finish(self) -> Spooled:
        digest = "md5-" + base64.b64encode(self._md5.digest()).decode("ascii")
        return Spooled(self._file, self._length, digest, seal=_SEAL)

    def abandon(self) -> None:
        self._file.close()


def spool_file(file: Any) -> Spooled:
    """The rest of a readable binary file object, spooled; ``BadRequest`` for an
    object whose ``read`` fails or gives anything but bytes."""
    writer = SpoolWriter()
    try:
        while True:
            piece = file.read(PIECE)
            if piece is None:
                raise BadRequest(
                    "attachment data file has no bytes ready (non-blocking?): give a "
                    "blocking binary file"
                )
            # The type first: a text file at its end gives "", which is no end of
            # bytes (the equivalence machine found a drained StringIO stored as an
            # empty attachment, where a fresh one was refused).
            if not issubclass(type(piece), bytes | bytearray | memoryview):
                raise BadRequest(
                    f"attachment data file gave {type(piece).__name__}, not bytes: "
                    "open it in binary mode"
                )
            # Its storage, not its __bytes__ or __len__ (a subclass's may lie or raise);
            # a released memoryview raises: caught below.
            data = plain_bytes(piece)
            if not data:
                break
            writer.write(data)
    except BadRequest:
        writer.abandon()
        raise
    except Exception as exc:
        writer.abandon()
        # describe(), not repr: the file's or the error's own __repr__ may raise, or be huge.
        raise BadRequest(
            f"reading attachment data from {describe(file)} failed: {describe(exc)}"
        ) from exc
    return writer.finish()
