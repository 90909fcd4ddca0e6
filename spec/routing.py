"""Which shard holds a document: CouchDB's mem3 hash ranges.

A database with ``n`` shards splits the 32-bit crc32 ring into ``n``
consecutive inclusive ranges of ``2**32 // n`` hashes each, the last one
stretched to ``2**32 - 1`` (``mem3_util:make_key_ranges``). A document lives
in the range holding ``zlib.crc32(docid.encode("utf-8"))``
(``mem3_hash:crc32`` of the id binary).
"""

from __future__ import annotations

import zlib

__all__ = ["RING_SIZE", "doc_hash", "shard_of", "shard_ranges", "shards_of"]

RING_SIZE = 2**32


def shard_ranges(n: int) -> list[tuple[int, int]]:
    """The inclusive ``(begin, end)`` hash range of each of ``n`` shards.

    pre: 1 <= n <= 1024
    post: len(__return__) == n
    post: __return__[0][0] == 0 and __return__[-1][1] == RING_SIZE - 1
    post: all(a[1] + 1 == b[0] for a, b in zip(__return__, __return__[1:]))
    post: all(b <= e for b, e in __return__)
    """
    width = RING_SIZE // n
    ranges = [(i * width, i * width + width - 1) for i in range(n)]
    # mem3 gives the remainder of the division to the last range.
    ranges[-1] = (ranges[-1][0], RING_SIZE - 1)
    return ranges


def doc_hash(docid: str) -> int:
    """The ring position of a document id.

    post: 0 <= __return__ < RING_SIZE
    """
    return zlib.crc32(docid.encode("utf-8"))


def _index_of(h: int, n: int) -> int:
    """The shard whose range holds hash ``h``.

    pre: 1 <= n <= 1024 and 0 <= h < RING_SIZE
    post: 0 <= __return__ < n
    post: shard_ranges(n)[__return__][0] <= h <= shard_ranges(n)[__return__][1]
    """
    return min(h // (RING_SIZE // n), n - 1)


def shard_of(docid: str, n: int) -> int:
    """The index (0-based) of the shard that holds ``docid`` among ``n``.

    No contract of its own: it is ``_index_of(doc_hash(docid), n)``, and both
    carry one. Checking it took CrossHair 33 of the 35 seconds it spent on
    this module, hashing symbolic strings; a Hypothesis property in
    tests/test_spec.py checks the range.
    """
    return _index_of(doc_hash(docid), n)


def shards_of(docids: list[str], n: int) -> list[int]:
    """``shard_of`` of each id: one call for a multiget's keys (a Python call per
    key cost a sixth of a 100-key ``_all_docs``). No contract: CrossHair spends
    a minute on a list of hashes; a property test checks it against ``shard_of``.
    """
    width, last, crc32 = RING_SIZE // n, n - 1, zlib.crc32
    # _index_of inline, without min(): a call per key was half of this loop.
    return [i if (i := crc32(d.encode()) // width) < last else last for d in docids]
