"""Hostile arguments: what a careless or malicious caller passes to every public call.

Every public argument can be a ``str`` subclass whose methods lie, a
5,000-digit number, ``2**63``, NaN, bytes or a value nested 10,000 deep (ten
times Python's recursion limit; impl/proof/test_hostile_input.py tries 100,000)
(SEMANTICS.md §15.1). The equivalence machine draws each call's arguments
from these tables as well as from well-formed ones; the rule stays the same:
engine and reference give the same answer or raise the same ``SetteeError``
subclass, a refused call changes nothing, and every shard still accepts writes.

Values are drawn by *label* and built when used, so a failing example prints
``'int of 5000 digits'`` rather than trying (and failing) to ``repr`` the
number itself, and a 100,000-deep list is never held in a Hypothesis example.
"""

from __future__ import annotations

import enum
import io
import weakref
from collections.abc import Callable
from typing import Any
from unittest import mock

from hypothesis import strategies as st

__all__ = [
    "ATTACHMENT_DATA",
    "BODY_VALUES",
    "COUNTS",
    "FLAGS",
    "MISSPELLINGS",
    "REVS",
    "SEQUENCE_SHAPES",
    "SINCES",
    "TEXTS",
    "LyingStr",
    "ShiftingList",
    "build",
    "foreign_class",
    "labels",
    "shaped",
]


class PlainSubclass(str):
    """A ``str`` subclass that adds nothing (``numpy.str_`` behaves like this)."""


class LyingStr(str):
    """A ``str`` subclass whose every overridable method lies about its content."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0

    def __lt__(self, other: object) -> bool:
        return True

    def __str__(self) -> str:
        return "lie"

    def __format__(self, spec: str) -> str:
        return "lie"

    def __len__(self) -> int:
        return 0

    def startswith(self, *args: Any, **kwargs: Any) -> bool:
        return False

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        return b"lie"


class ShiftingList(list):  # type: ignore[type-arg]
    """A list whose walks after the first see other items (``[1, lone surrogate]``): a
    check that walks an argument twice and keeps a later walk keeps what it never
    checked (found in ``check_keys``'s fast path)."""

    _walks = 0

    def __iter__(self) -> Any:
        self._walks += 1
        return super().__iter__() if self._walks == 1 else iter([1, "\ud800"])


class ShortList(list):  # type: ignore[type-arg]
    """A list whose ``__len__`` lies: a copy sized by it and filled by walking it
    overran (a raw IndexError, found in review)."""

    def __len__(self) -> int:
        return 0


class ClaimsOne(list):  # type: ignore[type-arg]
    """A list whose ``__len__`` says 1 whatever it holds: checks made through it and
    a walk of its items disagreed (``_revisions.ids`` of three hashes with start 1
    stored positions 0 and -1, found in review)."""

    def __len__(self) -> int:
        return 1


class NegativeLen(list):  # type: ignore[type-arg]
    """A list whose ``__len__`` is -1: ``tuple()`` and ``list()`` of it raise a raw
    ValueError (found in review)."""

    def __len__(self) -> int:
        return -1


class RaisingIter(list):  # type: ignore[type-arg]
    """A list whose ``__iter__`` raises: its storage is still there to read."""

    def __iter__(self) -> Any:
        raise RuntimeError("this list cannot be walked")


class TupleSubclass(tuple):  # type: ignore[type-arg]
    """A ``tuple`` subclass (a namedtuple is one)."""


class BrokenBitLength(int):
    """An int subclass whose ``bit_length`` raises: an error message built with it
    turned a BadRequest into that exception (found in review)."""

    def bit_length(self) -> int:
        raise RuntimeError("bit_length")


def _mock(spec: type) -> Any:
    """An object claiming ``spec``'s class through ``__class__`` (isinstance believes
    it) while being none: ``unittest.mock.Mock(spec=...)``, as tests pass around."""
    return mock.Mock(spec=spec)


class TripleItems(dict):  # type: ignore[type-arg]
    """A dict whose ``items()`` gives triples: reading a subclass through its
    overrides instead of its storage was a raw ValueError (found in review)."""

    def items(self) -> Any:
        return [("a", 1, 2)]


class EmptyClaimingDict(dict):  # type: ignore[type-arg]
    """A dict whose ``__len__`` says 0: the depth check asked it, so such dicts nested
    past 500 levels were stored, and 10,000 deep raised msgpack's raw ValueError."""

    def __len__(self) -> int:
        return 0


class RaisingLenDict(dict):  # type: ignore[type-arg]
    """A dict whose ``__len__`` raises (the depth check let it escape raw)."""

    def __len__(self) -> int:
        raise RuntimeError("this dict cannot be measured")


def nested_dicts(depth: int, kind: type = dict) -> Any:
    """``depth`` dicts of ``kind``, each the ``x`` of the next, around ``1``."""
    value: Any = kind(x=1)
    for _ in range(depth - 1):
        value = kind(x=value)
    return value


class Letters(enum.StrEnum):
    A = "a"
    REV = "1-" + "a" * 32


class Count(enum.IntEnum):
    ZERO = 0
    TWO = 2


class BigInt(int):
    """An int subclass, built past 64 bits (an ``IntEnum`` member cannot be)."""


class FloatSubclass(float):
    """A ``float`` subclass (``numpy.float64`` is one)."""


def nested(depth: int, leaf: Any = 1) -> Any:
    """A list nested ``depth`` levels around ``leaf``, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def _shared_wide(levels: int) -> Any:
    """``levels`` nested ``[x] * 10``: a few objects describing 10**levels values."""
    value: Any = 0
    for _ in range(levels):
        value = [value] * 10
    return value


def _self_containing() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


class _Gone:
    """What a dead weak proxy pointed to."""


def _dead_proxy() -> Any:
    """A ``weakref.proxy`` whose object is gone: every use of it raises ReferenceError,
    even ``isinstance``'s lookup of its ``__class__`` (found probing: validating such an
    id or document let that error escape raw)."""
    target = _Gone()
    proxy = weakref.proxy(target)
    del target  # the proxy's object dies here (CPython frees it at once)
    return proxy


def _big_digits(n: int) -> int:
    return 10**n - 1  # int("9" * n) itself raises beyond 4,300 digits


Builder = Callable[[], Any]

#: Where a str is expected (ids, keys, bounds): subclasses, wrong types, edge strs.
TEXTS: dict[str, Builder] = {
    "StrEnum 'a'": lambda: Letters.A,
    "PlainSubclass 'ab'": lambda: PlainSubclass("ab"),
    "LyingStr 'b'": lambda: LyingStr("b"),
    "LyingStr ''": lambda: LyingStr(""),
    "LyingStr '_x'": lambda: LyingStr("_x"),
    "bytes b'a'": lambda: b"a",
    "bytearray": lambda: bytearray(b"a"),
    "int 7": lambda: 7,
    "True": lambda: True,
    "None": lambda: None,
    "float nan": lambda: float("nan"),
    "list ['a']": lambda: ["a"],
    "tuple ('a',)": lambda: ("a",),
    "empty str": lambda: "",
    "lone surrogate": lambda: "a\ud800",
    "'_local/x'": lambda: "_local/x",
    "'_design/'": lambda: "_design/",
    "'_design/x'": lambda: "_design/x",
    "NUL inside": lambda: "a\x00b",
    "str of 100,000 chars": lambda: "z" * 100_000,
    "list nested 10,000 deep": lambda: nested(10_000, "a"),
    "list that changes between walks": lambda: ShiftingList(["a"]),
    "dict": lambda: {"a": 1},
    "object()": object,
    "Mock(spec=str)": lambda: _mock(str),
    "dead weakref.proxy": _dead_proxy,
}

#: Where a count is expected (limit, skip).
COUNTS: dict[str, Builder] = {
    "0": lambda: 0,
    "2": lambda: 2,
    "IntEnum 2": lambda: Count.TWO,
    "2**63": lambda: 2**63,
    "2**64": lambda: 2**64,
    "int of 5000 digits": lambda: _big_digits(5000),
    "-1": lambda: -1,
    "-(2**63)": lambda: -(2**63),
    "minus int of 5000 digits": lambda: -_big_digits(5000),
    "True": lambda: True,
    "False": lambda: False,
    "1.0": lambda: 1.0,
    "nan": lambda: float("nan"),
    "inf": lambda: float("inf"),
    "'3'": lambda: "3",
    "b'1'": lambda: b"1",
    "None": lambda: None,
    "list [1]": lambda: [1],
    "Mock(spec=int)": lambda: _mock(int),
    "int 3 with a raising bit_length": lambda: BrokenBitLength(3),
    "int -1 with a raising bit_length": lambda: BrokenBitLength(-1),
}

#: Where a bool is expected.
FLAGS: dict[str, Builder] = {
    "True": lambda: True,
    "False": lambda: False,
    "1": lambda: 1,
    "0": lambda: 0,
    "IntEnum 0": lambda: Count.ZERO,
    "'true'": lambda: "true",
    "None": lambda: None,
    "nan": lambda: float("nan"),
    "[]": lambda: [],
    "Mock(spec=bool)": lambda: _mock(bool),
}

#: Where a revision string is expected: almost valid, huge positions, wrong types.
REVS: dict[str, Builder] = {
    "'1-'": lambda: "1-",
    "'-a'": lambda: "-a",
    "'1-ABC'": lambda: "1-ABC",
    "' 1-a'": lambda: " 1-a",
    "'1-a '": lambda: "1-a ",
    "'1-a\\n'": lambda: "1-a\n",
    "'+1-a'": lambda: "+1-a",
    "'1_0-a'": lambda: "1_0-a",
    "Arabic-Indic digit": lambda: "\u0661-a",
    "fullwidth digit": lambda: "\uff11-a",
    "'1-a-b'": lambda: "1-a-b",
    "'0-a'": lambda: "0-a",
    "'01-a'": lambda: "01-a",
    "position 2**63-1": lambda: f"{2**63 - 1}-a",
    "position 2**63": lambda: f"{2**63}-a",
    "position 2**64": lambda: f"{2**64}-a",
    "position of 30 digits": lambda: f"{_big_digits(30)}-a",
    "position of 5000 digits": lambda: "9" * 5000 + "-a",
    "StrEnum rev": lambda: Letters.REV,
    "LyingStr '1-a'": lambda: LyingStr("1-a"),
    "PlainSubclass '1-a'": lambda: PlainSubclass("1-a"),
    "bytes b'1-a'": lambda: b"1-a",
    "int 1": lambda: 1,
    "None": lambda: None,
    "list ['1-a']": lambda: ["1-a"],
}

#: Where ``since`` is expected. Small positive ints are left out on purpose: they are
#: valid tokens of the reference (tokens are opaque, SEMANTICS.md §9), not of the engine.
SINCES: dict[str, Builder] = {
    "0": lambda: 0,
    "'0'": lambda: "0",
    "'now'": lambda: "now",
    "IntEnum 0": lambda: Count.ZERO,
    "StrEnum-like 'now'": lambda: PlainSubclass("now"),
    "LyingStr 'now'": lambda: LyingStr("now"),
    "0.0": lambda: 0.0,
    "-1": lambda: -1,
    "2**63": lambda: 2**63,
    "int of 5000 digits": lambda: _big_digits(5000),
    "True": lambda: True,
    "False": lambda: False,
    "None": lambda: None,
    "b'0'": lambda: b"0",
    "[0]": lambda: [0],
    "'1-'": lambda: "1-",
    "'x-abc'": lambda: "x-abc",
    "'0-' + garbage": lambda: "0-!!!!",
    "'5-AAAA'": lambda: "5-AAAA",
    "lone surrogate": lambda: "0-\ud800",
    "str of 100,000 chars": lambda: "9-" + "A" * 100_000,
}

#: A token misspelt (``changes``' ``since``): none is a token the database returned, so
#: each is BadRequest (SEMANTICS.md §9). The engine read a token's payload whatever came
#: before its dash, and let base64 skip stray characters (found probing tokens).
MISSPELLINGS: dict[str, Callable[[str], str]] = {
    "a space before": lambda token: " " + token,
    "a letter for its count": lambda token: "x-" + token.partition("-")[2],
    "an Arabic-Indic digit for its count": lambda token: "\u0661-" + token.partition("-")[2],
    "four dots after": lambda token: token + "....",
    "four line breaks after": lambda token: token + "\n\n\n\n",
}

#: Body values: what a document may carry, and what it may not.
BODY_VALUES: dict[str, Builder] = {
    "2**63": lambda: 2**63,
    "2**64-1": lambda: 2**64 - 1,
    "2**64": lambda: 2**64,
    "-(2**63)": lambda: -(2**63),
    "-(2**63)-1": lambda: -(2**63) - 1,
    "int of 5000 digits": lambda: _big_digits(5000),
    "nan": lambda: float("nan"),
    "inf": lambda: float("inf"),
    "-0.0": lambda: -0.0,
    "1e308": lambda: 1e308,
    "IntEnum 2": lambda: Count.TWO,
    "FloatSubclass 1.5": lambda: FloatSubclass(1.5),
    "FloatSubclass inf": lambda: FloatSubclass("inf"),
    "int subclass 2**64": lambda: BigInt(2**64),
    "StrEnum 'a'": lambda: Letters.A,
    "LyingStr 'x'": lambda: LyingStr("x"),
    "bytes": lambda: b"\x00\xff",
    "set": lambda: {1, 2},
    "frozenset": lambda: frozenset(),
    "object()": object,
    "complex": lambda: 1j,
    "tuple (1, (2, 3))": lambda: (1, (2, 3)),
    "list nested 150 deep": lambda: nested(150),
    # As a field's value: its innermost value at level 500, the deepest stored.
    "list nested 499 deep": lambda: nested(499),
    "empty list at level 500": lambda: nested(499, []),
    "list nested 501 deep": lambda: nested(501),
    "list nested 10,000 deep": lambda: nested(10_000),
    "dict with int key": lambda: {1: "x"},
    "dict with LyingStr key": lambda: {LyingStr("k"): 1},
    "dict with StrEnum key": lambda: {Letters.A: 1},
    "list whose __len__ lies": lambda: ShortList([1, 2]),
    "list whose __len__ is -1": lambda: NegativeLen([1, 2]),
    "list whose __iter__ raises": lambda: RaisingIter([1, 2]),
    "tuple subclass": lambda: TupleSubclass((1, 2)),
    "Mock(spec=list)": lambda: _mock(list),
    "Mock(spec=dict)": lambda: _mock(dict),
    "10**9 values in shared lists": lambda: _shared_wide(9),
    "a list shared by 10 places": lambda: _shared_wide(1),
    "list inside itself": _self_containing,
    "dict whose items() lies": lambda: TripleItems(k="v"),
    # As a field's value: its innermost value at level 501, then 10,001.
    "dicts claiming to be empty, nested 500 deep": lambda: nested_dicts(500, EmptyClaimingDict),
    "dicts claiming to be empty, nested 10,000 deep": lambda: nested_dicts(
        10_000, EmptyClaimingDict
    ),
    "dict whose __len__ raises, nested 500 deep": lambda: nested_dicts(500, RaisingLenDict),
    "dict whose __len__ raises": lambda: RaisingLenDict(k="v"),
    "lone surrogate": lambda: "x\ud800",
    "None": lambda: None,
    "True": lambda: True,
}


class _FailingFile(io.RawIOBase):
    """A binary file whose read fails after the first piece (a disk error)."""

    def __init__(self) -> None:
        self._reads = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self._reads += 1
        if self._reads > 1:
            raise OSError(5, "Input/output error")
        return b"x" * 10


class _NotReadyFile:
    """A non-blocking file with nothing ready: ``read`` gives None (found in review:
    it was taken for the end of the file, storing an empty attachment)."""

    def read(self, size: int = -1) -> None:
        return None


class _RaisingLookup:
    """An object whose every attribute lookup raises (a lazy proxy whose target is gone):
    asking it for ``read`` let the error escape raw (found probing attachments)."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no attribute {name} today")


class _RaisingReadProperty:
    """An object whose ``read`` is a property that raises when looked up."""

    @property
    def read(self) -> Any:
        raise OSError(5, "Input/output error")


class _StrReadingFile:
    """Not a file, but has a ``read`` that gives ints."""

    def read(self, size: int = -1) -> int:
        return 7


class RaisingBytes(bytes):
    """Bytes whose ``__bytes__`` raises: ``bytes(data)`` let it escape raw."""

    def __bytes__(self) -> bytes:
        raise RuntimeError("no bytes today")


class StrBytes(bytearray):
    """A bytearray whose ``__bytes__`` gives a str: ``bytes(data)`` was a raw TypeError."""

    def __bytes__(self) -> Any:
        return "not bytes"


class _PiecesFile:
    """A binary file giving ``pieces`` one per read, then the end."""

    def __init__(self, *pieces: bytes) -> None:
        self._pieces = [*pieces, b""]

    def read(self, size: int = -1) -> bytes:
        return self._pieces.pop(0) if self._pieces else b""


#: Where attachment ``data`` is expected: the texts, and file objects that are not
#: binary files or that fail part way (SEMANTICS.md §18).
ATTACHMENT_DATA: dict[str, Builder] = {
    **TEXTS,
    "text file (StringIO)": lambda: io.StringIO("abc"),
    "file failing after a read": _FailingFile,
    "read() giving ints": _StrReadingFile,
    "read() giving None": _NotReadyFile,
    "object whose attribute lookups raise": _RaisingLookup,
    "object whose read property raises": _RaisingReadProperty,
    "closed binary file": lambda: _closed(io.BytesIO(b"abc")),
    "bytes whose __bytes__ raises": lambda: RaisingBytes(b"abc"),
    "bytearray whose __bytes__ gives a str": lambda: StrBytes(b"abc"),
    "file giving bytes whose __bytes__ raises": lambda: _PiecesFile(RaisingBytes(b"abc")),
}


def _closed(file: io.BytesIO) -> io.BytesIO:
    file.close()
    return file


#: How a list argument (``bulk_docs``' docs, ``keys``, ``_revisions.ids``,
#: ``atts_since``) may come: each wraps the items it is given.
SEQUENCE_SHAPES: dict[str, Callable[[list[Any]], Any]] = {
    "list": list,
    "tuple": tuple,
    "tuple subclass": TupleSubclass,
    "list claiming one item": ClaimsOne,
    "list whose __len__ is -1": NegativeLen,
    "list whose __iter__ raises": RaisingIter,
    "list that changes between walks": ShiftingList,
    "generator": iter,
    "Mock(spec=list)": lambda items: _mock(list),
}


def shaped(shape: str, items: list[Any]) -> Any:
    """``items`` as the sequence ``shape`` names, made fresh."""
    return SEQUENCE_SHAPES[shape](items)


def labels(table: dict[str, Builder]) -> st.SearchStrategy[str]:
    """A strategy over the labels of ``table`` (shrinks towards the first)."""
    return st.sampled_from(sorted(table))


def build(table: dict[str, Builder], label: str) -> Any:
    """The value ``label`` names in ``table``, made fresh."""
    return table[label]()


#: The classes an answer is made of (SEMANTICS.md §15.1: what comes back never depends
#: on a caller's class).
_ANSWER_CLASSES = (str, int, float, bool, bytes, type(None))


def foreign_class(value: Any, where: str = "answer") -> str | None:
    """Where ``value`` holds something other than exact builtins (a caller's str
    subclass echoed back, say), or None. Iterative: answers may be deep."""
    stack = [(value, where)]
    while stack:
        item, at = stack.pop()
        kind = type(item)
        if kind is dict:
            for key, child in item.items():
                if type(key) is not str:
                    return f"{at} has a key of class {type(key).__name__}"
                stack.append((child, f"{at}[{key!r}]"))
        elif kind is list or kind is tuple:
            stack.extend((child, f"{at}[{i}]") for i, child in enumerate(item))
        elif kind not in _ANSWER_CLASSES:
            return f"{at} is of class {kind.__name__}"
    return None
