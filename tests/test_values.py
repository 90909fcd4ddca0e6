"""spec.values: what the API boundary makes of a hostile caller value (SEMANTICS.md
§15.1), checked directly; CrossHair cannot run ``describe`` (reprlib on symbolic
values), and the hostile-input suite reaches these functions only through calls
that check a value's type first."""

from __future__ import annotations

import io
from array import array
from typing import Any
from unittest import mock

import pytest

from settee.spec.errors import BadRequest
from settee.spec.spool import spool_file
from settee.spec.values import describe, plain_int, plain_items, plain_str


class _RaisingRepr:
    def __init__(self, error: type[Exception]) -> None:
        self.error = error

    def __repr__(self) -> str:
        raise self.error("no repr")


@pytest.mark.parametrize(
    "value",
    [
        "x" * 10_000,
        b"y" * 10_000,
        ["z" * 70] * 3,
        {"k" * 70: "v" * 70},
        10**5000,
        -(2**65),
        _RaisingRepr(RuntimeError),
        _RaisingRepr(ValueError),
        _RaisingRepr(RecursionError),
    ],
    ids=[
        "str",
        "bytes",
        "list",
        "dict",
        "huge-int",
        "int-past-64-bits",
        "runtime",
        "value",
        "recursion",
    ],
)
def test_describe_is_short_and_never_raises(value: Any) -> None:
    text = describe(value)
    assert isinstance(text, str) and 0 < len(text) <= 80


@pytest.mark.parametrize("error", [RuntimeError, TypeError, ValueError])
def test_describe_survives_a_container_whose_own_methods_raise(error: type) -> None:
    """reprlib picks its method by the type's name: a list subclass named ``list``
    whose ``__len__`` raises reaches reprlib's list code, which raises."""

    def raising(self: Any) -> int:
        raise error("no len")

    hostile = type("list", (list,), {"__len__": raising})([1, 2])
    assert describe(hostile) == "<list>"


def test_describe_of_a_deep_list_is_short() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert len(describe(deep)) <= 80


def test_plain_str_refuses_an_object_that_only_claims_to_be_a_str() -> None:
    """unittest.mock's Mock(spec=str) passes isinstance(value, str) but holds no
    characters: a BadRequest, not a raw TypeError from str.join."""
    with pytest.raises(BadRequest, match="claims"):
        plain_str(mock.Mock(spec=str))


def test_plain_str_ignores_a_subclass_overrides() -> None:
    class Lying(str):
        def __str__(self) -> str:
            return "other"

        def __iter__(self) -> Any:
            return iter("other")

    plain = plain_str(Lying("abc"))
    assert type(plain) is str and plain == "abc"


def test_plain_int_reads_the_number_not_the_subclass_conversions() -> None:
    class Lying(int):
        def __int__(self) -> int:
            return 7

        def __index__(self) -> int:
            return 7

    plain = plain_int(Lying(3))
    assert type(plain) is int and plain == 3


@pytest.mark.parametrize("kind", [list, tuple])
def test_plain_items_reads_a_sequence_subclass_storage(kind: type) -> None:
    """A subclass's ``__iter__``, ``__len__`` and ``__getitem__`` may lie; the items
    are read from the list's or tuple's storage."""

    class Lying(kind):  # type: ignore[misc, valid-type]
        def __iter__(self) -> Any:
            return iter(["lie"])

        def __len__(self) -> int:
            return 0

        def __getitem__(self, index: Any) -> Any:
            return "lie"

    assert plain_items(Lying(["a", "b"])) == ["a", "b"]


def test_spool_file_counts_bytes_not_items_of_a_memoryview() -> None:
    """A binary file may hand back a memoryview of any format; what is spooled and
    counted is its bytes."""
    data = array("H", range(10))

    class File:
        def __init__(self) -> None:
            self.pieces = [memoryview(data)]

        def read(self, size: int) -> Any:
            return self.pieces.pop() if self.pieces else b""

    spooled = spool_file(File())
    assert len(spooled) == len(data.tobytes()) == 20
    assert spooled.read() == data.tobytes()


@pytest.mark.parametrize("error", [ValueError, RuntimeError, KeyError])
def test_spool_file_of_a_file_whose_read_fails_is_a_bad_request(error: type) -> None:
    class Failing(io.RawIOBase):
        def read(self, size: int = -1) -> bytes:
            raise error("boom")

    with pytest.raises(BadRequest, match="reading attachment data"):
        spool_file(Failing())


def test_spool_file_of_a_closed_file_is_a_bad_request() -> None:
    closed = io.BytesIO(b"abc")
    closed.close()
    with pytest.raises(BadRequest, match="reading attachment data"):
        spool_file(closed)
