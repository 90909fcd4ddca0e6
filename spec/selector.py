"""Mango selectors: CouchDB's JSON query language, shared by ``POST /{db}/_find``
and ``_changes?filter=_selector`` (SEMANTICS.md "Mango selectors").

A selector is first normalised (:func:`normalize`) the way CouchDB's
``mango_selector`` does it, in three steps: operators checked and implicit
forms made explicit (``{"a": 1}`` is ``{"a": {"$eq": 1}}``, several members
are an ``$and``); field names turned into paths with ``$and``/``$or``/``$not``
lifted above them; negations pushed down to the conditions (``$not`` of
``$lt`` is ``$gte``), so a negated condition still needs its field to exist.
:func:`matches` then evaluates the normal form against a document.

Normal form, as plain tuples: ``("$and", [nodes])``, ``("$or", [nodes])``,
``("$not", node)``, ``("field", path, condition)``, where a condition is
``(operator, argument)``, ``("$not", condition)`` or an element operator
(``$elemMatch``, ``$allMatch``, ``$keyMapMatch``) over a nested node.
``MATCH_ALL`` is the empty selector ``{}``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import regex

from settee.spec.collation import collate_json, json_type
from settee.spec.errors import BadRequest

__all__ = [
    "MATCH_ALL",
    "BadSelector",
    "extract_fields",
    "field_value",
    "get_field",
    "matches",
    "normalize",
    "parse_field",
    "raw_cmp",
]

MATCH_ALL: tuple[str] = ("$all_docs",)

#: The longest one ``$regex`` match may run before the query is refused.
REGEX_SECONDS = 0.5

#: Deeper selectors are refused: matching recurses once per level.
MAX_SELECTOR_DEPTH = 100

_COMBINATIONS = ("$and", "$or", "$nor")
_ELEMENT_OPS = ("$elemMatch", "$allMatch", "$keyMapMatch")
_COMPARISONS = ("$lt", "$lte", "$eq", "$ne", "$gte", "$gt")
_UNSUPPORTED = ("$where", "$geoWithin", "$geoIntersects", "$near", "$nearSphere", "$text")
_NEGATED = {
    "$lt": "$gte",
    "$lte": "$gt",
    "$eq": "$ne",
    "$ne": "$eq",
    "$gte": "$lt",
    "$gt": "$lte",
    "$in": "$nin",
    "$nin": "$in",
}
_ARRAY_INDEX = re.compile(r"[+-]?[0-9]+")
_UNESCAPED_DOT = re.compile(r"(?<!\\)\.")


class BadSelector(BadRequest):
    """A selector CouchDB would refuse; ``error`` is Mango's error name."""

    def __init__(self, error: str, reason: str) -> None:
        super().__init__(reason)
        self.error = error


def _bad_arg(op: str, arg: Any) -> BadSelector:
    return BadSelector("bad_arg", f"Bad argument for operator {op}: {_show(arg)}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


# -- normalising ----------------------------------------------------------------------------


def normalize(selector: Any) -> Any:
    """The normal form of a selector (a JSON object); ``BadSelector`` when CouchDB
    would refuse it."""
    if not isinstance(selector, dict):
        raise BadSelector("invalid_selector", "Selector error: expected a JSON object")
    if not selector:
        return MATCH_ALL
    ops = _ops(selector, 0)
    if ops[0] == "" and ops[1][0] not in (*_COMBINATIONS, "$not") and ops[1][0].startswith("$"):
        # norm_fields leaves the condition under the empty name at the top, which
        # normalize refuses before any field name is parsed.
        raise BadSelector("invalid_selector", "One or more conditions is missing a field name.")
    node = _negations(_fields(ops, ()))
    if node[0] == "field" and not node[1]:
        raise BadSelector("invalid_selector", "One or more conditions is missing a field name.")
    return node


def _ops(sel: Any, depth: int) -> Any:
    """Check operators and make implicit forms explicit (pairs ``(key, argument)``)."""
    if depth > MAX_SELECTOR_DEPTH:
        raise BadSelector("invalid_selector", f"selector nests deeper than {MAX_SELECTOR_DEPTH}")
    if not isinstance(sel, dict) or not sel:
        return ("$eq", sel)
    if len(sel) > 1:
        return ("$and", [_ops({key: value}, depth + 1) for key, value in sel.items()])
    [(key, arg)] = sel.items()
    if not isinstance(key, str):
        raise BadSelector("invalid_field_name", f"Invalid field name: {_show(key)}")
    if not key.startswith("$"):
        return (key, _ops(arg, depth + 1))
    if key in _COMBINATIONS:
        if not isinstance(arg, list):
            raise _bad_arg(key, arg)
        return (key, [_ops(a, depth + 1) for a in arg])
    if key == "$not" or key in _ELEMENT_OPS:
        if not isinstance(arg, dict):
            raise _bad_arg(key, arg)
        return (key, _ops(arg, depth + 1))
    if key in _UNSUPPORTED:
        raise BadSelector("not_supported", f"Unsupported operator: {key}")
    check = _ARGUMENT_CHECKS.get(key)
    # norm_ops matches $regex and $beginsWith only with a string argument; any
    # other falls through to its unknown-operator clause.
    if check is None or (key in ("$regex", "$beginsWith") and not isinstance(arg, str)):
        raise BadSelector("invalid_operator", f"Invalid operator: {key}")
    if not check(arg):
        raise _bad_arg(key, arg)
    return (key, arg)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _compiles(pattern: Any) -> bool:
    if not isinstance(pattern, str):
        return False
    try:
        regex.compile(pattern)
    except (regex.error, RecursionError, OverflowError, ValueError):
        return False
    return True


_ARGUMENT_CHECKS: dict[str, Callable[[Any], bool]] = {
    **{op: (lambda _arg: True) for op in _COMPARISONS},
    "$in": lambda arg: isinstance(arg, list),
    "$nin": lambda arg: isinstance(arg, list),
    "$all": lambda arg: isinstance(arg, list),
    "$exists": lambda arg: isinstance(arg, bool),
    "$type": lambda arg: isinstance(arg, str),
    # CouchDB checks only that both are integers; a zero divisor would crash its match.
    "$mod": lambda arg: (
        isinstance(arg, list) and len(arg) == 2 and all(map(_is_int, arg)) and arg[0] != 0
    ),
    "$regex": _compiles,
    "$size": lambda arg: _is_int(arg) and arg >= 0,
    "$beginsWith": lambda arg: isinstance(arg, str),
}


def _fields(node: Any, path: tuple[str, ...]) -> Any:
    """Field names become paths; ``$and``/``$or``/``$nor``/``$not`` rise above them."""
    key, arg = node
    if key in _COMBINATIONS:
        return (key, [_fields(a, path) for a in arg])
    if key == "$not":
        return ("$not", _fields(arg, path))
    if key in _ELEMENT_OPS:
        return ("field", path, (key, _fields(arg, ())))
    if key.startswith("$"):
        return ("field", path, (key, arg))
    return _fields(arg, path + parse_field(key))


def parse_field(name: str) -> tuple[str, ...]:
    """A field name's path: split at dots not escaped by a backslash."""
    if "\\" not in name:
        parts = name.split(".")
    else:
        parts = [p.replace("\\", "") if p else p for p in _UNESCAPED_DOT.split(name)]
    if "" in parts:
        raise BadSelector("invalid_field_name", f"Invalid field name: {name}")
    return tuple(parts)


def _negations(node: Any) -> Any:
    kind = node[0]
    if kind == "$not":
        return _negate(node[1])
    if kind == "$nor":
        return ("$and", [_negate(a) for a in node[1]])
    if kind in ("$and", "$or"):
        return (kind, [_negations(a) for a in node[1]])
    if kind == "field":
        return ("field", node[1], _condition_negations(node[2]))
    return node


def _condition_negations(cond: Any) -> Any:
    if cond[0] in _ELEMENT_OPS:
        return (cond[0], _negations(cond[1]))
    return cond


def _negate(node: Any) -> Any:
    kind = node[0]
    if kind == "$not":
        return _negations(node[1])
    if kind == "$nor":
        return ("$or", [_negations(a) for a in node[1]])
    if kind == "$and":
        return ("$or", [_negate(a) for a in node[1]])
    if kind == "$or":
        return ("$and", [_negate(a) for a in node[1]])
    if kind == "field":
        return ("field", node[1], _negate_condition(node[2]))
    return ("$not", node)


def _negate_condition(cond: Any) -> Any:
    op, arg = cond
    if op in _NEGATED:
        return (_NEGATED[op], arg)
    if op == "$exists":
        return ("$exists", not arg)
    return ("$not", cond)


# -- matching -------------------------------------------------------------------------------


_NOT_FOUND = object()
_BAD_PATH = object()


def matches(selector: Any, doc: Any) -> bool:
    """True when the document (a JSON object) satisfies a normalised selector."""
    return selector is MATCH_ALL or _match(selector, doc)


def _array_index(name: str) -> int | None:
    """The array index a path segment names, or None if it names none. Past 18
    significant digits it indexes no array, and ``int()`` of 5,000 digits raises
    (found in review: a 500 from ``_find``), so it is -1: out of every range."""
    if not _ARRAY_INDEX.fullmatch(name):
        return None
    digits = name.lstrip("+-").lstrip("0")
    if len(digits) > 18:
        return -1
    return -int(digits or "0") if name.startswith("-") else int(digits or "0")


def get_field(value: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path``: object members by name, array elements by decimal
    index; ``_NOT_FOUND`` for a missing member, ``_BAD_PATH`` for anything else."""
    for name in path:
        if isinstance(value, dict):
            if name not in value:
                return _NOT_FOUND
            value = value[name]
        elif isinstance(value, list | tuple) and (index := _array_index(name)) is not None:
            if not 0 <= index < len(value):
                return _BAD_PATH
            value = value[index]
        else:
            return _BAD_PATH
    return value


def field_value(value: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    """``(True, the value at path)``, or ``(False, None)`` when there is none."""
    found = get_field(value, path)
    if found is _NOT_FOUND or found is _BAD_PATH:
        return False, None
    return True, found


Cmp = Callable[[Any, Any], int]

_ID_PATH = ("_id",)


def _match(node: Any, value: Any, cmp: Cmp = collate_json) -> bool:
    kind = node[0]
    if kind == "field":
        found = get_field(value, node[1])
        if found is _NOT_FOUND:
            return node[2] == ("$exists", False)
        if found is _BAD_PATH:
            return False
        # mango_selector:match compares a field named _id in Erlang's term order
        # (mango_json:cmp_raw), every other one in view collation.
        return _match(node[2], found, raw_cmp if node[1] == _ID_PATH else cmp)
    if kind == "$and":
        return all(_match(a, value, cmp) for a in node[1])
    if kind == "$or":
        return not node[1] or any(_match(a, value, cmp) for a in node[1])
    if kind == "$not":
        return not _match(node[1], value, cmp)
    return _CONDITIONS[kind](node[1], value, cmp)


#: Erlang's term order of the JSON types as ejson holds them: numbers, atoms
#: (false, null, true), tuples (objects), lists (arrays), binaries (strings).
_RAW_RANK = {"number": 0, "boolean": 1, "null": 1, "object": 2, "array": 3, "string": 4}
_ATOM = {False: "false", None: "null", True: "true"}


def raw_cmp(a: Any, b: Any) -> int:
    """mango_json:cmp_raw: Erlang's term order on decoded JSON."""
    ka, kb = _RAW_RANK[json_type(a)], _RAW_RANK[json_type(b)]
    if ka != kb:
        return -1 if ka < kb else 1
    if ka == 1:
        a, b = _ATOM[a], _ATOM[b]
    elif ka == 2:
        # {Props}: a one-element tuple holding the list of {Key, Value} members.
        return _raw_sequences(list(a.items()), list(b.items()))
    elif ka == 3:
        return _raw_sequences(a, b)
    elif ka == 4:
        a, b = a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass")
    return (a > b) - (a < b)


def _raw_sequences(a: list[Any], b: list[Any]) -> int:
    """Element by element (an object member: its key, then its value); a prefix first."""
    for x, y in zip(a, b, strict=False):
        if isinstance(x, tuple):
            order = raw_cmp(x[0], y[0]) or raw_cmp(x[1], y[1])
        else:
            order = raw_cmp(x, y)
        if order:
            return order
    return (len(a) > len(b)) - (len(a) < len(b))


def _identical(a: Any, b: Any) -> bool:
    """Erlang's exact term equality: 1 and 1.0 differ, object member order counts."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(_identical, a, b))
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            ka == kb and _identical(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    return bool(a == b)


def _all(args: list[Any], value: Any, _cmp: Cmp) -> bool:
    if not args or not isinstance(value, list):
        return False
    has_all = all(any(_identical(a, v) for v in value) for a in args)
    only = len(args) == 1 and isinstance(args[0], list)
    return has_all or (only and collate_json(args[0], value) == 0)


def _in(args: list[Any], value: Any, cmp: Cmp) -> bool:
    if isinstance(value, list):
        return any(cmp(v, a) == 0 for a in args for v in value)
    return any(cmp(value, a) == 0 for a in args)


def _nin(args: list[Any], value: Any, cmp: Cmp) -> bool:
    if isinstance(value, list):
        return not _in(args, value, cmp)
    return all(cmp(value, a) != 0 for a in args)


def _mod(arg: list[int], value: Any, _cmp: Cmp) -> bool:
    if not _is_int(value):
        return False
    divisor, remainder = arg
    # Erlang's rem: the remainder takes the dividend's sign (Python's % the divisor's).
    magnitude = abs(value) % abs(divisor)
    return (magnitude if value >= 0 else -magnitude) == remainder


def _regex(pattern: str, value: Any, _cmp: Cmp) -> bool:
    """``$regex``: a search with the ``regex`` module (``re``'s syntax), bounded in
    time and run without the GIL: a pattern that backtracks catastrophically
    (``(a+)+$``) is refused with ``regex_timeout`` after ``REGEX_SECONDS``,
    where ``re`` would freeze the whole process for hours."""
    if not isinstance(value, str):
        return False
    try:
        found = regex.search(pattern, value, timeout=REGEX_SECONDS, concurrent=True)
    except TimeoutError:
        raise BadSelector(
            "regex_timeout",
            f"$regex {_show(pattern)} took more than {REGEX_SECONDS} s on one value",
        ) from None
    except (regex.error, RecursionError, ValueError):
        return False
    return found is not None


def _elem_match(node: Any, value: Any, cmp: Cmp) -> bool:
    return isinstance(value, list) and any(_match(node, v, cmp) for v in value)


def _all_match(node: Any, value: Any, cmp: Cmp) -> bool:
    return isinstance(value, list) and bool(value) and all(_match(node, v, cmp) for v in value)


def _key_map_match(node: Any, value: Any, cmp: Cmp) -> bool:
    return isinstance(value, dict) and any(_match(node, key, cmp) for key in value)


_CONDITIONS: dict[str, Callable[[Any, Any, Cmp], bool]] = {
    "$lt": lambda arg, v, cmp: cmp(v, arg) < 0,
    "$lte": lambda arg, v, cmp: cmp(v, arg) <= 0,
    "$eq": lambda arg, v, cmp: cmp(v, arg) == 0,
    "$ne": lambda arg, v, cmp: cmp(v, arg) != 0,
    "$gte": lambda arg, v, cmp: cmp(v, arg) >= 0,
    "$gt": lambda arg, v, cmp: cmp(v, arg) > 0,
    "$in": _in,
    "$nin": _nin,
    "$all": _all,
    "$exists": lambda arg, _v, _cmp: bool(arg),  # called only for a value that exists
    "$type": lambda arg, v, _cmp: arg == json_type(v),
    "$mod": _mod,
    "$regex": _regex,
    "$size": lambda arg, v, _cmp: isinstance(v, list) and len(v) == arg,
    "$beginsWith": lambda arg, v, _cmp: isinstance(v, str) and v.startswith(arg),
    "$elemMatch": _elem_match,
    "$allMatch": _all_match,
    "$keyMapMatch": _key_map_match,
}


# -- fields ---------------------------------------------------------------------------------


def extract_fields(doc: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    """``_find``'s ``fields``: a new document holding only the named paths (an
    empty list keeps everything), nested as in the source (mango_fields)."""
    if not fields:
        return doc
    out: dict[str, Any] = {}
    for name in fields:
        path = parse_field(name)
        value = get_field(doc, path)
        if value is not _NOT_FOUND and value is not _BAD_PATH:
            _set_field(out, path, value)
    return out


def _set_field(target: Any, path: tuple[str, ...], value: Any) -> Any:
    name, rest = path[0], path[1:]
    if isinstance(target, dict):
        if not rest:
            target[name] = value
        elif name in target:
            target[name] = _set_field(target[name], rest, value)
        else:
            for part in reversed(rest):
                value = {part: value}
            target[name] = value
    elif isinstance(target, list):
        index = _array_index(name)
        if index is not None and 0 <= index < len(target):
            target[index] = value if not rest else _set_field(target[index], rest, value)
    return target
