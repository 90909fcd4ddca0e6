"""How ``_find`` picks an index and the key range it reads, as CouchDB 3.5 plans it.

Each function follows one of CouchDB's (apache/couchdb ``src/mango/src``), on
settee's normal form of a selector (``settee.spec.selector``):

* :func:`indexable_fields` and :func:`field_ranges` — mango_idx_view: the fields
  of the top-level conjunction that an index scan can narrow (``$lt`` … ``$gt``,
  ``$beginsWith``, ``$exists``) and, for each, the range the conjunction allows
  (``None``: no value can match);
* :func:`has_required_fields` and :func:`is_constant_field` — mango_selector;
* :func:`usable` — mango_idx_view:is_usable and mango_idx_special:is_usable;
* :func:`choose` — mango_cursor_view:composite_indexes and choose_best_index:
  the index whose leading columns the ranges cover most closely, then the one
  with the fewest columns, then by design document and name;
* :func:`start_key` and :func:`end_key` — the scan's bounds, ``MAX`` standing for
  CouchDB's ``?MAX_JSON_OBJ`` (json indexes) or ``?MAX_STR`` (``_all_docs``).
"""

from __future__ import annotations

from itertools import chain
from typing import Any

from settee.serve.mango import MangoIndex
from settee.spec import selector
from settee.spec.collation import collate_json

__all__ = [
    "MAX",
    "MIN",
    "choose",
    "covers",
    "end_key",
    "field_name",
    "field_ranges",
    "has_required_fields",
    "indexable_fields",
    "is_constant_field",
    "ranked",
    "rejections",
    "selector_fields",
    "selector_json",
    "start_key",
    "usable",
]


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: mango_json:min() and max(): below and above every JSON value.
MIN = _Sentinel("MIN")
MAX = _Sentinel("MAX")

Path = tuple[str, ...]
#: ``(low operator, low, high operator, high)``, or None for an empty range.
Range = tuple[str, Any, str, Any] | None

_INDEXABLE = frozenset({"$lt", "$lte", "$eq", "$gt", "$gte", "$beginsWith", "$exists"})


def field_name(path: Path) -> str:
    """A path as CouchDB's normalised selector names it (parts joined by dots)."""
    return ".".join(part.replace(".", "\\.") for part in path)


def _cmp(a: Any, b: Any) -> int:
    """mango_json:cmp: view collation, with MIN and MAX around every value."""
    if a is b and isinstance(a, _Sentinel):
        return 0
    if a is MIN or b is MAX:
        return -1
    if a is MAX or b is MIN:
        return 1
    return collate_json(a, b)


def indexable_fields(node: Any) -> list[Path]:
    """The fields of the top-level conjunction an index range can narrow (sorted)."""
    if node is selector.MATCH_ALL:
        return []
    if node[0] == "$and":
        found = set(chain.from_iterable(indexable_fields(arg) for arg in node[1]))
        return sorted(found, key=field_name)
    if node[0] == "field" and node[2][0] in _INDEXABLE:
        return [node[1]]
    return []


def field_ranges(node: Any) -> list[tuple[Path, Range]]:
    """``[(field, range)]`` for each indexable field; one empty range ends the list."""
    found: list[tuple[Path, Range]] = []
    for path in indexable_fields(node):
        narrowed = _range(node, path, ("$gt", MIN, "$lt", MAX))
        if narrowed is None:
            return [(path, None)]
        found.append((path, narrowed))
    return found


def _range(node: Any, path: Path, current: Range) -> Range:
    if current is None or node is selector.MATCH_ALL:
        return current
    if node[0] == "$and":
        for arg in node[1]:
            current = _range(arg, path, current)
            if current is None:
                return None
        return current
    if node[0] == "field" and node[1] == path:
        return _narrow(node[2], current)
    return current


def _position(low: Any, arg: Any, high: Any) -> str:
    order = _cmp(arg, low)
    if order < 0:
        return "min"
    if order == 0:
        return "low"
    order = _cmp(arg, high)
    return "mid" if order < 0 else "high" if order == 0 else "max"


def _narrow(cond: Any, current: tuple[str, Any, str, Any]) -> Range:
    """mango_idx_view:range/5 for one condition."""
    op, arg = cond
    lc, low, hc, high = current
    if op == "$beginsWith":
        # U+FFFF sorts after every other character in the collation.
        after = _narrow(("$gte", arg), current)
        return None if after is None else _narrow(("$lte", arg + "\uffff"), after)
    if op not in ("$lt", "$lte", "$eq", "$gte", "$gt"):
        return current  # matched after the scan, not by the range
    pos = _position(low, arg, high)
    if op == "$lt":
        if pos in ("min", "low"):
            return None
        return (lc, low, "$lt", arg) if pos in ("mid", "high") else current
    if op == "$lte":
        if pos == "min" or (pos == "low" and lc not in ("$gte", "$eq")):
            return None
        if pos == "low":
            return ("$eq", arg, "$eq", arg)
        return (lc, low, "$lte", arg) if pos == "mid" else current
    if op == "$eq":
        if pos == "mid" or (pos == "low" and lc in ("$gte", "$eq")):
            return ("$eq", arg, "$eq", arg)
        if pos == "high" and hc in ("$lte", "$eq"):
            return ("$eq", arg, "$eq", arg)
        return None
    if op == "$gte":
        if pos in ("min", "low"):
            return current
        if pos == "mid":
            return ("$gte", arg, hc, high)
        if pos == "high" and hc in ("$lte", "$eq"):
            return ("$eq", arg, "$eq", arg)
        return None
    # $gt
    if pos == "min":
        return current
    return ("$gt", arg, hc, high) if pos in ("low", "mid") else None


def has_required_fields(node: Any, required: list[Path]) -> bool:
    """mango_selector:has_required_fields: every field is required to exist by the
    selector (through ``$and``, and through ``$or`` when by each branch)."""
    return not _remainder(node, required)


def _remainder(sel: Any, required: list[Path]) -> list[Path]:
    if sel is selector.MATCH_ALL or not required:
        return required
    nodes = sel if isinstance(sel, list) else [sel]
    if not nodes:
        return required
    head, rest = nodes[0], nodes[1:]
    if head is selector.MATCH_ALL:
        return _remainder(rest, required)
    if head[0] == "$and" and not rest:
        return _remainder(head[1], required)
    if head[0] == "$or":
        left = set(chain.from_iterable(_remainder(arg, required) for arg in head[1]))
        return _remainder(rest, sorted(left, key=field_name))
    if head[0] == "$and":
        return _remainder(rest, _remainder(head[1], required))
    if head[0] == "field" and head[2] != ("$exists", False):
        return _remainder(rest, [path for path in required if path != head[1]])
    return _remainder(rest, required)


def is_constant_field(sel: Any, path: Path) -> bool:
    """mango_selector:is_constant_field: the first condition on ``path`` is ``$eq``."""
    if sel is selector.MATCH_ALL:
        return False
    nodes = sel if isinstance(sel, list) else [sel]
    if not nodes:
        return False
    head, rest = nodes[0], nodes[1:]
    if head is not selector.MATCH_ALL and head[0] == "$and" and not rest:
        return any(is_constant_field(arg, path) for arg in head[1])
    if head is not selector.MATCH_ALL and head[0] == "field" and head[1] == path:
        return bool(head[2][0] == "$eq")
    return is_constant_field(rest, path)


def _can_use_sort(columns: list[str], sort: list[str], sel: Any) -> bool:
    while True:
        if not sort:
            return True
        if not columns:
            return False
        if columns[0] == sort[0]:
            return columns[: len(sort)] == sort
        if not is_constant_field(sel, selector.parse_field(columns[0])):
            return False
        columns = columns[1:]


def rejections(index: MangoIndex, node: Any, sort: list[str]) -> list[str]:
    """Why ``index`` cannot answer the query (mango_idx_view:is_usable's and
    mango_idx_special:is_usable's reasons; none: it can). A json index needs its
    columns (but the sort fields, ``_id`` and ``_rev``) all required by the
    selector, and the sort its leading columns after ones the selector holds
    constant; ``_all_docs`` serves a sort on ``_id`` only, for a selector on it."""
    if index.ddoc is None:
        if not sort:
            return []
        reasons = [] if ("_id",) in indexable_fields(node) else ["field_mismatch"]
        return reasons + ([] if sort == ["_id"] else ["sort_order_mismatch"])
    columns = list(index.fields)
    required = sorted(set(columns) - set(sort) - {"_id", "_rev"})
    paths = [selector.parse_field(column) for column in required]
    reasons = [] if has_required_fields(node, paths) else ["field_mismatch"]
    return reasons + ([] if _can_use_sort(columns, sort, node) else ["sort_order_mismatch"])


def usable(index: MangoIndex, node: Any, sort: list[str]) -> bool:
    """Whether ``index`` can answer the query (:func:`rejections` has no reason)."""
    return not rejections(index, node, sort)


def _prefix(index: MangoIndex, ranges: list[tuple[Path, Range]]) -> list[Range]:
    found: list[Range] = []
    for path in index.paths:
        matched = [r for p, r in ranges if p == path]
        if not matched:
            break
        found.append(matched[0])
    return found


def ranked(indexes: list[MangoIndex], node: Any) -> list[tuple[MangoIndex, list[Range], int]]:
    """``indexes`` (all json, or the one ``_all_docs``), best first, each with the
    ranges of its leading columns and how many of the selector's ranges those
    leave out (mango_cursor_view:composite_indexes and choose_best_index)."""
    ranges = field_ranges(node)
    if indexes[0].ddoc is None:
        ranges = [*ranges, (("_id",), ("$gt", None, "$lt", MAX))]
    found = []
    for index in indexes:
        prefix = _prefix(index, ranges)
        found.append((index, prefix, len(ranges) - len(prefix)))
    return sorted(found, key=lambda e: (e[2], len(e[0].fields), e[0].ddoc or "", e[0].name))


def choose(indexes: list[MangoIndex], node: Any) -> tuple[MangoIndex, list[Range]]:
    """The best of ``indexes`` (all json, or the one ``_all_docs``) and its ranges."""
    best, prefix, _distance = ranked(indexes, node)[0]
    return best, prefix


def start_key(index: MangoIndex, ranges: list[Range]) -> Any:
    """Where the scan starts (ascending): a key prefix, or an ``_all_docs`` id."""
    if index.ddoc is None:
        assert ranges and ranges[0] is not None  # the catch-all range is always there
        low = ranges[0][1]
        return "" if low is MIN else low
    key = []
    for found in ranges:
        assert found is not None  # an empty range is answered without a scan
        if found[1] is MIN:
            break
        key.append(found[1])
    return key


def end_key(index: MangoIndex, ranges: list[Range]) -> Any:
    """Where the scan ends (ascending, inclusive); ``MAX`` past every key it starts."""
    if index.ddoc is None:
        assert ranges and ranges[0] is not None
        return ranges[0][3]
    key: list[Any] = []
    for found in ranges:
        assert found is not None
        if found[3] is MAX:
            return [*key, MAX]
        key.append(found[3])
    return [*key, MAX]


def selector_fields(node: Any) -> list[str]:
    """mango_selector:fields: the field names at the top, through ``$and``/``$or``."""
    if node is selector.MATCH_ALL:
        return []
    if node[0] in ("$and", "$or"):
        return list(chain.from_iterable(selector_fields(arg) for arg in node[1]))
    if node[0] == "field":
        return [field_name(node[1])]
    return ["$not"]


def covers(index: MangoIndex, fields: list[str], node: Any) -> bool:
    """mango_idx_view:covers: the index's columns and ``_id`` hold every field the
    query asks for and its selector reads (never for all fields, or ``_all_docs``)."""
    if index.ddoc is None or not fields:
        return False
    return set(fields) | set(selector_fields(node)) <= {"_id", *index.fields}


def selector_json(node: Any) -> Any:
    """The normal form as CouchDB's ``_explain`` shows it."""
    if node is selector.MATCH_ALL:
        return {}
    kind = node[0]
    if kind in ("$and", "$or"):
        return {kind: [selector_json(arg) for arg in node[1]]}
    if kind == "field":
        return {field_name(node[1]): _condition_json(node[2])}
    return {"$not": selector_json(node[1])}


def _condition_json(cond: Any) -> Any:
    op, arg = cond
    if op in ("$elemMatch", "$allMatch", "$keyMapMatch"):
        return {op: selector_json(arg)}
    if op == "$not":
        return {"$not": _condition_json(arg)}
    return {op: arg}
