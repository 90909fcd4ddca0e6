"""A quick differential run: the engine and the reference side by side.

``settee verify`` runs this until the full proof campaigns (Hypothesis state
machines, interleavings, crashes) are wired into the command. It drives both
implementations with the same seeded random operations, including reopen
and compaction, and compares every answer; a disagreement is a failure.
"""

from __future__ import annotations

import os
import random
from typing import Any, TextIO

import settee
import settee.reference

__all__ = ["run_smoke"]

_IDS = ["a", "b", "c", "Z", "é", "😀", "_design/x", "d1", "d10", "d2"]


def _normalise(result: Any) -> Any:
    """Drop what is implementation-specific: seq tokens and sizes."""
    if isinstance(result, dict):
        return {
            k: _normalise(v)
            for k, v in result.items()
            if k not in ("seq", "last_seq", "update_seq", "sizes")
        }
    if isinstance(result, list):
        return [_normalise(v) for v in result]
    return result


def _call(db: Any, op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return ("ok", _normalise(getattr(db, op)(*args, **kwargs)))
    except settee.SetteeError as exc:
        return ("error", type(exc).__name__)


def _random_op(rng: random.Random, revs: dict[str, list[str]]) -> tuple[str, tuple, dict]:
    doc_id = rng.choice(_IDS)
    known = revs.get(doc_id, [])
    rev = rng.choice(known) if known and rng.random() < 0.8 else None
    roll = rng.random()
    if roll < 0.35:
        doc: dict[str, Any] = {"_id": doc_id, "n": rng.randrange(5)}
        if rev:
            doc["_rev"] = rev
        return "put", (doc,), {}
    if roll < 0.45:
        return "delete", (doc_id, rev), {}
    if roll < 0.55:
        docs = [{"_id": rng.choice(_IDS), "n": i} for i in range(rng.randrange(1, 5))]
        return "bulk_docs", (docs,), {}
    if roll < 0.7:
        return "get", (doc_id,), {"revs": rng.random() < 0.5, "conflicts": True}
    if roll < 0.85:
        start = rng.choice([None, *_IDS])
        return (
            "all_docs",
            (),
            {
                "startkey": start,
                "descending": rng.random() < 0.3,
                "limit": rng.choice([None, 2]),
                "include_docs": rng.random() < 0.5,
            },
        )
    if roll < 0.95:
        return "all_docs", (), {"keys": rng.sample(_IDS, 3)}
    return "info", (), {}


def _record_revs(revs: dict[str, list[str]], result: Any) -> None:
    if result[0] != "ok":
        return
    value = result[1]
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, dict) and item.get("ok"):
            revs.setdefault(item["id"], []).append(item["rev"])


def run_smoke(workdir: str, *, out: TextIO, shards: int = 4, ops: int = 400, seed: int = 0) -> int:
    """Run ``ops`` random operations on both implementations; 0 when they agree."""
    rng = random.Random(seed)
    path = os.path.join(workdir, "verify.settee")
    engine = settee.open(path, shards=shards)
    model = settee.reference.open(None)
    revs: dict[str, list[str]] = {}
    try:
        for step in range(ops):
            if step % 100 == 99:
                engine.close()
                engine = settee.open(path)
                engine.compact()
                model.compact()
            op, args, kwargs = _random_op(rng, revs)
            got, want = _call(engine, op, args, kwargs), _call(model, op, args, kwargs)
            if got != want:
                out.write(f"FAIL at step {step}: {op}{args} {kwargs}\n engine:    {got}\n")
                out.write(f" reference: {want}\n")
                return 1
            _record_revs(revs, want)
    finally:
        engine.close()
        model.close()
    out.write(
        f"settee verify (smoke): {ops} operations on {shards} shards with reopen and compaction; "
        "engine and reference agreed on every answer\n"
    )
    return 0
