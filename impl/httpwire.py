"""What ``settee.http`` sends and how it reads the answers: document URLs, query
strings, the document sent for a validated one, and CouchDB's JSON answers put in
the engine's shapes (member order only, and the fields settee's API has).

Kept apart from ``settee.http``'s ``Database`` so that the adapter reads as the
API it implements and this module as the wire format it speaks.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

from settee.spec.attachments import Inline, Stub, as_bytes
from settee.spec.docs import ValidDoc
from settee.spec.errors import BadRequest, SetteeError
from settee.spec.revs import parse_rev
from settee.spec.values import describe

__all__ = [
    "MAX_COUNT",
    "array",
    "change",
    "count",
    "doc",
    "doc_path",
    "field",
    "ordered",
    "query",
    "result",
    "row",
    "since_text",
    "sizes",
    "wire_doc",
]

#: The largest count sent; any larger one means the same (no database holds more rows,
#: no revision tree is deeper), and servers parse counts as 64-bit or double numbers.
MAX_COUNT = 2**63 - 1


# -- requests: paths, queries, documents ----------------------------------------------------------


def doc_path(doc_id: str) -> str:
    """``/{id}`` with every character quoted (``/`` too), but ``_design/`` kept as
    CouchDB routes design documents by it."""
    if doc_id.startswith("_design/"):
        return "/_design/" + quote(doc_id[len("_design/") :], safe="")
    return "/" + quote(doc_id, safe="")


def query(params: dict[str, Any]) -> str:
    """``?a=1&b=true`` of the parameters that are not None (JSON spelling of values)."""
    parts = []
    for name, value in params.items():
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        parts.append(f"{name}={quote(text, safe='')}")
    return "?" + "&".join(parts) if parts else ""


def count(value: int | None) -> int | None:
    return None if value is None else min(value, MAX_COUNT)


def since_text(since: int | str) -> str:
    """A since token as sent. No server returns a token that a URL cannot carry (an int
    too long for a decimal spelling, a str that is not valid Unicode): refused as the
    engine refuses any unknown token."""
    try:
        text = since if isinstance(since, str) else str(since)
        text.encode("utf-8")
    except (ValueError, UnicodeEncodeError):  # str(): beyond sys.get_int_max_str_digits()
        raise BadRequest(
            f"since={describe(since)} is not a token this database returned: "
            "use 0, 'now' or a seq/last_seq/update_seq token"
        ) from None
    return text


def wire_doc(valid: ValidDoc, *, new_edits: bool, with_id: bool) -> dict[str, Any]:
    """The validated document as sent: ``_rev`` (the edited parent, or with
    ``new_edits=False`` the stored leaf and its ``_revisions`` path), ``_deleted`` when
    true, then the normalised body. An interactive edit sends no ``_revisions``: settee
    reads only its first revision, CouchDB would also merge the claimed ancestors."""
    doc: dict[str, Any] = {"_id": valid.id} if with_id else {}
    if valid.rev is not None:
        doc["_rev"] = valid.rev
    if not new_edits:
        start = parse_rev(valid.revisions[0])[0]
        doc["_revisions"] = {"start": start, "ids": [parse_rev(r)[1] for r in valid.revisions]}
    if valid.deleted:
        doc["_deleted"] = True
    doc |= valid.body
    if valid.attachments:
        doc["_attachments"] = {att.name: _wire_attachment(att) for att in valid.attachments}
    return doc


def _wire_attachment(att: Inline | Stub) -> dict[str, Any]:
    if isinstance(att, Stub):
        return {"stub": True} | ({} if att.revpos is None else {"revpos": att.revpos})
    sent: dict[str, Any] = {
        "content_type": att.content_type,
        "data": base64.b64encode(as_bytes(att.data)).decode("ascii"),
    }
    return sent | ({} if att.revpos is None else {"revpos": att.revpos})


# -- answers: the engine's shapes ---------------------------------------------------------------

_DOC_HEAD = ("_id", "_rev")
_DOC_TAIL = ("_deleted", "_revisions", "_conflicts", "_attachments")
_RESULT_ORDER = ("ok", "id", "rev", "error", "reason")
_ROW_ORDER = ("id", "key", "value", "error", "doc")
_CHANGE_ORDER = ("seq", "id", "changes", "deleted", "doc")


def ordered(value: Any, first: tuple[str, ...], last: tuple[str, ...] = ()) -> Any:
    """``value`` (if an object) with the members ``first`` in front and ``last`` at the
    end, the others between in the server's order; nothing added or dropped."""
    if not isinstance(value, dict):
        return value
    out = {k: value[k] for k in first if k in value}
    out.update((k, v) for k, v in value.items() if k not in out and k not in last)
    out.update((k, value[k]) for k in last if k in value)
    return out


def doc(value: Any) -> Any:
    """A document in ``render_doc``'s member order."""
    return ordered(value, _DOC_HEAD, _DOC_TAIL)


def result(answer: Any) -> Any:
    """One write's answer (``put``, ``delete``, a ``bulk_docs`` entry)."""
    return ordered(answer, _RESULT_ORDER)


def row(row: Any) -> Any:
    """An ``_all_docs`` row in the engine's member order."""
    row = ordered(row, _ROW_ORDER)
    if isinstance(row, dict):
        if "value" in row:
            row["value"] = ordered(row["value"], ("rev", "deleted"))
        if "doc" in row:
            row["doc"] = doc(row["doc"])
    return row


def change(row: Any) -> Any:
    """A ``_changes`` row in the engine's member order."""
    row = ordered(row, _CHANGE_ORDER)
    if isinstance(row, dict) and "doc" in row:
        row["doc"] = doc(row["doc"])
    return row


def field(answer: Any, name: str, where: str) -> Any:
    """``answer[name]``; a SetteeError naming what the server left out."""
    if not isinstance(answer, dict) or name not in answer:
        raise SetteeError(f"{where} answered without {name!r}: {describe(answer)}")
    return answer[name]


def array(answer: Any, where: str) -> list[Any]:
    if not isinstance(answer, list):
        raise SetteeError(f"{where} answered {describe(answer)}, not a list")
    return answer


def sizes(info: dict[str, Any]) -> dict[str, Any]:
    """``{"file", "active"}``: CouchDB 2+'s ``sizes``, else 1.x's ``disk_size`` and
    ``data_size`` (sizes are each implementation's own; the proof never compares them)."""
    sizes = info.get("sizes")
    if isinstance(sizes, dict):
        return {"file": sizes.get("file"), "active": sizes.get("active")}
    return {"file": info.get("disk_size"), "active": info.get("data_size")}
