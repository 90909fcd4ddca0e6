"""Validation and normalisation of incoming documents, and the doc shape readers return.

Both implementations call :func:`validate_doc` before touching storage, so
they accept, reject and store exactly the same documents. The rules follow
``couch_doc:from_json_obj/1`` (``transfer_fields``) and
``couch_doc:validate_docid/1``:

* the document is a dict with an ``_id`` that is a non-empty str; ids that
  start with ``_`` are refused except ``_design/<name>`` (``_local/`` docs are
  out of scope), ``"_design/"`` alone is refused as in CouchDB, and ids must
  be encodable as UTF-8 (no lone surrogates);
* ``_``-fields: ``_id``, ``_rev``, ``_deleted`` (a bool), ``_revisions``
  (``{"start": int, "ids": [hash, ...]}``) are read; ``_conflicts``,
  ``_deleted_conflicts``, ``_revs_info`` and ``_local_seq`` are dropped, as
  CouchDB ignores them on input (they appear on output, so a read-modify-write
  round trip works); anything else starting with ``_`` is refused, including
  ``_attachments``, ``_access`` and the ``_replication_*`` fields CouchDB
  keeps only for its replicator database;
* values must be JSON values msgpack can hold: dict with str keys, list or
  tuple (stored as list), str, int in [-2**63, 2**64), float except NaN and
  ±inf (JSON has no spelling for them; CouchDB's encoder refuses them), bool,
  None. bytes, sets and other objects are refused;
* the body (the doc minus its ``_``-fields) is normalised by a msgpack round
  trip, and its msgpack size must not exceed ``max_document_size`` (CouchDB
  measures the JSON body; settee measures what it stores).

With ``new_edits=False`` the document must name its revision: ``_rev``, or
``_revisions`` (CouchDB accepts ``_revisions`` alone), and ``revisions`` is
the full path newest first. With ``new_edits=True`` ``revisions`` is the
parent path the caller named (``()`` for a new document); only its first
element matters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgpack

from settee.spec.config import DEFAULTS
from settee.spec.errors import BadRequest
from settee.spec.revs import HASH_CHARS, format_rev, parse_rev

__all__ = [
    "IGNORED_FIELDS",
    "READ_FIELDS",
    "ValidDoc",
    "normalise_body",
    "render_doc",
    "validate_doc",
    "validate_docid",
]

READ_FIELDS = frozenset({"_id", "_rev", "_deleted", "_revisions"})
IGNORED_FIELDS = frozenset({"_conflicts", "_deleted_conflicts", "_revs_info", "_local_seq"})
_MAX_DEPTH = 500  # msgpack's packer refuses deeper nesting (its limit is 511)
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


@dataclass(frozen=True, slots=True)
class ValidDoc:
    """A validated document, split into the parts storage needs.

    ``revisions`` is newest first: the path to store (``new_edits=False``)
    or the named parent and its claimed ancestors (``new_edits=True``; empty
    when no ``_rev`` was given). ``rev`` is ``revisions[0]`` or None.
    """

    id: str
    rev: str | None
    deleted: bool
    revisions: tuple[str, ...]
    body: dict[str, Any]
    #: ``body`` as msgpack bytes (what the engine stores), kept so it is packed once.
    encoded: bytes = field(default=b"", repr=False, compare=False)


def validate_docid(docid: object) -> str:
    """``docid`` if it is an acceptable document id, else BadRequest.

    raises: BadRequest
    post: __return__ == docid
    """
    if not isinstance(docid, str) or docid == "":
        raise BadRequest(f"document id {docid!r} is not a non-empty str: pass a str like 'doc-1'")
    if docid.startswith("_") and (not docid.startswith("_design/") or docid == "_design/"):
        raise BadRequest(
            f"document id {docid!r} starts with '_': only '_design/<name>' ids may; "
            "rename the document"
        )
    try:
        docid.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(
            f"document id {docid!r} is not valid UTF-8 (lone surrogate): fix the id"
        ) from None
    return docid


def _check_value(value: Any, where: str, depth: int) -> None:
    """BadRequest naming ``where`` if ``value`` is not a storable JSON value."""
    if depth > _MAX_DEPTH:
        raise BadRequest(f"{where} nests deeper than {_MAX_DEPTH} levels: flatten the document")
    if value is None or isinstance(value, (bool, str)):
        if isinstance(value, str):
            _check_text(value, where)
        return
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise BadRequest(f"{where} = {value} does not fit in 64 bits: store it as a str")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadRequest(f"{where} = {value} is not a JSON number: store null or a str")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_value(item, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise BadRequest(f"{where} has key {key!r}: JSON object keys must be str")
            _check_text(key, f"{where} key {key!r}")
            _check_value(item, f"{where}[{key!r}]", depth + 1)
        return
    raise BadRequest(
        f"{where} is a {type(value).__name__}, which JSON cannot hold: use dict, list, str, "
        "int, float, bool or None (e.g. base64-encode bytes, list a set)"
    )


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{where} is not valid UTF-8 (lone surrogate): fix the text") from None


def normalise_body(body: dict[str, Any], max_document_size: int) -> dict[str, Any]:
    """A fresh copy of ``body`` as msgpack gives it back (tuples become lists,
    str/int subclasses become plain), or BadRequest.

    raises: BadRequest
    """
    return _normalise(body, max_document_size)[0]


def _normalise(body: dict[str, Any], max_document_size: int) -> tuple[dict[str, Any], bytes]:
    """The normalised body and its msgpack bytes (packing the original gives the
    same bytes as packing the normalised copy: msgpack sees the same values)."""
    _check_value(body, "doc", 0)
    packed = msgpack.packb(body, use_bin_type=True)
    if len(packed) > max_document_size:
        raise BadRequest(
            f"document body is {len(packed)} bytes, above max_document_size="
            f"{max_document_size}: split it or open the database with a larger limit"
        )
    normal: dict[str, Any] = msgpack.unpackb(packed, raw=False)
    return normal, packed


def _revisions_path(value: Any) -> tuple[str, ...]:
    if not isinstance(value, dict) or set(value) != {"start", "ids"}:
        raise BadRequest('_revisions must be {"start": N, "ids": [hash, ...]} with nothing else')
    start, ids = value["start"], value["ids"]
    if not isinstance(start, int) or isinstance(start, bool):
        raise BadRequest(f"_revisions.start {start!r} is not an int: use the newest position")
    if not isinstance(ids, list) or not ids:
        raise BadRequest("_revisions.ids must be a non-empty list of hashes, newest first")
    if start < len(ids):
        raise BadRequest(
            f"_revisions.start {start} is below the {len(ids)} ids given: positions start at 1"
        )
    path = []
    for i, hash_ in enumerate(ids):
        if not isinstance(hash_, str) or not hash_ or any(c not in HASH_CHARS for c in hash_):
            raise BadRequest(f"_revisions.ids[{i}] {hash_!r} is not a lowercase hex/alnum hash")
        path.append(format_rev(start - i, hash_))
    if len(set(path)) != len(path):
        raise BadRequest("_revisions.ids repeats a hash: each revision appears once")
    return tuple(path)


def validate_doc(
    doc: object, *, new_edits: bool, max_document_size: int = DEFAULTS["max_document_size"]
) -> ValidDoc:
    """Check ``doc`` and split it into id, rev, deleted flag, revision path
    and normalised body; BadRequest (naming the fix) if it is unacceptable.

    raises: BadRequest
    """
    if not isinstance(doc, dict):
        raise BadRequest(f"a document must be a dict, not {type(doc).__name__}")
    docid = validate_docid(doc.get("_id"))
    body = {}
    for key, value in doc.items():
        if not isinstance(key, str):
            raise BadRequest(f"document key {key!r} is not a str: JSON object keys must be str")
        if not key.startswith("_"):
            body[key] = value
        elif key not in READ_FIELDS and key not in IGNORED_FIELDS:
            raise BadRequest(
                f"unknown special field {key!r}: fields starting with '_' are reserved "
                f"({', '.join(sorted(READ_FIELDS))}); rename it without the underscore"
            )
    deleted = doc.get("_deleted", False)
    if not isinstance(deleted, bool):
        raise BadRequest(f"_deleted must be True or False, not {deleted!r}")
    revisions: tuple[str, ...] = ()
    if "_revisions" in doc:
        revisions = _revisions_path(doc["_revisions"])
    if "_rev" in doc:
        rev = doc["_rev"]
        parse_rev(rev)
        if revisions and revisions[0] != rev:
            raise BadRequest(
                f"_rev {rev!r} disagrees with _revisions (newest {revisions[0]!r}): "
                "make _revisions start at _rev"
            )
        revisions = revisions or (rev,)
    if not new_edits and not revisions:
        raise BadRequest(
            f"document {docid!r} has no _rev: with new_edits=False every document must name "
            "its revision (_rev, and _revisions for its history)"
        )
    normal, packed = _normalise(body, max_document_size)
    return ValidDoc(
        id=docid,
        rev=revisions[0] if revisions else None,
        deleted=deleted,
        revisions=revisions,
        body=normal,
        encoded=packed,
    )


def render_doc(
    docid: str,
    rev: str,
    deleted: bool,
    body: dict[str, Any],
    *,
    revisions: dict[str, Any] | None = None,
    conflicts: list[str] | None = None,
) -> dict[str, Any]:
    """The document a read returns, in CouchDB's field order: ``_id``,
    ``_rev``, body fields, ``_deleted`` (tombstones only), ``_revisions`` (if
    given), ``_conflicts`` (if given and non-empty). Only the top level is
    new: pass a body the caller may own (e.g. a deep copy of the stored one).
    """
    out: dict[str, Any] = {"_id": docid, "_rev": rev}
    out.update(body)
    if deleted:
        out["_deleted"] = True
    if revisions is not None:
        out["_revisions"] = revisions
    if conflicts:
        out["_conflicts"] = list(conflicts)
    return out
