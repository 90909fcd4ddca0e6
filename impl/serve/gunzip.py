"""gzip decoded piece by piece, within a limit: attachment parts that say
``"encoding": "gzip"`` and request bodies sent with ``Content-Encoding: gzip``
(aiohttp's own decoding is off: on bytes that were not gzip it answered 500 or
left the handler waiting for a body that never ended)."""

from __future__ import annotations

import zlib

from settee.serve.protocol import HTTPError

__all__ = ["Gunzip"]


class Gunzip:
    """gzip decoding piece by piece, members one after another as ``gzip.decompress``."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._started = False

    def feed(self, data: bytes, most: int) -> bytes:
        out = bytearray()
        try:
            while data:
                self._started = True
                out += self._inflate.decompress(data, max(most - len(out), 1))
                data = self._inflate.unconsumed_tail
                if self._inflate.eof:
                    data = self._inflate.unused_data + data
                    self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    self._started = False
                if len(out) >= most:
                    break  # past the limit: the caller answers 413
        except zlib.error:
            raise self._invalid() from None
        return bytes(out)

    def finish(self) -> None:
        if self._started and not self._inflate.eof:
            raise self._invalid()

    def _invalid(self) -> HTTPError:
        return HTTPError(400, "bad_request", f"{self._what}: not valid gzip")
