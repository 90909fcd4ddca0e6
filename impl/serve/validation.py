"""The design documents' ``validate_doc_update`` on a write: the verdict on each
document about to be written, asked by every write that comes through settee
serve (document PUT, POST, DELETE and COPY, attachments, ``_bulk_docs``, the
design documents ``_index`` writes).
"""

from __future__ import annotations

from typing import Any

import settee
from settee.serve.design import user_ctx
from settee.serve.protocol import HTTPError
from settee.serve.registry import DbEntry
from settee.spec.attachments import digest_of, length_of
from settee.spec.spool import Spooled

__all__ = ["check_write", "validate_writes", "validated_write"]


def validate_writes(entry: DbEntry, docs: list[dict[str, Any]]) -> list[HTTPError | None]:
    """The design documents' ``validate_doc_update`` verdict on each document about
    to be written: None to write it, else the refusal (403, 401, ...)."""
    check = entry.design.validator(entry.db, user_ctx(entry.name), entry.local.security)
    if check is None:
        return [None] * len(docs)
    verdicts: list[HTTPError | None] = []
    for doc in docs:
        try:
            check(_as_json(doc), _old_doc(entry.db, doc))
            verdicts.append(None)
        except HTTPError as exc:
            verdicts.append(exc)
    return verdicts


def _as_json(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as ``validate_doc_update`` sees it: attachments whose bytes the
    server holds (standalone and multipart PUTs) shown as stubs with their length
    and digest, as CouchDB's to_json_obj shows them; everything else as sent."""
    attachments = doc.get("_attachments")
    if not isinstance(attachments, dict):
        return doc
    shown = {}
    for name, att in attachments.items():
        data = att.get("data") if isinstance(att, dict) else None
        if isinstance(data, bytes | Spooled):
            att = {k: v for k, v in att.items() if k != "data"}
            att |= {"length": length_of(data), "digest": digest_of(data), "stub": True}
        shown[name] = att
    return {**doc, "_attachments": shown}


def _old_doc(db: settee.Database, doc: dict[str, Any]) -> dict[str, Any] | None:
    """The revision a write replaces, as ``validate_doc_update`` receives it: the one
    its ``_rev`` names, else the current winner, else None (a new document)."""
    for rev in (doc.get("_rev"), None):
        try:
            return db.get(doc["_id"], rev=rev) if rev is not None else db.get(doc["_id"])
        except (settee.NotFound, settee.BadRequest):
            continue
    return None


def check_write(entry: DbEntry, doc: dict[str, Any]) -> None:
    [refusal] = validate_writes(entry, [doc])
    if refusal is not None:
        raise refusal


def validated_write(entry: DbEntry, doc: dict[str, Any]) -> dict[str, Any]:
    """``put`` after the design documents' ``validate_doc_update`` accepted it."""
    check_write(entry, doc)
    return entry.db.put(doc)
