"""CouchDB's checks of a document sent to be written, each answered with its
error name and reason: the id (couch_doc:validate_docid), the special members
and ``_revisions`` (couch_doc:transfer_fields), and the revision a request names
by ``?rev=`` and ``If-Match`` (chttpd_db:extract_header_rev). Also the id a
document that came without one gets, and which of ``_rev`` and ``_revisions``
names its revision when both come.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from settee.serve import revs
from settee.serve.local import couch_rev
from settee.serve.protocol import HTTPError
from settee.spec.docids import new_docid
from settee.spec.docs import BODY_FIELDS, IGNORED_FIELDS, READ_FIELDS
from settee.spec.errors import NotFound

__all__ = [
    "RevParser",
    "check_doc",
    "check_docid",
    "check_openable",
    "docid_problem",
    "explicit_rev",
    "header_rev",
    "new_doc_id",
    "revisions_win",
]


#: Special members CouchDB accepts on input (couch_doc:transfer_fields): the
#: engine's own lists (read, ignored, kept as body members).
_SPECIAL = READ_FIELDS | IGNORED_FIELDS | BODY_FIELDS


def new_doc_id() -> str:
    """An id for a document that came without one: the engine's own (CouchDB's
    ``sequential`` couch_uuids algorithm, ``settee.spec.docids``)."""
    return new_docid()


def revisions_win(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as CouchDB reads it when ``_rev`` and ``_revisions`` both come:
    ``_revisions`` names the revision (couch_doc:transfer_fields skips ``_rev``
    then), so a ``_rev`` that disagrees is not an error. PouchDB sends such docs."""
    if "_revisions" in doc and "_rev" in doc:
        return {k: v for k, v in doc.items() if k != "_rev"}
    return doc


def docid_problem(doc_id: Any) -> str | None:
    """Why couch_doc:validate_docid refuses ``doc_id`` (its exact reason), or None."""
    if not isinstance(doc_id, str):
        return "Document id must be a string"
    if doc_id == "":
        return "Document id must not be empty"
    if doc_id in ("_design/", "_local/"):
        return f"Illegal document id `{doc_id}`"
    if not _is_utf8(doc_id):
        return "Document id must be valid UTF-8"
    if doc_id.startswith("_") and not doc_id.startswith(("_design/", "_local/")):
        return "Only reserved document ids may start with underscore."
    return None


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, as JSON's "\ud800" decodes
        return False
    return True


def check_docid(doc_id: Any) -> None:
    """400 ``illegal_docid`` with couch_doc:validate_docid's reason, if it has one."""
    problem = docid_problem(doc_id)
    if problem is not None:
        raise HTTPError(400, "illegal_docid", problem)


def check_openable(doc_id: str) -> None:
    """404 ``missing`` for an id no write accepts: chttpd_db's DELETE and COPY open
    the document they name first (fabric:open_doc checks no id), and none has it."""
    if docid_problem(doc_id) is not None:
        raise NotFound("missing")


def _bad_member(key: str) -> HTTPError:
    return HTTPError(400, "doc_validation", f"Bad special document member: {key}")


def check_doc(doc: Any, local: bool = False) -> None:
    """CouchDB's own document checks, member by member in the order sent, as
    couch_doc:transfer_fields makes them, so clients see its error names and
    reasons (the engine then applies every rule of SEMANTICS.md §2 and answers
    ``bad_request``). A ``_local/`` document's ``_rev`` (``local``, or its
    ``_id`` says so) is read as CouchDB reads it (``0-5`` passes); any other's
    by settee's rules."""
    if not isinstance(doc, dict):
        raise HTTPError(400, "bad_request", "Document must be a JSON object")
    local = local or (isinstance(doc.get("_id"), str) and doc["_id"].startswith("_local/"))
    revisions_seen = False  # transfer_fields skips a _rev that follows _revisions
    for key, value in doc.items():
        if key == "_id":
            check_docid(value)
        elif key == "_rev" and not revisions_seen:
            parse = couch_rev if local else revs.request_rev
            parse(value)
        elif key == "_revisions":
            _check_revisions(value)
            revisions_seen = True
        elif key.startswith("_") and not _is_member(key, value):
            raise _bad_member(key)


#: Special members transfer_fields reads only with a value of this type: any other
#: falls to its last clause, "Bad special document member".
_MEMBER_TYPES: dict[str, type] = {"_deleted": bool, "_attachments": dict}


def _is_member(key: str, value: Any) -> bool:
    return key in _SPECIAL and isinstance(value, _MEMBER_TYPES.get(key, object))


def _check_revisions(value: Any) -> None:
    """``_revisions`` as couch_doc:transfer_fields reads it, with its reasons."""
    if not isinstance(value, dict):
        raise _bad_member("_revisions")
    start, ids = value.get("start"), value.get("ids")
    if not isinstance(start, int) or isinstance(start, bool):
        raise HTTPError(400, "doc_validation", "_revisions.start isn't an integer.")
    if not isinstance(ids, list):
        raise HTTPError(400, "doc_validation", "_revisions.ids isn't a array.")
    for rev_id in ids:
        # parse_revid has no clause for a negative start: "isn't a string" too.
        if not isinstance(rev_id, str) or start < 0:
            raise HTTPError(400, "doc_validation", "RevId isn't a string")
        if start != 0 and len(rev_id) == 32 and not re.fullmatch(r"[0-9a-fA-F]{32}", rev_id):
            raise HTTPError(400, "doc_validation", "RevId isn't a valid hexadecimal")


RevParser = Callable[[Any], str]


def header_rev(headers: Mapping[str, str], parse: RevParser) -> str | None:
    value = headers.get("If-Match")
    return parse(value.strip().strip('"')) if value is not None else None


def explicit_rev(
    query: Mapping[str, str], headers: Mapping[str, str], parse: RevParser = revs.request_rev
) -> str | None:
    """The rev named by ``?rev=`` and/or ``If-Match``, each read as couch_doc:parse_rev
    reads it (chttpd_db:extract_header_rev)."""
    qrev = query.get("rev")
    qrev = parse(qrev) if qrev is not None else None
    hrev = header_rev(headers, parse)
    if qrev is not None and hrev is not None and qrev != hrev:
        raise HTTPError(400, "bad_request", "Document rev and etag have different values")
    return qrev if qrev is not None else hrev
