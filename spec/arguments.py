"""Argument checks of the public calls other than documents (``spec/docs.py``).

Both implementations run these before anything else, so bad input fails
before any I/O with a ``BadRequest`` that names the argument and the fix
(SEMANTICS.md §15), and what they go on with is plain: exact ``str`` and
``int`` values, never a caller's subclass (``spec/values.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from settee.spec.docs import validate_docid
from settee.spec.errors import BadRequest
from settee.spec.revs import check_rev
from settee.spec.values import (
    describe,
    is_a,
    is_dict,
    is_int,
    is_sequence,
    plain_dict,
    plain_int,
    plain_items,
    plain_str,
)

__all__ = [
    "AllDocsArgs",
    "check_all_docs",
    "check_bool",
    "check_count",
    "check_key",
    "check_keys",
    "check_optional_rev",
    "check_path",
    "check_purge",
    "check_revs_diff",
    "check_since",
    "make_directories",
    "validate_docid",
]


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is ``True`` or ``False``; BadRequest otherwise (``1`` is no flag).

    raises: BadRequest
    post: __return__ is value
    """
    if type(value) is not bool:  # bool has no subclasses; isinstance believes __class__
        raise BadRequest(f"{name} must be True or False, not {describe(value)}")
    return value


def check_count(name: str, value: Any, *, optional: bool) -> int | None:
    """A non-negative int as a plain ``int`` (``None`` allowed when ``optional``).

    Any size is accepted: ``limit=2**63`` simply means "no limit".

    raises: BadRequest
    post: __return__ is None or (type(__return__) is int and __return__ >= 0)
    """
    if value is None and optional:
        return None
    if not is_int(value) or plain_int(value) < 0:
        allowed = "None or " if optional else ""
        raise BadRequest(f"{name} must be {allowed}an int >= 0, not {describe(value)}")
    return plain_int(value)


def check_key(name: str, value: Any) -> str | None:
    """``None`` or a valid-Unicode ``str``, made plain.

    raises: BadRequest
    post: __return__ is None or isinstance(__return__, str)
    """
    if value is None:
        return None
    if not is_a(value, str):
        raise BadRequest(f"{name} must be None or a document id (str), not {describe(value)}")
    return _unicode(name, plain_str(value))


def check_keys(keys: Any) -> list[str] | None:
    """``None`` or a list/tuple of valid-Unicode ``str`` ids, as a new list of plain strs.

    raises: BadRequest
    """
    if keys is None:
        return None
    if not is_sequence(keys):
        raise BadRequest(f"keys must be None or a list of document ids, not {type(keys).__name__}")
    # One read of its storage: a subclass's __iter__ may answer differently each time,
    # its __len__ lie or raise.
    keys = plain_items(keys)
    if all(type(key) is str for key in keys):
        try:  # one encode finds a lone surrogate in any key: no key pairs with another's
            "".join(keys).encode("utf-8")
            return keys
        except UnicodeEncodeError:
            pass  # the loop below names the key
    checked = []
    for key in keys:
        if not is_a(key, str):
            raise BadRequest(f"keys must hold only str document ids, found {describe(key)}")
        checked.append(_unicode("keys", plain_str(key)))
    return checked


def check_optional_rev(value: Any) -> str | None:
    """``None`` or a revision a caller may name (``spec.revs.check_rev``), made plain.

    raises: BadRequest
    """
    return None if value is None else check_rev(value)


def check_revs_diff(request: Any) -> dict[str, list[str]]:
    """``{id: [rev, ...]}`` with plain, valid ids and revisions, as a new dict.

    raises: BadRequest
    """
    return _revs_by_id("revs_diff", request)


def check_purge(request: Any) -> dict[str, list[str]]:
    """``purge``'s ``{id: [rev, ...]}``, checked as ``revs_diff``'s is.

    raises: BadRequest
    """
    return _revs_by_id("purge", request)


def _revs_by_id(call: str, request: Any) -> dict[str, list[str]]:
    if not is_dict(request):
        raise BadRequest(f"{call} takes a dict {{id: [rev, ...]}}, not {type(request).__name__}")
    checked: dict[str, list[str]] = {}
    # A subclass's storage, not its overrides, read at one instant (another thread
    # may change the dict while it is walked: a raw RuntimeError).
    for doc_id, revs in plain_dict(request).items():
        if not is_a(doc_id, str):
            raise BadRequest(f"{call} ids must be str, found {describe(doc_id)}")
        doc_id = _unicode(f"{call} id", plain_str(doc_id))
        if not is_sequence(revs):
            raise BadRequest(
                f"{call}[{describe(doc_id)}] must be a list of revisions, not {describe(revs)}"
            )
        checked[doc_id] = [check_rev(rev) for rev in plain_items(revs)]
    return checked


def check_path(path: Any, *, optional: bool) -> str | None:
    """A database directory as a plain, non-empty ``str`` without NUL bytes (the OS
    would raise ``ValueError``); ``None`` only when ``optional`` (the reference's memory
    store).

    raises: BadRequest
    post: __return__ is None or (isinstance(__return__, str) and __return__ != "")
    """
    if path is None and optional:
        return None
    if is_a(path, str):
        path = plain_str(path)
        try:
            usable = bool(path) and "\0" not in path and bool(os.fsencode(path))
        except UnicodeEncodeError:  # a lone surrogate the file system cannot encode
            usable = False
        if usable:
            return path
    raise BadRequest(f"path must be a non-empty str naming a directory, not {describe(path)}")


def make_directories(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)`` without its recursion: it calls itself once
    per missing parent, so a path of 1,000 short directories, which the OS takes, was
    a raw RecursionError (found probing ``open``). OSError as ``os.makedirs`` raises it
    (a file in the way: FileExistsError)."""
    missing = []
    head = path
    while head and not os.path.isdir(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:  # the root, or a path with no directory part
            break
        head = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
        except FileExistsError:  # made meanwhile, or named twice ("a/b/" and "a/b")
            if not os.path.isdir(directory):
                raise


def check_since(since: Any) -> int | str:
    """``since`` as a plain ``int`` (not ``bool``) or ``str``; BadRequest for any other type.

    Which ints and strs name a position is each implementation's business
    (tokens are opaque, SEMANTICS.md §9): ``0``, ``"0"`` and ``"now"`` always do.

    raises: BadRequest
    post: type(__return__) in (int, str)
    """
    if is_int(since):
        return plain_int(since)
    if is_a(since, str):
        return plain_str(since)
    raise BadRequest(
        f"since must be 0, 'now' or a token this database returned, not {describe(since)}"
    )


def _unicode(name: str, value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(
            f"{name} {describe(value)} is not valid Unicode (lone surrogate)"
        ) from None
    return value


@dataclass(frozen=True, slots=True)
class AllDocsArgs:
    """The checked arguments of ``all_docs``."""

    startkey: str | None
    endkey: str | None
    keys: list[str] | None
    include_docs: bool
    limit: int | None
    skip: int
    descending: bool
    inclusive_end: bool


def check_all_docs(
    startkey: Any,
    endkey: Any,
    keys: Any,
    include_docs: Any,
    limit: Any,
    skip: Any,
    descending: Any,
    inclusive_end: Any,
) -> AllDocsArgs:
    """Every ``all_docs`` argument checked, or BadRequest naming the first bad one.

    raises: BadRequest
    """
    args = AllDocsArgs(
        startkey=check_key("startkey", startkey),
        endkey=check_key("endkey", endkey),
        keys=check_keys(keys),
        include_docs=check_bool("include_docs", include_docs),
        limit=check_count("limit", limit, optional=True),
        skip=check_count("skip", skip, optional=False) or 0,
        descending=check_bool("descending", descending),
        inclusive_end=check_bool("inclusive_end", inclusive_end),
    )
    bounded = args.startkey is not None or args.endkey is not None
    # couch_mrview_util:validate_args's one exception, {[Key], Key, Key}: how key=K
    # arrives. The keys answer it.
    keys = args.keys or []
    as_key = len(keys) == 1 and args.startkey == args.endkey == keys[0]
    if args.keys and bounded and not as_key:
        raise BadRequest("keys is incompatible with startkey and endkey: pass one or the other")
    return args
