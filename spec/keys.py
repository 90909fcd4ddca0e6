"""Document id order and ``_all_docs`` key ranges, shared by both sides.

``_all_docs`` orders ids by raw code point, which for valid UTF-8 is also the
byte order CouchDB's raw collation uses, and which is Python's own ``str``
order. Range options follow CouchDB: with ``descending=True`` iteration runs
from ``startkey`` *down* to ``endkey``, so ``startkey`` is the upper bound;
``inclusive_end`` only concerns ``endkey``.

:func:`collate` compares code point by code point instead of using ``a < b``:
the result is the same (tests/test_spec.py checks it with Hypothesis), but
CrossHair 0.0.113's symbolic ``str`` ordering is unsound (it finds
"counterexamples" to ``a < b == not b <= a``), while its reasoning about
``ord`` is sound, so the contracts here stay checkable.
"""

from __future__ import annotations

__all__ = ["before_start", "collate", "in_range", "sort_ids"]


def collate(a: str, b: str) -> int:
    """-1, 0 or 1 as ``a`` sorts before, equal to or after ``b`` (raw code points).

    post: __return__ in (-1, 0, 1)
    post: (__return__ == 0) == (a == b)
    post: __return__ == -collate(b, a)
    """
    for x, y in zip(a, b, strict=False):
        if x != y:
            return -1 if ord(x) < ord(y) else 1
    return (len(a) > len(b)) - (len(a) < len(b))


def in_range(
    key: str, startkey: str | None, endkey: str | None, descending: bool, inclusive_end: bool
) -> bool:
    """True when ``key`` lies in the ``_all_docs`` range the options describe.

    post: startkey is not None or endkey is not None or __return__
    post: key != endkey or not __return__ or inclusive_end
    post: not __return__ or not before_start(key, startkey, descending)
    """
    sign = -1 if descending else 1
    after_start = startkey is None or sign * collate(key, startkey) >= 0
    if endkey is None:
        before_end = True
    else:
        to_end = sign * collate(key, endkey)
        before_end = to_end < 0 or (inclusive_end and to_end == 0)
    return after_start and before_end


def before_start(key: str, startkey: str | None, descending: bool) -> bool:
    """True when iteration in the given direction meets ``key`` before it
    reaches ``startkey``: the rows CouchDB counts in ``offset``.

    post: __return__ != in_range(key, startkey, None, descending, True)
    """
    if startkey is None:
        return False
    return collate(key, startkey) == (1 if descending else -1)


def sort_ids(ids: list[str], descending: bool) -> list[str]:
    """``ids`` in ``_all_docs`` iteration order (Python ``str`` order is code
    point order, i.e. :func:`collate`).

    post: len(__return__) == len(ids)
    """
    return sorted(ids, reverse=descending)
