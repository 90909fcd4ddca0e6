"""``settee dump`` and ``settee load``: documents in and out as JSON lines.

A dump holds one line per stored leaf revision, tombstones and conflicting
branches included, each with its ``_revisions`` path; ``load`` writes them
back with ``new_edits=False``. So dump-then-load reproduces every document's
winner, conflicts and revision ids (non-leaf bodies are not kept, exactly as
after a compaction).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TextIO

from settee.database import Database
from settee.spec import revtree
from settee.spec.docs import render_doc
from settee.spec.errors import BadRequest

__all__ = ["dump", "load"]

#: Documents per bulk_docs call when loading.
LOAD_BATCH = 1000


def leaf_documents(db: Database) -> Iterator[dict[str, Any]]:
    """Every leaf revision of every document, in id order within each shard."""
    for shard in db.shards:
        snap = shard.current()
        for info in snap.fold_docs(None, None, descending=False, inclusive_end=True):
            for leaf in reversed(revtree.leaves(info.tree)):
                body = snap.body(info, leaf)
                if body is not None:
                    yield render_doc(
                        info.id,
                        leaf,
                        info.tree[leaf][1],
                        body,
                        revisions=revtree.revisions(info.tree, leaf),
                        # Every attachment with its data, so a load needs no stub.
                        attachments=snap.rendered_attachments(info, leaf, 0),
                    )


def dump(db: Database, out: TextIO) -> int:
    """Write every leaf revision as a JSON line; return how many."""
    count = 0
    for doc in leaf_documents(db):
        out.write(json.dumps(doc, ensure_ascii=False, allow_nan=False) + "\n")
        count += 1
    return count


def load(db: Database, source: TextIO) -> int:
    """Store every JSON line of ``source`` with new_edits=False; return how many."""
    batch: list[dict[str, Any]] = []
    count = 0
    for number, line in _numbered_lines(source):
        if not line.strip():
            continue
        try:
            batch.append(json.loads(line))
        except (ValueError, RecursionError) as exc:
            # Not only JSONDecodeError: json raises a plain ValueError for an int past
            # Python's 4,300 digits and recurses once per nesting level.
            raise BadRequest(f"line {number} is not JSON settee can load: {exc}") from None
        if len(batch) >= LOAD_BATCH:
            count += _store(db, batch)
            batch = []
    return count + _store(db, batch)


def _numbered_lines(source: TextIO) -> Iterator[tuple[int, str]]:
    """The lines of ``source`` numbered from 1; input that cannot be decoded (bytes
    that are not UTF-8) is BadRequest, not a raw UnicodeDecodeError."""
    lines = enumerate(source, 1)
    while True:
        try:
            yield next(lines)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            raise BadRequest(f"the input is not UTF-8, as settee dump writes it: {exc}") from None


def _store(db: Database, batch: list[dict[str, Any]]) -> int:
    if batch:
        errors = db.bulk_docs(batch, new_edits=False)
        if errors:
            raise BadRequest(f"load refused documents: {errors[:3]}")
    return len(batch)
