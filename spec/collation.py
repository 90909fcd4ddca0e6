"""CouchDB's view collation of JSON values, as Mango selectors compare them.

Types sort ``null < false < true < numbers < strings < arrays < objects``;
numbers by value (``1 == 1.0``); arrays element by element, a prefix first;
objects member by member in their stored order (key, then value), a prefix
first. That much is CouchDB's (docs "Views Collation", couch_ejson_compare).

Strings: CouchDB asks ICU's root collator (the Unicode Collation Algorithm).
settee has no ICU, so :func:`collate_text` follows the UCA's three levels on
a simpler weight table, which is exact for the 7-bit ASCII order CouchDB
documents (symbols < digits < letters; letters compared without case first,
then lowercase before uppercase: ``a < A < aa < b``) and close elsewhere:
letters with accents sort with their base letter (NFD, marks compared second:
a letter's marks by their code points in order, more marks after fewer, not by
the UCA's secondary weights: ``è < é`` here, ``é < è`` in ICU),
other characters after the ASCII letters by code point. Two strings are equal
only when identical (ICU also equates strings differing only in ignorable
characters such as U+200B; settee does not). SEMANTICS.md "Mango" says the same.
"""

from __future__ import annotations

import decimal
import itertools
import unicodedata
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "code_point_key",
    "collate_json",
    "collate_raw",
    "collate_text",
    "json_type",
    "raw_sort_key",
    "sort_key",
]

# The 7-bit symbols in the order ICU's root collation gives them (CouchDB docs).
_SYMBOLS = " `^_-,;:!?.'\"()[]{}@*/\\&#%+<=>|~$"
_SYMBOL_WEIGHT = {c: i + 1 for i, c in enumerate(_SYMBOLS)}
_DIGIT_BASE = len(_SYMBOLS) + 1
_LETTER_BASE = _DIGIT_BASE + 10
_OTHER_BASE = _LETTER_BASE + 26

_TYPE_RANK = {"null": 0, "boolean": 1, "number": 2, "string": 3, "array": 4, "object": 5}


def json_type(value: Any) -> str:
    """Mango's ``$type`` name of a JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"


def _primary(char: str) -> int:
    if char in _SYMBOL_WEIGHT:
        return _SYMBOL_WEIGHT[char]
    if "0" <= char <= "9":
        return _DIGIT_BASE + ord(char) - ord("0")
    lower = char.lower()
    if len(lower) == 1 and "a" <= lower <= "z":
        return _LETTER_BASE + ord(lower) - ord("a")
    return _OTHER_BASE + ord(char)


def _sort_key(text: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Primary (base characters), secondary (accents), tertiary (case) weights."""
    primary: list[int] = []
    secondary: list[int] = []
    tertiary: list[int] = []
    for char in unicodedata.normalize("NFD", text):
        if unicodedata.combining(char):
            if secondary:
                secondary[-1] = secondary[-1] * 1024 + ord(char) % 1024
            continue
        primary.append(_primary(char))
        secondary.append(0)
        tertiary.append(1 if char != char.lower() else 0)
    return tuple(primary), tuple(secondary), tuple(tertiary)


def collate_text(a: str, b: str) -> int:
    """-1, 0 or 1 as ``a`` sorts before, equal to or after ``b`` (see the module doc)."""
    if a == b:
        return 0
    key_a, key_b = _sort_key(a), _sort_key(b)
    if key_a != key_b:
        return -1 if key_a < key_b else 1
    return -1 if a < b else 1  # same weights, different code points: code point order


def _cmp(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


def collate_json(a: Any, b: Any) -> int:
    """-1, 0 or 1 as JSON value ``a`` sorts before, equal to or after ``b``.

    Iterative, so values nested as deep as a document may be (500 levels) cannot
    exhaust the interpreter's stack.

    post: __return__ in (-1, 0, 1)
    """
    return _collate(a, b, _compare_values, collate_text)


def collate_raw(a: Any, b: Any) -> int:
    """-1, 0 or 1 as JSON value ``a`` sorts before, equal to or after ``b`` in
    CouchDB's raw collation (a view's ``"options": {"collation": "raw"}``), which
    compares the decoded JSON in Erlang's term order (couch_mrview_util's
    maybe_define_less_fun leaves couch_btree's ``A < B``): numbers, then the atoms
    ``false < null < true``, then objects, then arrays, then strings; numbers by
    value; strings by their UTF-8 bytes (code point order, case first: ``"B" < "a"``);
    arrays element by element and objects member by member (key, then value) as
    in the view collation, a prefix first. Iterative, as ``collate_json``.
    """
    return _collate(a, b, _compare_raw, _cmp)


def _collate(
    a: Any,
    b: Any,
    compare_values: Callable[[Any, Any], tuple[int, Iterator[tuple[str, Any, Any]] | None]],
    compare_keys: Callable[[str, str], int],
) -> int:
    """The order of ``a`` and ``b`` by ``compare_values`` (which knows the order of two
    values from their types or atoms, or yields the steps comparing their members) and
    ``compare_keys`` for object member names."""
    pending: list[Iterator[tuple[str, Any, Any]]] = [iter([("value", a, b)])]
    while pending:
        step = next(pending[-1], None)
        if step is None:
            pending.pop()
            continue
        kind, x, y = step
        if kind == "value":
            order, inner = compare_values(x, y)
        elif kind == "key":
            order, inner = compare_keys(x, y), None
        else:  # "length": every element was equal, so the shorter sorts first
            order, inner = _cmp(x, y), None
        if order:
            return order
        if inner is not None:
            pending.append(inner)
    return 0


def _compare_values(x: Any, y: Any) -> tuple[int, Iterator[tuple[str, Any, Any]] | None]:
    """The order of two values when it is known without looking inside them,
    else 0 and the steps that compare their members."""
    type_x, type_y = json_type(x), json_type(y)
    if type_x != type_y:
        return _cmp(_TYPE_RANK[type_x], _TYPE_RANK[type_y]), None
    if type_x == "null":
        return 0, None
    if type_x in ("boolean", "number"):
        return _cmp(x, y), None
    if type_x == "string":
        return collate_text(x, y), None
    return 0, _member_steps(type_x, x, y)


#: Erlang's term order of what JSON decodes to: number < atom < tuple (an object,
#: ``{[{Key, Value}, ...]}``) < list (an array) < binary (a string).
_RAW_RANK = {"number": 0, "null": 1, "boolean": 1, "object": 2, "array": 3, "string": 4}
#: The atoms by name, as Erlang orders them.
_ATOM_RANK = {False: 0, None: 1, True: 2}


def _compare_raw(x: Any, y: Any) -> tuple[int, Iterator[tuple[str, Any, Any]] | None]:
    """``_compare_values`` for the raw collation (``collate_raw``)."""
    type_x, type_y = json_type(x), json_type(y)
    if _RAW_RANK[type_x] != _RAW_RANK[type_y]:
        return _cmp(_RAW_RANK[type_x], _RAW_RANK[type_y]), None
    if type_x in ("null", "boolean"):
        return _cmp(_ATOM_RANK[x], _ATOM_RANK[y]), None
    if type_x in ("number", "string"):
        return _cmp(x, y), None  # code point order is UTF-8 byte order
    return 0, _member_steps(type_x, x, y)


def _member_steps(kind: str, x: Any, y: Any) -> Iterator[tuple[str, Any, Any]]:
    """The steps comparing two arrays element by element, or two objects member by
    member (name, then value), then their lengths: a prefix sorts first."""
    if kind == "array":
        elements = (("value", i, j) for i, j in zip(x, y, strict=False))
        return itertools.chain(elements, [("length", len(x), len(y))])
    members = (
        step
        for (key_x, value_x), (key_y, value_y) in zip(x.items(), y.items(), strict=False)
        for step in (("key", key_x, key_y), ("value", value_x, value_y))
    )
    return itertools.chain(members, [("length", len(x), len(y))])


# -- sort keys: collation as plain string order ----------------------------------------------
#
# sort_key(v) is a str whose code point order is collate_json's order, so a store
# that orders ids by code point (the engine's by_id, _all_docs) can hold rows in
# view-key order: the groundwork for view indexes. Every piece is self-delimiting,
# so a shorter array or object sorts first exactly as collate_json says.

_TAG = {"null": "1", "boolean": "2", "number": "4", "string": "5", "array": "6", "object": "7"}
_END = "\u0000"  # closes an array or object: below every tag and every string key
_LEVEL = "\u0002"  # closes one level of a string's weights: below every weight
_STRING_END = "\u0001"  # closes a string: below _LEVEL
_WEIGHT_BASE = 0x1000  # weight digits and lengths use U+1000..U+1FFF: no surrogates


def sort_key(value: Any) -> str:
    """A string whose code point order is :func:`collate_json`'s order:
    ``collate_json(a, b) == cmp(sort_key(a), sort_key(b))`` for any JSON values."""
    return _key_of(value, _view_tag, _text_key)


def raw_sort_key(value: Any) -> str:
    """A string whose code point order is :func:`collate_raw`'s order:
    ``collate_raw(a, b) == cmp(raw_sort_key(a), raw_sort_key(b))`` for any JSON values
    (an index of a view with ``"collation": "raw"`` keys its rows with it)."""
    return _key_of(value, _raw_tag, code_point_key)


def _view_tag(item: Any, kind: str) -> str:
    if kind == "boolean":
        return "3" if item else "2"
    return _TAG[kind]


#: ``_RAW_RANK``'s order, the atoms apart: every tag is above ``_END``.
_RAW_TAG = {"number": "1", "object": "5", "array": "6", "string": "7"}
_RAW_ATOM_TAG = {False: "2", None: "3", True: "4"}


def _raw_tag(item: Any, kind: str) -> str:
    if kind in ("null", "boolean"):
        return _RAW_ATOM_TAG[item]
    return _RAW_TAG[kind]


def _key_of(value: Any, tag_of: Callable[[Any, str], str], text_key: Callable[[str], str]) -> str:
    """A sort key of ``value``: each value its ``tag_of`` then its content, a string's
    (and an object member name's) by ``text_key``; arrays and objects closed by _END."""
    out: list[str] = []
    pending: list[Any] = [value]
    while pending:  # iterative: values nest as deep as documents do
        item = pending.pop()
        if isinstance(item, _Literal):
            out.append(item.text)
            continue
        kind = json_type(item)
        out.append(tag_of(item, kind))
        if kind == "number":
            out.append(_number_key(item))
        elif kind == "string":
            out.append(text_key(item))
        elif kind == "array":
            pending.append(_Literal(_END))
            pending.extend(reversed(list(item)))
        elif kind == "object":
            pending.append(_Literal(_END))
            for key, member in reversed(list(item.items())):
                pending.append(member)
                pending.append(_Literal(text_key(key)))
    return "".join(out)


class _Literal:
    """Text to emit as it is (a container's end, an object key) on sort_key's stack."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _weight(n: int) -> str:
    """A non-negative int as self-delimiting text in int order: its digit count,
    then its base-4096 digits (more digits sort after, as larger ints do)."""
    digits = []
    while True:
        n, digit = divmod(n, 4096)
        digits.append(chr(_WEIGHT_BASE + digit))
        if not n:
            break
    return chr(_WEIGHT_BASE + len(digits)) + "".join(reversed(digits))


def _text_key(text: str) -> str:
    primary, secondary, tertiary = _sort_key(text)
    levels = [
        "".join(_weight(w) for w in level) + _LEVEL for level in (primary, secondary, tertiary)
    ]
    # The code points break ties between strings of equal weights, as collate_text does.
    return "".join(levels) + "".join(_weight(ord(c)) for c in text) + _STRING_END


def _number_key(number: int | float) -> str:
    """Sign, then for a non-zero number its decimal exponent and digits, in value
    order; ``1`` and ``1.0`` get the same key, as they collate equal."""
    if number == 0:
        return "M"
    exact = decimal.Decimal(number)  # exact for ints and for binary floats
    sign, digits, exponent = exact.as_tuple()
    text = "".join(map(str, digits)).rstrip("0")
    magnitude = len(digits) + int(exponent)  # value = 0.<text> * 10**magnitude
    if not sign:
        return "N" + _signed(magnitude) + text + "!"  # "!": below every digit
    inverted = "".join(str(9 - int(d)) for d in text)
    return "L" + _signed(-magnitude) + inverted + "~"  # "~": above every digit


def _signed(n: int) -> str:
    """An int of any sign as self-delimiting text in int order."""
    return ("B" + _weight(n)) if n >= 0 else ("A" + _inverted_weight(-n))


def _inverted_weight(n: int) -> str:
    # Larger magnitudes must sort first: complement each character of _weight(n).
    return "".join(chr(2 * _WEIGHT_BASE + 4095 - ord(c)) for c in _weight(n))


def code_point_key(text: str) -> str:
    """A self-delimiting string in ``text``'s raw code point order (how CouchDB
    orders document ids: view rows with equal keys, ``startkey_docid``)."""
    return "".join(_weight(ord(c)) for c in text) + _STRING_END
