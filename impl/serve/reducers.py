"""CouchDB's builtin reduce functions ``_sum``, ``_stats`` and CouchDB 3.5's
``_first``, ``_last``, ``_top_N`` and ``_bottom_N`` (couch_query_servers).

``_sum`` adds numbers, arrays of numbers position by position (the longer
array's extra members kept; a number meets an array as a one-member array) and
objects key by key, nested to any depth. A value it cannot add does not fail
the query: the reduction becomes CouchDB's error object
``{"error": "builtin_reduce_error", "reason": ..., "caused_by": value}``, and an
error object met as a value (a rereduce of one) stays the reduction, so the
error reaches the row however the rows were grouped.

``_stats`` combines numbers and pre-aggregated objects (``sum``, ``count``,
``min``, ``max``, ``sumsqr``; other keys ignored), or arrays of them position by
position when every value is an array of the same length (ddocs.rst). What it
cannot combine is a 400 ``builtin_reduce_error`` here, where CouchDB's
``throw({invalid_value, ...})`` becomes a 500.

Both are folds a rereduce agrees with: reducing every value at once equals
reducing the reductions of any split of them (tests/test_reducers.py).

``_first`` and ``_last`` (ddocs.rst, new in 3.5) answer the value of the group's
row with the smallest and the largest key, ties to the doc id, whatever order
the query reads the rows in; ``_top_N`` and ``_bottom_N`` the N largest or
smallest distinct values (in CouchDB's collation; of values that collate equal
the first met stays), largest or smallest first, N from 1 to ``MAX_RANK``
(couch_query_servers:builtin_rank_n merges with lists:umerge).
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

from settee.serve.protocol import HTTPError
from settee.spec.collation import collate_json

__all__ = ["MAX_RANK", "first_of", "last_of", "rank_of", "ranked", "stats_of", "sum_of"]

#: couch_mrview's ?MAX_RANK: the largest N of ``_top_N`` and ``_bottom_N``.
MAX_RANK = 100
#: What Erlang's binary_to_integer reads: an optional sign, then ASCII digits.
_ERLANG_INTEGER = re.compile(r"[+-]?[0-9]+")

#: couch_query_servers' ?SUMERROR, the reason of a ``_sum`` error object.
SUM_ERROR = (
    "The _sum function requires that map values be numbers, arrays of numbers, or "
    "objects. Objects cannot be mixed with other data structures. Objects can be "
    "arbitrarily nested, provided that the values for all fields are themselves "
    "numbers, arrays of numbers, or objects."
)
_STATS_FIELDS = ("sum", "count", "min", "max", "sumsqr")


class _Unsummable(Exception):
    """The reduction is ``self.reduction``, an error object, whatever else follows."""

    def __init__(self, reduction: dict[str, Any]) -> None:
        super().__init__("builtin_reduce_error")
        self.reduction = reduction


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def sum_of(values: list[Any]) -> Any:
    """``_sum`` of ``values``: their total, or the error object of the first value
    that cannot be added (builtin_sum_rows)."""
    total: Any = 0
    try:
        for value in values:
            total = _add(value, total)
    except _Unsummable as unsummable:
        return unsummable.reduction
    except OverflowError:  # an int past a float's range met a float
        raise _overflowed("_sum") from None
    return _finite(total, "_sum")


def _add(value: Any, total: Any) -> Any:
    """sum_values: ``value`` added to the running ``total``."""
    if _is_number(value) and _is_number(total):
        return total + value
    if _array_like(value) and _array_like(total):  # one of them is an array
        return _add_arrays(_as_array(total), _as_array(value))
    if isinstance(value, dict):
        if value.get("error") == "builtin_reduce_error":
            raise _Unsummable(value)  # a reduction that already failed: it stays failed
        if type(total) is int and total == 0:  # nothing added yet (Erlang's pattern 0)
            return value
        if isinstance(total, dict):
            return _add_objects(value, total)
    raise _Unsummable(_sum_error(value))


def _array_like(value: Any) -> bool:
    """What sum_arrays takes: an array, or a number (as an array of itself)."""
    return isinstance(value, list) or _is_number(value)


def _as_array(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _add_arrays(xs: list[Any], ys: list[Any]) -> list[Any]:
    """sum_arrays: member by member while both last; then the longer one's rest."""
    added = []
    for i, (x, y) in enumerate(zip(xs, ys, strict=False)):
        if not (_is_number(x) and _is_number(y)):
            raise _Unsummable(_sum_error(xs[i:]))
        added.append(x + y)
    shorter = min(len(xs), len(ys))
    return added + xs[shorter:] + ys[shorter:]


def _add_objects(value: dict[str, Any], total: dict[str, Any]) -> dict[str, Any]:
    """sum_objects: keys in both are added, the others kept; keys sorted, as the
    Erlang sums them (lists:sort of both property lists)."""
    added = {}
    for key in sorted(value.keys() | total.keys()):
        if key in value and key in total:
            added[key] = _add(value[key], total[key])
        else:
            added[key] = value[key] if key in value else total[key]
    return added


def _sum_error(cause: Any) -> dict[str, Any]:
    return {"error": "builtin_reduce_error", "reason": SUM_ERROR, "caused_by": cause}


def stats_of(values: list[Any]) -> Any:
    """``_stats`` of ``values`` (builtin_stats, then pack_stats)."""
    if not values:
        return dict.fromkeys(_STATS_FIELDS, 0)
    if isinstance(values[0], list):
        return _stats_of_arrays(values)
    stats = _unpacked(values[0])
    try:
        for value in values[1:]:
            stats = _combined(stats, _unpacked(value))
    except OverflowError:  # an int past a float's range met a float
        raise _overflowed("_stats") from None
    return _packed(stats)


def _stats_of_arrays(values: list[Any]) -> list[dict[str, Any]]:
    width = len(values[0])
    if not all(isinstance(v, list) and len(v) == width for v in values):
        raise _stats_error(
            "when the first value is an array, every value must be an array of its length"
        )
    return [stats_of([v[i] for v in values]) for i in range(width)]


def _unpacked(value: Any) -> tuple[Any, ...]:
    """A number as the stats of itself; a pre-aggregated object as its five numbers."""
    if _is_number(value):
        return (value, 1, value, value, value * value)
    if isinstance(value, dict):
        fields = tuple(value.get(name) for name in _STATS_FIELDS)
        if all(_is_number(field) for field in fields):
            return fields
        raise _stats_error(
            f"a pre-aggregated value needs numeric sum, count, min, max and sumsqr, not {value!r}"
        )
    raise _stats_error(f"not {value!r}")


def _combined(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
    return (a[0] + b[0], a[1] + b[1], min(a[2], b[2]), max(a[3], b[3]), a[4] + b[4])


def _packed(stats: tuple[Any, ...]) -> dict[str, Any]:
    packed = dict(zip(_STATS_FIELDS, stats, strict=True))
    for name in ("sum", "sumsqr"):
        packed[name] = _finite(packed[name], "_stats")
    return packed


def _stats_error(detail: str) -> HTTPError:
    return HTTPError(
        400,
        "builtin_reduce_error",
        f"The _stats function requires that map values be numbers or arrays of numbers: {detail}",
    )


def _finite(total: Any, builtin: str) -> Any:
    """``total``, or builtin_reduce_error when it is a float past the largest one
    (JSON has no infinity: the answer was a 500, found in review), however deep in
    an array or object it sits."""
    if isinstance(total, float) and not math.isfinite(total):
        raise _overflowed(builtin)
    if isinstance(total, list):
        for member in total:
            _finite(member, builtin)
    elif isinstance(total, dict) and total.get("error") != "builtin_reduce_error":
        for member in total.values():
            _finite(member, builtin)
    return total


def _overflowed(builtin: str) -> HTTPError:
    return HTTPError(
        400, "builtin_reduce_error", f"The {builtin} function overflowed: the sum is not finite"
    )


def rank_of(builtin: str) -> str | None:
    """couch_mrview:validate's refusal of a ``_top_``/``_bottom_`` builtin whose N is
    not an integer from 1 to ``MAX_RANK`` (its reason), or None when it is one."""
    prefix = "_top_" if builtin.startswith("_top_") else "_bottom_"
    text = builtin[len(prefix) :]
    if not _ERLANG_INTEGER.fullmatch(text):
        return "invalid rank reducer"
    if not 1 <= int(text) <= MAX_RANK:
        return f"rank value must be between 1 and {MAX_RANK}"
    return None


def ranked(builtin: str, values: list[Any]) -> list[Any]:
    """``_top_N`` or ``_bottom_N`` of ``values`` (``rank_of`` passed ``builtin``)."""
    top = builtin.startswith("_top_")
    count = int(builtin[len("_top_" if top else "_bottom_") :])
    # Stable: among values that collate equal, the first met comes first and stays.
    ordered = sorted(values, key=functools.cmp_to_key(collate_json), reverse=top)
    distinct: list[Any] = []
    for value in ordered:
        if not distinct or collate_json(distinct[-1], value) != 0:
            distinct.append(value)
            if len(distinct) == count:
                break
    return distinct


def _by_key_then_id(a: tuple[Any, str, Any], b: tuple[Any, str, Any]) -> int:
    """couch_ejson_compare:less_json_ids: keys in collation order, then doc ids as
    raw strings (code point order, which is UTF-8 byte order)."""
    order = collate_json(a[0], b[0])
    if order:
        return order
    return (a[1] > b[1]) - (a[1] < b[1])


def first_of(rows: list[tuple[Any, str, Any]]) -> Any:
    """``_first``: the value of the smallest ``(key, doc id, value)`` row."""
    return min(rows, key=functools.cmp_to_key(_by_key_then_id))[2]


def last_of(rows: list[tuple[Any, str, Any]]) -> Any:
    """``_last``: the value of the largest ``(key, doc id, value)`` row."""
    return max(rows, key=functools.cmp_to_key(_by_key_then_id))[2]
