"""``GET|POST /{db}/_changes``: ``feed=normal|longpoll|continuous|eventsource``,
``since``, ``limit``, ``include_docs`` (with ``conflicts`` and ``attachments``),
``style=all_docs``, the built-in filters ``_doc_ids``, ``_selector`` (Mango, POST)
and ``_design``, ``heartbeat``, ``timeout``, ``seq_interval``, and the design functions
``filter=ddoc/name`` and ``filter=_view`` (``view=ddoc/name``: documents the map
function emits for), run by ``settee.serve.js``; a missing design document or
function is 404 as in CouchDB.

Waiting for new commits costs no polling: every write goes through this
server (the engine's ``LOCK`` lets one process open a database), so each
handler that wrote bumps the database's name on the server's ``Notifier`` once
the write is durable, and waiting feeds wake up. A live feed holds no lease
while it waits, as couch_changes closes its db until couch_event says
``updated``: its database may close to make room for others and is opened
again when the feed reads. A feed whose database was deleted (or deleted and
created again) ends as at its timeout, as CouchDB's ends on ``deleted``.
Timeouts follow couch_changes: without a heartbeat a feed stops after
``min(timeout, changes_timeout)`` ms; with one it sends a newline every
``min(heartbeat, changes_timeout)`` ms and never times out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

from aiohttp import web

import settee
from settee.serve import revs
from settee.serve.alldocs import with_attachment_data
from settee.serve.dbs import db_info
from settee.serve.design import request_object
from settee.serve.encoding import with_encoding_info
from settee.serve.lease import Lease
from settee.serve.protocol import (
    HTTPError,
    decode_object,
    encode_json,
    etag_matches,
    etag_of,
    method_not_allowed,
    parse_integer,
    query_json,
    query_true,
    reply,
    require_json_content,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.spec import revtree, selector
from settee.spec.docids import new_docid

__all__ = ["handle_changes", "unpacked_since"]

_FEEDS = {
    "normal": "normal",
    "longpoll": "longpoll",
    "continuous": "continuous",
    "live": "continuous",
    "eventsource": "eventsource",
}


@dataclasses.dataclass(frozen=True, slots=True)
class ChangesQuery:
    feed: str
    since: Any
    limit: int | None
    include_docs: bool
    conflicts: bool  # with include_docs: each doc's _conflicts, as GET ?conflicts=true
    attachments: bool  # with include_docs: attachment data inline (COUCHDB-1923)
    all_leaves: bool
    filter: ChangesFilter | None
    heartbeat: float | None  # seconds
    timeout: float  # seconds
    descending: bool = False  # the normal feed only (see read_changes)
    encoding_info: bool = False  # with include_docs: att_encoding_info (settee.serve.encoding)
    seq_interval: int | None = None  # rows between those that carry their seq (_sparse_seqs)
    #: What the feed shows of its rows, when not the rows themselves: ``/_db_updates``
    #: is the ``_global_changes`` feed with each row as an event (dbupdates.py),
    #: which CouchDB answers without ``pending``.
    rows: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ChangesFilter:
    """What ``filter=`` keeps: one of CouchDB's built-in filters, or a design
    document's function (which settee serve names, but cannot run)."""

    kind: str  # "_doc_ids", "_selector", "_design", or "filters"/"views" of a ddoc
    doc_ids: frozenset[str] = frozenset()
    selector: Any = None  # normalised (settee.spec.selector)
    fields: tuple[str, ...] = ()  # _selector's body "fields": what each row's doc keeps
    ddoc: str = ""
    function: str = ""
    #: For "filters"/"views": the design function as a predicate over documents,
    #: resolved against the database before the feed starts (``resolve_filter``).
    passes: Callable[[dict[str, Any]], bool] | None = None


def _heartbeat_ms(value: str) -> int:
    """``heartbeat``'s milliseconds (``true``: 60,000), refused as
    chttpd_db:parse_changes_query refuses it: 400 bad_request, with its reasons."""
    if value == "true":
        return 60_000
    beat = parse_integer(value)
    if beat is None:
        raise HTTPError(
            400,
            "bad_request",
            "Invalid heartbeat value. Expecting a positive integer value (in milliseconds).",
        )
    if beat <= 0:
        raise HTTPError(
            400,
            "bad_request",
            "The heartbeat value should be a positive integer (in milliseconds).",
        )
    return beat


def _selector_fields(body: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``_selector`` filter's ``fields``, checked after its selector as
    couch_changes:get_selector_and_fields checks them (check_fields): not an
    array is its own reason, a bad entry mango_fields' (each a bad_request)."""
    fields = body.get("fields")
    if fields is None:
        return ()
    if not isinstance(fields, list):
        raise HTTPError(400, "bad_request", "Selector error: fields must be JSON array")
    for field in fields:
        if not isinstance(field, str):
            raise HTTPError(400, "bad_request", f"Invalid JSON for field spec: {json.dumps(field)}")
        selector.parse_field(field)  # BadSelector for a field no path can be
    return tuple(fields)


def _parse_filter(
    name: str | None, query: Mapping[str, str], body: Mapping[str, Any], method: str
) -> ChangesFilter | None:
    """couch_changes:configure_filter, minus running JavaScript."""
    if not name:
        return None
    if name == "_doc_ids":
        # couch_changes:get_doc_ids: a POST's come from its body alone, a GET's from
        # the query string.
        ids = body.get("doc_ids") if method == "POST" else query_json(query, "doc_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise HTTPError(
                400, "bad_request", "`doc_ids` filter parameter is not a list of doc ids."
            )
        return ChangesFilter("_doc_ids", doc_ids=frozenset(ids))
    if name == "_selector":
        if method != "POST":
            raise HTTPError(400, "bad_request", "Selector must be specified in POST payload")
        try:
            normal = selector.normalize(body.get("selector"))
            return ChangesFilter("_selector", selector=normal, fields=_selector_fields(body))
        except selector.BadSelector as exc:
            raise HTTPError(400, "bad_request", exc.reason) from exc
    if name == "_design":
        return ChangesFilter("_design")
    if name == "_view":
        view = body.get("query", {}).get("view") if isinstance(body.get("query"), dict) else None
        view = view if isinstance(view, str) else query.get("view", "")
        if not view:
            raise HTTPError(400, "bad_request", "`view` filter parameter is not provided.")
        return _ddoc_filter("views", view, "`view` must be of the form `designname/viewname`")
    if name.startswith("_"):
        raise HTTPError(400, "bad_request", "unknown builtin filter name")
    return _ddoc_filter("filters", name, "`filter` must be of the form `designname/filtername`")


def _ddoc_filter(kind: str, name: str, form: str) -> ChangesFilter | None:
    parts = [unquote(p) for p in name.split("/") if p]
    if not parts:
        return None
    if len(parts) != 2:
        raise HTTPError(400, "bad_request", form)
    return ChangesFilter(kind, ddoc=parts[0], function=parts[1])


def _filter_request(
    request: web.BaseRequest, entry: DbEntry, body: Any, raw: bytes
) -> dict[str, Any]:
    """The ``req`` object CouchDB passes to a filter function. Its ``body``:
    ``"undefined"`` for a GET (mochiweb's recv_body of no body), the decoded JSON
    object for a POST that sent one (handle_changes_req keeps it as req_body, which
    chttpd_external:json_req_obj passes as it is), else the empty string."""
    if request.method != "POST":
        return request_object(request, entry.name, body="undefined")
    return request_object(request, entry.name, body=body if raw else "")


def _resolve_filter(
    entry: DbEntry, f: ChangesFilter, req: dict[str, Any]
) -> Callable[[dict[str, Any]], bool]:
    # chttpd_external:json_req_obj: the database's info and a fresh uuid (couch_uuids:new).
    info = db_info(entry)  # req.info is the database's info, as GET /{db} answers it
    whole = {**req, "info": info, "uuid": new_docid(), "secObj": entry.local.security()}
    return entry.design.changes_filter(entry.db, f.kind, f.ddoc, f.function, whole)


#: The parameters chttpd_db:parse_changes_query reads; it lower-cases their names.
_ARGS = frozenset(
    {
        "feed",
        "descending",
        "since",
        "limit",
        "style",
        "heartbeat",
        "timeout",
        "include_docs",
        "conflicts",
        "attachments",
        "att_encoding_info",
        "filter",
        "seq_interval",
    }
)


def _changes_args(query: Mapping[str, str]) -> dict[str, str]:
    """The query string as parse_changes_query folds it: names in any case, a later
    one over an earlier, and ``last-event-id`` as a ``since`` (the other names a
    filter reads, such as ``doc_ids`` and ``view``, are read as they are)."""
    args: dict[str, str] = {}
    for name, value in query.items():
        key = name.lower()
        key = "since" if key == "last-event-id" else key
        if key in _ARGS:
            args[key] = value
    return args


def _parse(
    query: Mapping[str, str], body: Mapping[str, Any], max_timeout_ms: int, method: str
) -> ChangesQuery:
    args = _changes_args(query)
    feed = _FEEDS.get(args.get("feed", "normal"))
    if feed is None:
        raise HTTPError(
            400,
            "bad_request",
            "Supported `feed` types: normal, continuous, live, longpoll, eventsource",
        )
    style = args.get("style", "main_only")
    if style not in ("main_only", "all_docs"):
        raise HTTPError(400, "bad_request", "style must be main_only or all_docs")
    changes_filter = _parse_filter(args.get("filter"), query, body, method)
    heartbeat = None
    if "heartbeat" in args:
        heartbeat = min(_heartbeat_ms(args["heartbeat"]), max_timeout_ms) / 1000
    timeout_ms = _non_negative(args, "timeout")
    timeout = min(max_timeout_ms if timeout_ms is None else timeout_ms, max_timeout_ms) / 1000
    return ChangesQuery(
        feed=feed,
        since=unpacked_since(args.get("since", "0")),
        limit=_non_negative(args, "limit"),
        include_docs=query_true(args, "include_docs"),
        conflicts=query_true(args, "conflicts"),
        attachments=query_true(args, "attachments"),
        all_leaves=style == "all_docs",
        filter=changes_filter,
        heartbeat=heartbeat,
        timeout=timeout,
        # The normal feed only: the live feeds go forwards from since (README).
        descending=feed == "normal" and query_true(args, "descending"),
        seq_interval=_seq_interval(args),
        encoding_info=query_true(args, "att_encoding_info"),
    )


def _non_negative(query: Mapping[str, str], name: str) -> int | None:
    """``limit`` or ``timeout`` as parse_changes_query reads it, with its reasons."""
    text = query.get(name)
    if text is None:
        return None
    value = parse_integer(text)
    if value is None:
        raise HTTPError(
            400, "bad_request", f"The {name} parameter should be a non-negative integer"
        )
    if value < 0:
        raise HTTPError(400, "bad_request", f"The {name} value should be a non-negative integer")
    return value


def _seq_interval(query: Mapping[str, str]) -> int | None:
    """``seq_interval``, a positive integer (parse_changes_query's reason otherwise)."""
    text = query.get("seq_interval")
    if text is None:
        return None
    value = parse_integer(text)
    if value is None or value <= 0:
        raise HTTPError(400, "bad_request", "invalid_seq_interval")
    return value


#: fabric_view_changes:unpack_seq_regex_match: an optional quote each side and an
#: optional ``N-`` before the opaque part, which alone is decoded.
_PACKED_SEQ = re.compile(r'"?([0-9]+-)?(.*?)"?', re.S)


def unpacked_since(since: str) -> str:
    """``since`` as fabric reads it: a seq this database gave, even JSON-quoted or
    without its ``N-`` prefix (which CouchDB ignores), in the form settee's tokens
    take; ``0``, ``now`` and anything else as given."""
    if since in ("0", "now"):
        return since
    match = _PACKED_SEQ.fullmatch(since)
    assert match is not None  # every part of the pattern is optional
    prefix, opaque = match.groups()
    return f"{prefix or '0-'}{opaque}"


#: couch_db.hrl's default ``#changes_args.limit``: what fabric counts rows down from
#: when the query sets no limit.
_DEFAULT_LIMIT = 1_000_000_000_000_000


def _sparse_seqs(rows: list[dict[str, Any]], q: ChangesQuery, sent: int = 0) -> None:
    """``seq_interval``: fabric_view_changes gives a row its seq only when the rows
    left to the limit (``q.limit`` or CouchDB's default, less the ``sent`` rows
    before these) are a multiple of the interval, and null otherwise; ``last_seq``
    is always there. A client resuming from a row must use the last non-null one."""
    if q.seq_interval is None:
        return
    left = (_DEFAULT_LIMIT if q.limit is None else q.limit) - sent
    for offset, row in enumerate(rows):
        if (left - offset) % q.seq_interval:
            row["seq"] = None


#: Filters that judge each revision's document (they set a row's ``changes`` themselves).
_BY_DOCUMENT = ("_selector", "filters", "views")
#: Changes read per engine call while a filter looks for ``limit`` rows it keeps.
_FILTER_PAGE = 500


def read_changes(db: settee.Database, q: ChangesQuery, since: Any) -> dict[str, Any]:
    """One page of changes after ``since``, filtered and styled as ``q`` asks."""
    if q.descending:
        return _descending(db, q)
    if q.rows is not None:
        return _shown_rows(db, q, since)
    if q.filter is None:
        result = db.changes(since=since, limit=q.limit, include_docs=q.include_docs)
    else:
        result = _filtered_changes(db, q, since)
    result["pending"] = revs.changes_pending(db, result["last_seq"])
    if q.include_docs and q.attachments:
        for row in result["results"]:
            if row.get("doc"):
                row["doc"] = with_attachment_data(db, row["doc"])
    if q.include_docs and q.encoding_info:
        for row in result["results"]:
            if row.get("doc"):
                row["doc"] = with_encoding_info(db, row["doc"])
    with_conflicts = q.conflicts and q.include_docs
    if (q.all_leaves or with_conflicts) and result["results"]:
        infos = revs.doc_infos(db, [row["id"] for row in result["results"]])
        for row in result["results"]:
            info = infos.get(row["id"])
            if info is None:
                continue
            if q.all_leaves and not (q.filter and q.filter.kind in _BY_DOCUMENT):
                row["changes"] = [{"rev": rev} for rev in revtree.leaves(info.tree)]
            doc = row.get("doc")
            conflicts = revtree.conflicts(info.tree) if with_conflicts and doc else []
            if conflicts and doc.get("_rev") == info.winner:
                doc["_conflicts"] = conflicts
    if q.include_docs and q.filter is not None and q.filter.fields:
        _keep_fields(result["results"], list(q.filter.fields))
    return result


def _shown_rows(db: settee.Database, q: ChangesQuery, since: Any) -> dict[str, Any]:
    """A page of ``q.rows``' rows: ``limit`` counts the rows shown, not the changes
    read (global_changes_httpd counts "only changes which happen after the filter"),
    and ``last_seq`` is the last one shown when the limit cut the page."""
    assert q.rows is not None  # read_changes calls this for such a query only
    result = db.changes(since=since)
    shown = q.rows(result["results"])
    if q.limit is not None and len(shown) > q.limit:
        shown = shown[: q.limit]
        return {"results": shown, "last_seq": shown[-1]["seq"] if shown else since}
    return {"results": shown, "last_seq": result["last_seq"]}


def _keep_fields(rows: list[dict[str, Any]], fields: list[str]) -> None:
    """Each row's doc cut to the ``_selector`` filter's ``fields``, last, after its
    conflicts and attachments are in: couch_changes:doc_to_json (fabric_rpc:
    maybe_filtered_json_doc when clustered) extracts from the finished JSON doc."""
    for row in rows:
        if row.get("doc"):
            row["doc"] = selector.extract_fields(row["doc"], fields)


def _filtered_changes(db: settee.Database, q: ChangesQuery, since: Any) -> dict[str, Any]:
    """Changes that pass ``q.filter``, read a page at a time until ``q.limit`` are
    kept; ``last_seq`` is the last kept row's when the limit cut the list."""
    f = q.filter
    assert f is not None
    wants_docs = q.include_docs or f.kind in ("_selector", "filters", "views")
    kept: list[dict[str, Any]] = []
    position = since
    while True:
        page = db.changes(since=position, limit=_FILTER_PAGE, include_docs=wants_docs)
        for row in page["results"]:
            if _keep(db, f, row, q.all_leaves):
                if not q.include_docs:
                    row.pop("doc", None)
                kept.append(row)
                if q.limit is not None and len(kept) >= q.limit:
                    return {"results": kept, "last_seq": row["seq"]}
        position = page["last_seq"]
        if len(page["results"]) < _FILTER_PAGE:
            return {"results": kept, "last_seq": position}


def _keep(db: settee.Database, f: ChangesFilter, row: dict[str, Any], all_leaves: bool) -> bool:
    if f.kind == "_doc_ids":
        return row["id"] in f.doc_ids
    if f.kind == "_design":
        return row["id"].startswith("_design")
    # _selector and design functions: each revision the row reports, as a whole document.
    if f.passes is not None:
        passes = f.passes
    else:
        normal = f.selector
        passes = lambda doc: selector.matches(normal, doc)  # noqa: E731
    if not all_leaves:
        return passes(row["doc"])
    info = revs.doc_infos(db, [row["id"]]).get(row["id"])
    leaves = revtree.leaves(info.tree) if info is not None else []
    passed = [rev for rev in leaves if passes(_leaf_doc(db, row, rev))]
    row["changes"] = [{"rev": rev} for rev in passed]
    return bool(passed)


def _leaf_doc(db: settee.Database, row: dict[str, Any], rev: str) -> dict[str, Any]:
    if rev == row["doc"].get("_rev"):
        return row["doc"]
    try:
        return db.get(row["id"], rev=rev)
    except settee.NotFound:
        return {"_id": row["id"], "_rev": rev}


async def handle_changes(
    state: State, request: web.BaseRequest, lease: Lease
) -> web.StreamResponse:
    """``/{db}/_changes`` on the request's ``lease``, which a live feed gives back
    while it waits (see the module's docstring)."""
    entry = lease.entry
    body: dict[str, Any] = {}
    raw = b""
    if request.method == "POST":
        require_json_content(request.headers)
        raw = await state.read_body(request)
        if raw:
            body = await state.run(decode_object, raw)
    elif request.method not in ("GET", "HEAD"):
        raise method_not_allowed("GET,POST,HEAD")  # chttpd_db:handle_changes_req's order
    q = _parse(request.query, body, state.options["changes_timeout"], request.method)
    if q.filter is not None and q.filter.kind in ("filters", "views"):
        req = _filter_request(request, entry, body, raw)
        passes = await state.run(_resolve_filter, entry, q.filter, req)
        q = dataclasses.replace(q, filter=dataclasses.replace(q.filter, passes=passes))
    return await serve_feed(state, request, lease, q)


async def serve_feed(
    state: State, request: web.BaseRequest, lease: Lease, q: ChangesQuery
) -> web.StreamResponse:
    """The feed ``q`` asks for, of the database ``lease`` holds."""
    entry = lease.entry
    if q.feed == "normal":
        # chttpd_db's etag_respond: an ETag of the database's state (its info), so a
        # client polling an unchanged database gets 304 without the feed.
        tag = await state.run(_changes_etag, entry.db)
        if etag_matches(request.headers, tag):
            return web.Response(status=304, headers={"ETag": tag})
        # After the ETag, as chttpd_db answers 304 before fabric validates since;
        # descending starts from the update seq whatever since says (get_start_seq).
        if not q.descending:
            await state.run(_check_since, entry.db, q.since)
        page = await state.run(_page, entry.db, q, q.since)
        page.headers["ETag"] = tag
        return respond(page)
    since = q.since
    if q.feed == "eventsource" and "Last-Event-ID" in request.headers:
        # A reconnecting EventSource resumes after the last event it got (chttpd_db).
        # The id: line is the seq as JSON, quotes and all, which fabric takes off.
        since = unpacked_since(request.headers["Last-Event-ID"])
    if since == "now":
        since = (await state.run(entry.db.info))["update_seq"]
    # Checked before a live feed's headers go out: a refusal after them could only
    # cut the stream (found in review: since=garbage broke the chunked answer).
    await state.run(_check_since, entry.db, since)
    if q.feed == "longpoll":
        return await _longpoll(state, request, lease, q, since)
    return await _continuous(state, request, lease, q, since)


#: fabric_view_changes:validate_start_seq's answer to a since it cannot unpack.
MALFORMED_SINCE = "Malformed sequence supplied in 'since' parameter."


def _check_since(db: settee.Database, since: Any) -> None:
    """400 for a ``since`` this database never gave, with CouchDB's reason."""
    try:
        db.changes(since=since, limit=0)
    except settee.BadRequest:
        raise HTTPError(400, "bad_request", MALFORMED_SINCE) from None


def _descending(db: settee.Database, q: ChangesQuery) -> dict[str, Any]:
    """``descending=true``: newest change first, from the database's end whatever
    ``since`` says (couch_changes folds backwards from the update seq), ``limit``
    rows; ``last_seq`` is the last row's (the oldest shown), ``pending`` the rows
    older still. The continuous and longpoll feeds go forwards, as settee serves
    them (README, "Over HTTP")."""
    whole = read_changes(db, dataclasses.replace(q, limit=None, descending=False), "0")
    rows = whole["results"][::-1]
    shown = rows if q.limit is None else rows[: q.limit]
    last_seq = shown[-1]["seq"] if shown else whole["last_seq"]
    if q.rows is not None:  # rows shown as events: CouchDB sends no pending
        return {"results": shown, "last_seq": last_seq}
    return {"results": shown, "last_seq": last_seq, "pending": len(rows) - len(shown)}


def _changes_etag(db: settee.Database) -> str:
    info = db.info()
    # The database's identity too, as CouchDB hashes its shards' creation suffix: a
    # database deleted and created again repeats the same seqs and counts (found
    # in review: an old ETag got 304 for the new database's changes).
    identity = db.shards[0].identity.db_uuid
    state = f"{identity}/{info['update_seq']}/{info['doc_count']}/{info['doc_del_count']}"
    return etag_of(state)


def _page(db: settee.Database, q: ChangesQuery, since: Any) -> Any:
    result = read_changes(db, q, since)
    _sparse_seqs(result["results"], q)
    return reply(200, result)


async def _wait(state: State, event: asyncio.Event, seconds: float | None) -> bool:
    """True when ``event`` fired; False after ``seconds`` or when the server stops."""
    stopping = asyncio.ensure_future(state.stopping.wait())
    fired = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait(
            {stopping, fired}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stopping.cancel()
        fired.cancel()
    return fired in done and not state.stopping.is_set()


async def _lease_again(lease: Lease, incarnation: str) -> bool:
    """Take a waiting feed's lease again, to read. False, holding nothing, when its
    database is gone (deleted; or deleted and created again, whose seqs mean
    nothing to this feed) or cannot open now (``all_dbs_active``, stopping): the
    feed then ends as at its timeout, and its client resumes from ``last_seq``."""
    try:
        entry = await lease.acquire()
    except (HTTPError, settee.SetteeError):
        return False
    if entry.incarnation != incarnation:
        lease.release()
        return False
    return True


async def _longpoll(
    state: State, request: web.BaseRequest, lease: Lease, q: ChangesQuery, since: Any
) -> web.StreamResponse:
    deadline = None if q.heartbeat is not None else time.monotonic() + q.timeout
    incarnation = lease.entry.incarnation
    stream: web.StreamResponse | None = None
    while True:
        event = state.notifier.waiter(lease.name)
        result = await state.run(read_changes, lease.entry.db, q, since)
        remaining = None if deadline is None else deadline - time.monotonic()
        if (
            result["results"]
            or state.stopping.is_set()
            or (remaining is not None and remaining <= 0)
        ):
            break
        if stream is None:
            # chttpd_db:changes_callback(waiting_for_updates) sends the headers and a
            # newline as the feed starts to wait, so a client sees its 200 at once
            # (changes_async_test.exs waits for the headers before it writes).
            stream = await _start_stream(request)
            await stream.write(b"\n")
        lease.release()  # a waiting feed holds no database open
        fired = await _wait(state, event, q.heartbeat if deadline is None else remaining)
        if not fired and q.heartbeat is not None and not state.stopping.is_set():
            await stream.write(b"\n")
        if not await _lease_again(lease, incarnation):
            break
    _sparse_seqs(result["results"], q)
    payload = await state.run(encode_json, result)
    if stream is None:
        return web.Response(status=200, body=payload, headers={"Content-Type": "application/json"})
    await stream.write(payload)
    await stream.write_eof()
    return stream


async def _start_stream(
    request: web.BaseRequest,
    content_type: str = "application/json",
    headers: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    stream = web.StreamResponse(
        status=200, headers={"Content-Type": content_type, **(headers or {})}
    )
    stream.enable_chunked_encoding()
    await stream.prepare(request)
    return stream


async def _continuous(
    state: State, request: web.BaseRequest, lease: Lease, q: ChangesQuery, since: Any
) -> web.StreamResponse:
    """One JSON row per line as changes arrive, then ``{"last_seq"}`` at the timeout;
    ``feed=eventsource``: each row a server-sent event (``data:`` the row, ``id:`` its
    seq), heartbeats as ``event: heartbeat``, no closing line (chttpd_db's
    changes_callback for eventsource)."""
    events = q.feed == "eventsource"
    if events:
        stream = await _start_stream(request, "text/event-stream", {"Cache-Control": "no-cache"})
    else:
        stream = await _start_stream(request)
    sent = 0
    deadline = None if q.heartbeat is not None else time.monotonic() + q.timeout
    incarnation = lease.entry.incarnation
    while not state.stopping.is_set():
        event = state.notifier.waiter(lease.name)
        page = q if q.limit is None else _with_limit(q, q.limit - sent)
        result = await state.run(read_changes, lease.entry.db, page, since)
        since = result["last_seq"]
        if result["results"]:
            rows = result["results"]
            _sparse_seqs(rows, q, sent)
            lines = b"".join(_event(row) if events else encode_json(row) for row in rows)
            await stream.write(lines)
            sent += len(rows)
        if q.limit is not None and sent >= q.limit:
            break
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        lease.release()  # a waiting feed holds no database open
        fired = await _wait(state, event, q.heartbeat if deadline is None else remaining)
        beat = not fired and q.heartbeat is not None
        if beat and not state.stopping.is_set():
            await stream.write(b"event: heartbeat\ndata: \n\n" if events else b"\n")
        if not await _lease_again(lease, incarnation) or not (fired or beat):
            break  # gone, or timed out (leased again for the pending count below)
    if not events and q.rows is not None:
        await stream.write(encode_json({"last_seq": since}))
    elif not events:
        pending = 0  # unknown once the database is gone
        if lease.held:
            pending = await state.run(revs.changes_pending, lease.entry.db, since)
        await stream.write(encode_json({"last_seq": since, "pending": pending}))
    await stream.write_eof()
    return stream


def _event(row: dict[str, Any]) -> bytes:
    """One change as a server-sent event: its JSON as ``data``, its seq as ``id``."""
    return (
        b"data: "
        + encode_json(row).rstrip(b"\n")
        + b"\nid: "
        + encode_json(row["seq"]).rstrip(b"\n")
        + b"\n\n"
    )


def _with_limit(q: ChangesQuery, limit: int) -> ChangesQuery:
    return dataclasses.replace(q, limit=max(limit, 0))
