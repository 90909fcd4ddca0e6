"""Caller values at the API boundary: made plain, and described safely in errors.

Every public argument may be hostile (SEMANTICS.md §15.1): a ``str`` subclass
whose ``__eq__``, ``__hash__`` or ``__lt__`` lie, an ``int`` of 5,000 digits
(``repr`` raises ``ValueError`` beyond 4,300), a list nested 100,000 deep
(``repr`` raises ``RecursionError``), a 100 MB string. Both implementations
pass what they keep through these functions, so what is stored and compared
is always an exact ``str``/``int``, and every error message is short and
computable.
"""

from __future__ import annotations

import reprlib
from typing import Any, TypeGuard, TypeVar

from settee.spec.errors import BadRequest

__all__ = [
    "describe",
    "is_a",
    "is_dict",
    "is_int",
    "is_sequence",
    "plain_bytes",
    "plain_dict",
    "plain_int",
    "plain_items",
    "plain_str",
]

_T = TypeVar("_T")

_SHORT = reprlib.Repr()
_SHORT.maxstring = 60
_SHORT.maxother = 60
_SHORT.maxlevel = 3
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 4
_DESCRIBE_LIMIT = 80


def describe(value: object) -> str:
    """A short ``repr`` of ``value`` for an error message; never raises.

    post: len(__return__) <= 80
    """
    # crosshair: off
    # reprlib cannot run on CrossHair's symbolic values; tests/test_values.py checks it.
    # int.bit_length, not the value's own: an int subclass may override it to raise.
    if is_int(value) and int.bit_length(value) > 64:  # type: ignore[arg-type]
        # repr of an int beyond sys.get_int_max_str_digits() raises ValueError.
        text = f"<int of {int.bit_length(value)} bits>"  # type: ignore[arg-type]
    else:
        try:
            text = _SHORT.repr(value)
        except Exception:  # a broken __repr__ must not turn a BadRequest into a crash
            text = f"<{type(value).__name__}>"
    if len(text) > _DESCRIBE_LIMIT:
        text = text[: _DESCRIBE_LIMIT - 3] + "..."
    return text


def plain_str(value: str) -> str:
    """``value`` as an exact ``str`` (a subclass's overridden methods are ignored).

    pre: isinstance(value, str)
    post: __return__ == value
    """
    # join copies a subclass's characters into an exact str without calling any of its
    # overrides (an exact str comes back as itself); str.__str__ would do the same but
    # refuses CrossHair's symbolic strings. An object that claims to be a str through
    # its __class__ (unittest.mock's Mock(spec=str)) passes isinstance but is no str.
    if type(value) is not str and not issubclass(type(value), str):
        raise BadRequest(f"{describe(value)} is not a str: it only claims to be one")
    return "".join((value,))


def plain_bytes(value: bytes | bytearray | memoryview) -> bytes:
    """A copy of the bytes ``value`` holds, read through the buffer protocol: ``bytes()``
    would call a subclass's ``__bytes__``, which may lie, raise or answer a str.
    ValueError for a released memoryview."""
    return memoryview(value).tobytes()


def is_int(value: object) -> bool:
    """True for ``int`` and its subclasses, except ``bool`` (``True`` is no count).

    post: __return__ == (isinstance(value, int) and not isinstance(value, bool))
    """
    # The type's, not isinstance's: an object may claim int through its __class__
    # (unittest.mock's Mock(spec=int)) and be no int at all.
    kind = type(value)
    return kind is int or (issubclass(kind, int) and kind is not bool)


def plain_int(value: int) -> int:
    """``value`` as an exact ``int`` (an ``IntEnum`` member becomes its number).

    pre: isinstance(value, int)
    post: type(__return__) is int
    """
    if not issubclass(type(value), int):  # an object claiming int by its __class__
        raise BadRequest(f"{describe(value)} is not an int: it only claims to be one")
    return int.__index__(value)


def is_dict(value: object) -> TypeGuard[dict[Any, Any]]:
    """``is_a(value, dict)``, typed for the dict it proves."""
    return issubclass(type(value), dict)


def is_sequence(value: object) -> TypeGuard[list[Any] | tuple[Any, ...]]:
    """True for a list or tuple, subclasses included, judged by its type (an object
    claiming to be one through ``__class__`` is not)."""
    kind = type(value)
    return kind is list or kind is tuple or issubclass(kind, list | tuple)


def plain_items(value: list[Any] | tuple[Any, ...]) -> list[Any]:
    """The items a list or tuple (or a subclass of either) holds, as a new list, read
    from its storage: a subclass's ``__len__``, ``__iter__`` or ``__getitem__`` may
    lie, raise, or answer differently on each walk.

    pre: is_sequence(value)
    """
    if issubclass(type(value), list):
        return list(list.__iter__(value))  # type: ignore[arg-type]
    return list(tuple.__iter__(value))  # type: ignore[arg-type]


#: How many times a dict that changes while it is read is read again.
_READ_ATTEMPTS = 100


def plain_dict(value: dict[Any, Any]) -> dict[Any, Any]:
    """A new exact dict of the items a dict (or a subclass of one) holds, read from its
    storage at one instant.

    A subclass's ``items()``, ``keys()`` or ``__iter__`` may lie, and walking the
    caller's dict runs other code between steps (a file's ``read``, another thread),
    which may change it under the walk (a raw RuntimeError). ``dict.copy`` copies the
    storage in one C step that runs no Python code, so no other thread gets in; but it
    asks ``keys()`` of a subclass that overrides ``__iter__``, whose items are then
    copied pair by pair (each pair a new tuple, which may start a garbage collection
    whose callbacks let other threads in: a dict that changed size meanwhile is read
    again, and one that never stays still is BadRequest).
    """
    for _ in range(_READ_ATTEMPTS):
        try:
            if type(value).__iter__ is dict.__iter__:
                return dict.copy(value)
            return dict(list(dict.items(value)))
        except RuntimeError:  # "dictionary changed size during iteration"
            continue
    raise BadRequest(
        f"a dict of {describe(dict.__len__(value))} items kept changing while it was read: "
        "pass one that no other thread is changing"
    )


def is_a(value: object, kind: type[_T]) -> TypeGuard[_T]:
    """``isinstance(value, kind)`` judged by the value's type alone: an object that
    claims a class through its ``__class__`` (``unittest.mock.Mock(spec=str)``) is not
    one, and the storage-reading calls settee makes on a real one (``dict.items``,
    ``str.join``, ``int.__index__``) would raise a raw TypeError on it."""
    return issubclass(type(value), kind)
