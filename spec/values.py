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

__all__ = ["describe", "is_int", "plain_int", "plain_str"]

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
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        # repr of an int beyond sys.get_int_max_str_digits() raises ValueError.
        text = f"<int of {int.bit_length(value)} bits>"
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
    # refuses CrossHair's symbolic strings.
    return "".join((value,))


def is_int(value: object) -> bool:
    """True for ``int`` and its subclasses, except ``bool`` (``True`` is no count).

    post: __return__ == (isinstance(value, int) and not isinstance(value, bool))
    """
    return isinstance(value, int) and not isinstance(value, bool)


def plain_int(value: int) -> int:
    """``value`` as an exact ``int`` (an ``IntEnum`` member becomes its number).

    pre: isinstance(value, int)
    post: type(__return__) is int
    """
    return int.__index__(value)
