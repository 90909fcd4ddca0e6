"""``POST /{db}/_explain``: the index ``_find`` would use and why, in
mango_cursor:explain's shape (apache/couchdb ``src/mango/src``).

Besides the plan (``index``, ``mrargs``, ``covering``) it answers
``index_candidates``: every other index with whether it could have served the
query, the first reason it was not chosen and a ranking, computed as
mango_cursor:extract_candidate_indexes does (partial indexes not named by
``use_index``; unusable ones with mango_idx_view's or mango_idx_special's first
reason; usable ones ``use_index`` left out; ``_all_docs`` when a json index
serves; the json indexes the planner ranked lower: ``less_overlap``,
``too_many_fields`` or ``alphabetically_comes_after``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from settee.serve import mango, mangoplan
from settee.serve.find import FindQuery, named_indexes, plan, read_find_query
from settee.serve.protocol import reply, respond
from settee.serve.registry import DbEntry
from settee.serve.state import State

__all__ = ["explain", "handle_explain", "index_candidates"]


def _max_shown(value: Any) -> Any:
    """mango_cursor_view:maybe_replace_max_json: MAX as ``"<MAX>"``."""
    if value is mangoplan.MAX:
        return "<MAX>"
    if isinstance(value, list):
        return [_max_shown(v) for v in value]
    return value


def _selector_hints(normal: Any) -> list[dict[str, Any]]:
    """mango_cursor:extract_selector_hints for json indexes (the only kind here)."""
    indexable = {mangoplan.field_name(p) for p in mangoplan.indexable_fields(normal)}
    every = set(mangoplan.selector_fields(normal))
    return [
        {
            "type": "json",
            "indexable_fields": sorted(indexable),
            "unindexable_fields": sorted(every - indexable),
        }
    ]


def explain(entry: DbEntry, body: dict[str, Any], q: FindQuery) -> dict[str, Any]:
    """``POST /{db}/_explain``: the index ``_find`` would use and how it would read
    it, in mango_cursor:explain's shape (``index`` null, and no ``mrargs``, when no
    index can serve the query)."""
    found = plan(entry.db, q, explain=True)
    opts = {
        "use_index": q.use_index_names,
        "bookmark": body.get("bookmark") or "nil",
        "limit": q.limit,
        "skip": q.skip,
        "sort": {f: "desc" if q.descending else "asc" for f in q.sort_fields},
        "fields": q.fields,
        "partition": "",
        "r": q.r,
        "conflicts": q.conflicts,
        "stale": "ok" if q.stale else False,
        "update": body.get("update", True),
        "stable": body.get("stable", False),
        "execution_stats": q.execution_stats,
        "allow_fallback": q.allow_fallback,
    }
    answer: dict[str, Any] = {
        "dbname": entry.name,
        "index": None if found.index is None else found.index.listed(),
        "partitioned": False,
        "selector": mangoplan.selector_json(q.selector),
        "opts": opts,
        "limit": q.limit,
        "skip": q.skip,
        "fields": q.fields,
        "index_candidates": index_candidates(mango.list_indexes(entry.db), q, found.index),
        "selector_hints": _selector_hints(q.selector),
    }
    if found.index is None:
        return answer
    covering = mangoplan.covers(found.index, q.fields, q.selector)
    start: Any = None
    end: Any = None
    if found.ranges is not None:
        start = mangoplan.start_key(found.index, found.ranges)
        end = mangoplan.end_key(found.index, found.ranges)
        if q.descending:
            start, end = end, start
    answer["mrargs"] = {
        "include_docs": q.r == 1 and not covering,
        "view_type": "map",
        "reduce": False,
        "partition": None,
        "start_key": _max_shown(start),
        "end_key": _max_shown(end),
        "direction": "rev" if q.descending else "fwd",
        "stable": q.stable,
        "update": q.update,
        # #mrargs{} leaves conflicts undefined unless the query asks for them, and
        # CouchDB's JSON encoder writes the atom as a string (docs: find.rst).
        "conflicts": True if q.conflicts else "undefined",
    }
    answer["covering"] = covering
    return answer


def _ranks(sorted_count: int, *tiers: list[Any]) -> list[int]:
    """The rankings of the unfavoured, excluded, unusable, out-of-scope and partial
    tiers: each one more than the previous when that tier has indexes."""
    ranks = [max(1, sorted_count)]
    for tier in tiers:
        ranks.append(ranks[-1] + (1 if tier else 0))
    return ranks


def _key(index: mango.MangoIndex) -> tuple[str | None, str]:
    return index.ddoc, index.name


def _merge(tags: dict[Any, dict[str, Any]], index: Any, delta: dict[str, Any]) -> None:
    """enhance_candidates' combiner: usable and-ed, reasons appended, rankings added."""
    entry = tags.setdefault(index, {})
    for key, value in delta.items():
        if key not in entry:
            entry[key] = value
        elif key == "usable":
            entry[key] = entry[key] and value
        else:
            entry[key] = entry[key] + value


def index_candidates(
    indexes: list[mango.MangoIndex], q: FindQuery, winner: mango.MangoIndex | None
) -> list[dict[str, Any]]:
    """mango_cursor:extract_candidate_indexes, for one node and no partitions."""
    partial = [i for i in indexes if i.partial]
    scoped = [i for i in indexes if not i.partial]
    scoped += [i for i in named_indexes(partial, q.use_index)]
    reasons = {_key(i): mangoplan.rejections(i, q.selector, q.sort_fields) for i in scoped}
    usable = [i for i in scoped if not reasons[_key(i)]]
    filtered = named_indexes(usable, q.use_index) or usable
    of_type = [i for i in filtered if i.ddoc is not None] or filtered
    ranked = mangoplan.ranked(of_type, q.selector) if of_type and winner else []
    unfavored = [i for i in filtered if i not in of_type]
    excluded = [i for i in usable if i not in filtered]
    unusable = [i for i in scoped if reasons[_key(i)]]
    ranks = _ranks(len(ranked), unfavored, excluded, unusable, [])
    tags: dict[Any, dict[str, Any]] = {_key(i): {} for i in indexes}
    by_key = {_key(i): i for i in indexes}
    for tier, delta in (
        (partial, {"usable": False, "reason": ["is_partial"], "ranking": ranks[4]}),
        (unusable, {"usable": False, "ranking": ranks[2]}),
        (excluded, {"usable": True, "reason": ["excluded_by_user"], "ranking": ranks[1]}),
        (unfavored, {"usable": True, "reason": ["unfavored_type"], "ranking": ranks[0]}),
        (of_type if winner else [], {"usable": True}),
    ):
        for index in tier:
            _merge(tags, _key(index), delta)
    for index in unusable:
        _merge(tags, _key(index), {"reason": reasons[_key(index)]})
    winner_width = 0 if winner is None else len(winner.fields)
    for n, (index, _prefix, distance) in enumerate(ranked):
        if distance > 0:
            reason = "less_overlap"
        elif len(index.fields) > winner_width:
            reason = "too_many_fields"
        else:
            reason = "alphabetically_comes_after"
        _merge(tags, _key(index), {"reason": [reason], "ranking": n})
    if winner is not None:
        tags.pop(_key(winner), None)
    # maps:fold over record keys, each entry prepended: design documents in
    # descending order, _all_docs (no ddoc) last.
    order = sorted(tags, key=lambda k: (k[0] is not None, k[0] or "", k[1]), reverse=True)
    return [_candidate(by_key[key], tags[key], q) for key in order]


def _candidate(index: mango.MangoIndex, tags: dict[str, Any], q: FindQuery) -> dict[str, Any]:
    covering = None
    if index.ddoc is not None:
        covering = bool(q.fields) and set(q.fields) <= {"_id", *index.fields}
    return {
        "index": index.listed(),
        "analysis": {
            "usable": tags["usable"],
            "reasons": [{"name": tags["reason"][0]}],
            "ranking": tags["ranking"],
            "covering": covering,
        },
    }


async def handle_explain(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    body, q = await read_find_query(state, request)
    return respond(reply(200, await state.run(explain, entry, body, q)))
