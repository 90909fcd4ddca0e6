"""Server and database endpoints: ``/``, ``/_all_dbs``, ``/_dbs_info``, ``/_uuids``,
``/_up``, ``/_session``, ``/_active_tasks``, ``PUT|GET|POST|DELETE /{db}``,
``_revs_limit``, ``_security``, ``_compact`` and ``_ensure_full_commit``.

The ``_all_docs`` family is ``alldocs.py``'s; ``_bulk_docs``, ``_bulk_get``,
``_revs_diff`` and ``_missing_revs`` are ``bulk.py``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiohttp import web

import settee
from settee.serve.alldocs import all_docs_query, decoded_query
from settee.serve.cluster import check_partitioned_param
from settee.serve.docs import handle_post_doc
from settee.serve.notifier import REPLICATOR_WAKE
from settee.serve.protocol import (
    HTTPError,
    db_url,
    decode_json,
    decode_object,
    etag_matches,
    etag_of,
    method_not_allowed,
    parse_integer,
    reply,
    require_json_content,
    require_method,
    respond,
)
from settee.serve.registry import DbEntry, is_replicator_db
from settee.serve.replicate import active_tasks
from settee.serve.state import State
from settee.serve.viewquery import retryable, view_signatures
from settee.spec.docids import new_docid
from settee.spec.format import FORMAT_VERSION
from settee.tokens import encode_token

__all__ = [
    "MAX_DBS_INFO_KEYS",
    "check_security",
    "db_info",
    "handle_active_tasks",
    "handle_all_dbs",
    "handle_compact",
    "handle_compact_views",
    "handle_db",
    "handle_dbs_info",
    "handle_ensure_full_commit",
    "handle_open_db",
    "handle_revs_limit",
    "handle_root",
    "handle_security",
    "handle_session",
    "handle_up",
    "handle_uuids",
]

log = logging.getLogger("settee.serve")

#: The CouchDB API version whose behaviour settee serve follows.
COUCHDB_VERSION = "3.5.0"
_MAX_UUIDS = 1000


async def handle_root(state: State, request: web.BaseRequest) -> web.StreamResponse:
    require_method(request, "GET,HEAD")
    return respond(
        reply(
            200,
            {
                "couchdb": "Welcome",
                "version": COUCHDB_VERSION,
                # chttpd_misc:handle_welcome_req names the build's commit; settee
                # names its release.
                "git_sha": f"settee-{settee.__version__}",
                "uuid": state.uuid,
                "features": [],
                "vendor": {"name": "settee", "version": settee.__version__},
            },
        )
    )


async def handle_up(state: State, request: web.BaseRequest) -> web.StreamResponse:
    require_method(request, "GET,HEAD")
    # mem3_seeds:get_status, with no seed nodes to report on.
    return respond(reply(200, {"status": "ok", "seeds": {}}))


async def handle_all_dbs(state: State, request: web.BaseRequest) -> web.StreamResponse:
    require_method(request, "GET,HEAD")
    tag = await state.run(_dbs_etag, state)
    if etag_matches(request.headers, tag):
        return web.Response(status=304, headers={"ETag": tag})
    names = await state.run(_listed_names, state, request.query)
    return respond(reply(200, names, {"ETag": tag}))


def _dbs_etag(state: State) -> str:
    """chttpd_misc:handle_all_dbs_info_req's ETag: of the shards database's info,
    which changes as databases are created and deleted (not with the query, nor
    with what the databases hold)."""
    return etag_of("\n".join(state.registry.names()))


def _listed_names(state: State, query: Mapping[str, str]) -> list[str]:
    """The database names ``_all_dbs`` lists: chttpd_misc:handle_all_dbs_info_req
    reads them as ``_all_docs`` of the shards database, so its range parameters
    apply (``startkey``/``start_key``, ``endkey``/``end_key``, ``key``,
    ``inclusive_end``, ``descending``, ``skip``, ``limit``)."""
    q = all_docs_query(decoded_query(query))
    names = state.registry.names()
    if q.descending is True:
        names.reverse()
    sign = -1 if q.descending is True else 1
    names = [
        n
        for n in names
        if (q.start is None or sign * _cmp(n, q.start) >= 0)
        and (q.end is None or sign * _cmp(n, q.end) < (1 if q.inclusive_end is True else 0))
    ]
    skip = q.skip or 0
    return names[skip:] if q.limit is None else names[skip : skip + q.limit]


def _cmp(name: str, key: Any) -> int:
    """``name`` against a JSON key in CouchDB's collation, as far as names need it:
    null, booleans and numbers sort before every string, arrays and objects after."""
    if isinstance(key, str):
        return (name > key) - (name < key)
    return -1 if isinstance(key, list | dict) else 1


#: chttpd_misc's ``max_db_number_for_dbs_info_req`` default.
MAX_DBS_INFO_KEYS = 100


async def handle_dbs_info(state: State, request: web.BaseRequest) -> web.StreamResponse:
    """``GET /_dbs_info``: every listed database's info (the ``_all_dbs`` parameters
    apply); ``POST`` ``{"keys": [...]}``: the info of each named database or a
    not_found entry (chttpd_misc:handle_dbs_info_req; server/common.rst)."""
    require_method(request, "GET,HEAD,POST")
    if request.method == "POST":
        require_json_content(request.headers)
        body = await state.run(decode_object, await state.read_body(request))
        names = _dbs_info_keys(body)
    else:
        tag = await state.run(_dbs_etag, state)
        if etag_matches(request.headers, tag):
            return web.Response(status=304, headers={"ETag": tag})
        names = await state.run(_listed_names, state, request.query)
    answers = [await _db_info_entry(state, name) for name in names]
    if request.method != "POST":  # a database deleted since it was listed is left out
        answers = [a for a in answers if "info" in a]
        return respond(reply(200, answers, {"ETag": tag}))
    return respond(reply(200, answers))


def _dbs_info_keys(body: dict[str, Any]) -> list[Any]:
    keys = body.get("keys")
    if "keys" not in body:
        raise HTTPError(400, "bad_request", "`keys` member must exist.")
    if not isinstance(keys, list):
        raise HTTPError(400, "bad_request", "`keys` member must be an array.")
    if len(keys) > MAX_DBS_INFO_KEYS:
        raise HTTPError(400, "bad_request", "too_many_keys")
    return keys


async def _db_info_entry(state: State, name: Any) -> dict[str, Any]:
    """``{"key", "info"}``, or ``{"key", "error": "not_found"}`` for whatever
    fabric:get_db_info fails on (a missing database, a bad name, not a string)."""
    try:
        if not isinstance(name, str):
            raise HTTPError(404, "not_found", "not a database name")
        # One database leased at a time: listing thousands of them opens each in
        # turn and leaves only the last max_dbs_open open.
        async with state.lease(name) as lease:
            info = await state.run(db_info, lease.entry)
    except HTTPError as exc:
        if exc.status != 404:
            raise  # all_dbs_active or stopping: no answer about this database
        return {"key": name, "error": "not_found"}
    except settee.SetteeError:
        return {"key": name, "error": "not_found"}
    return {"key": name, "info": info}


def _uuid_count(text: str) -> int:
    """``count`` as couch_httpd_misc_handlers:handle_uuids_req reads it: too large
    is checked first, and a negative or non-integer count is one bad_request."""
    count = parse_integer(text)
    if count is not None and count > _MAX_UUIDS:
        raise HTTPError(400, "bad_request", "count parameter too large")
    if count is None or count < 0:
        raise HTTPError(400, "bad_request", "count must be a positive integer")
    return count


async def handle_uuids(state: State, request: web.BaseRequest) -> web.StreamResponse:
    require_method(request, "GET")
    count = _uuid_count(request.query.get("count", "1"))
    # couch_uuids:new/0, the algorithm new document ids come from: CouchDB's
    # default "sequential" (uuids_test.exs), not random uuids.
    uuids = [new_docid() for _ in range(count)]
    # couch_httpd_misc_handlers:handle_uuids_req's cache-busting headers (a past
    # Expires on purpose) and an ETag of the answer.
    headers = {
        "Cache-Control": "no-cache",
        "Pragma": "no-cache",
        "Expires": "Mon, 01 Jan 1990 00:00:00 GMT",
        "ETag": etag_of("".join(uuids)),
    }
    return respond(reply(200, {"uuids": uuids}, headers))


# -- /{db} ------------------------------------------------------------------------------------


def db_info(entry: DbEntry) -> dict[str, Any]:
    """``GET /{db}``'s answer (fabric:get_db_info), also a design function's ``req.info``."""
    info = entry.db.info()
    return {
        "db_name": entry.name,
        "update_seq": info["update_seq"],
        "sizes": {
            "file": info["sizes"]["file"],
            "external": info["sizes"]["active"],
            "active": info["sizes"]["active"],
        },
        # fabric_db_info packs it as it packs update_seq: "<count>-<opaque>", a string
        # (api/database/common.rst: "do not rely on this string for counting").
        "purge_seq": encode_token([entry.local.purged_infos()["purge_seq"]]),
        "doc_del_count": info["doc_del_count"],
        "doc_count": info["doc_count"],
        "disk_format_version": FORMAT_VERSION,
        "compact_running": entry.compactions > 0,
        "cluster": {"q": len(entry.db.shards), "n": 1, "w": 1, "r": 1},
        "instance_start_time": "0",
        "props": {},
    }


async def handle_db(state: State, request: web.BaseRequest, name: str) -> web.StreamResponse:
    """``PUT /{db}`` (``?q=`` shards) and ``DELETE /{db}``; the other methods are
    ``handle_open_db``'s."""
    method = request.method
    if method == "PUT":
        shards = request.query.get("q")
        # ASCII digits only: str.isdigit() also says yes to "²", which int() refuses.
        if shards is not None and not (shards.isascii() and shards.isdigit() and len(shards) < 5):
            raise HTTPError(400, "bad_request", "The `q` value should be a positive integer.")
        if shards is not None and not 1 <= int(shards) <= 1024:
            raise HTTPError(400, "bad_request", "The `q` value should be from 1 to 1024.")
        copies = request.query.get("n")  # one node keeps one copy, but n is checked
        digits = copies is not None and copies.isascii() and copies.isdigit() and len(copies) < 5
        if copies is not None and not (digits and int(copies)):
            raise HTTPError(400, "bad_request", "The `n` value should be a positive integer.")
        check_partitioned_param(request.query)
        await state.run(state.registry.create, name, int(shards) if shards else None)
        state.db_events.record("created", name)
        if is_replicator_db(name):
            state.notifier.bump(REPLICATOR_WAKE)
        location = db_url(request)  # chttpd_db: "/" ++ couch_util:url_encode(DbName)
        headers = {} if location is None else {"Location": location}
        return respond(reply(201, {"ok": True}, headers))
    if method == "DELETE":
        if "rev" in request.query:
            raise HTTPError(
                400,
                "bad_request",
                "You tried to DELETE a database with a ?=rev parameter. "
                "Did you mean to DELETE a document instead?",
            )
        await state.run(state.registry.delete, name)
        state.db_events.record("deleted", name)
        state.notifier.bump(name)  # its live feeds wake, find it gone and end
        if is_replicator_db(name):
            state.notifier.bump(REPLICATOR_WAKE)  # its replications stop
        return respond(reply(200, {"ok": True}))
    async with state.lease(name) as lease:
        return await handle_open_db(state, request, lease.entry)


async def handle_open_db(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``GET /{db}`` and ``POST /{db}`` (a new document) on the open ``entry``."""
    method = request.method
    if method in ("GET", "HEAD"):
        return respond(reply(200, await state.run(db_info, entry)))
    if method == "POST":
        return await handle_post_doc(state, request, entry)
    raise method_not_allowed("DELETE,GET,HEAD,POST")  # chttpd_db:db_req's list


async def handle_revs_limit(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``GET`` the database's ``revs_limit``; ``PUT`` a positive integer to change it."""
    require_method(request, "PUT,GET")  # chttpd_db:db_req's order
    if request.method != "PUT":
        return respond(reply(200, entry.db.config["revs_limit"]))
    limit = await state.run(decode_json, await state.read_body(request))
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise HTTPError(400, "bad_request", "The revs_limit must be a positive integer.")
    await state.run(state.registry.set_revs_limit, entry, limit)
    return respond(reply(200, {"ok": True}))


async def handle_security(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``GET`` the database's security object (CouchDB 3's admin-only default until
    one is stored); ``PUT`` one with ``admins``/``members`` of ``names``/``roles``.
    Stored and returned, not enforced: settee serve has no users (every request is
    an admin's)."""
    require_method(request, "PUT,GET")  # chttpd_db:db_req's order
    if request.method != "PUT":
        return respond(reply(200, await state.run(entry.local.security)))
    value = await state.run(decode_object, await state.read_body(request))
    check_security(value)
    await state.run(entry.local.set_security, value)
    return respond(reply(200, {"ok": True}))


def check_security(value: dict[str, Any]) -> None:
    """couch_db:validate_security_object, answering 400 where CouchDB throws."""
    members = value.get("members", value.get("readers", {}))
    for group in (value.get("admins", {}), members):
        if not isinstance(group, dict):
            raise HTTPError(400, "bad_request", "admins or members must be a JSON list of strings")
        for key in ("names", "roles"):
            items = group.get(key, [])
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise HTTPError(400, "bad_request", f"{key} must be a JSON list of strings")


async def handle_session(state: State, request: web.BaseRequest) -> web.StreamResponse:
    """No users, so every request is an admin's (CouchDB's admin party): ``GET`` says
    so, ``DELETE`` logs out of nothing, and a login cannot succeed (401, as CouchDB
    answers a name it does not know)."""
    require_method(request, "GET,HEAD,POST,DELETE")
    if request.method == "POST":
        raise HTTPError(401, "unauthorized", "Name or password is incorrect.")
    if request.method == "DELETE":
        return respond(reply(200, {"ok": True}))
    session = {
        "ok": True,
        "userCtx": {"name": None, "roles": ["_admin"]},
        # couch_httpd_auth:handle_session_req adds the [chttpd_auth] database.
        "info": {"authentication_handlers": ["default"], "authentication_db": "_users"},
    }
    return respond(reply(200, session))


async def handle_active_tasks(state: State, request: web.BaseRequest) -> web.StreamResponse:
    """The replications ``POST /_replicate`` runs; no indexers run in the background,
    and compactions are quick and reported by ``compact_running`` in the database's info."""
    require_method(request, "GET,HEAD")
    return respond(reply(200, active_tasks(state)))


# -- maintenance --------------------------------------------------------------------------------


async def handle_compact(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """202 at once, as CouchDB; the compaction runs on a worker (``compact_running``)."""
    require_method(request, "POST")
    require_json_content(request.headers)
    entry.compactions += 1

    def done() -> None:
        entry.compactions -= 1

    _in_background(state, entry, entry.db.compact, done, entry.name)
    return respond(reply(202, {"ok": True}))


def _in_background(state: State, entry: DbEntry, work: Any, done: Any, what: str) -> None:
    """``work()`` on a worker after the request has its answer, then ``done()``."""
    # The compaction outlives this request: its own lease keeps the database from
    # closing under it (CouchDB's couch_db:is_idle is false while one runs).
    retained = state.registry.retain(entry)
    future = state.loop.run_in_executor(state.pool, work)
    state.background.add(future)

    def finished(f: Any) -> None:
        done()
        if retained:
            state.registry.release(entry)
        state.background.discard(f)
        if not f.cancelled() and f.exception() is not None:
            log.error("compaction of %s failed: %r", what, f.exception())

    future.add_done_callback(finished)


async def handle_compact_views(
    state: State, request: web.BaseRequest, entry: DbEntry, ddoc: str
) -> web.StreamResponse:
    """``POST /{db}/_compact/{ddoc}``: 202, or 404 when the design document is
    missing (chttpd_db:handle_compact_req). Each of its views' indexes, a settee
    database that updates append to, is compacted in the background as
    couch_mrview_compactor compacts a view group (view_compaction_test.exs: the
    index file shrinks); ``_info`` says ``compact_running`` meanwhile."""
    require_method(request, "POST")
    require_json_content(request.headers)
    doc = await state.run(entry.db.get, "_design/" + ddoc)  # NotFound: 404 missing

    def open_indexes(entry: DbEntry) -> list[Any]:
        return [state.registry.view_index(entry, sig) for sig in sorted(view_signatures(doc))]

    indexes = await state.run(retryable, open_indexes, entry)
    for index in indexes:
        index.compactions += 1

    def compact() -> None:
        for index in indexes:
            index.db.compact()

    def done() -> None:
        for index in indexes:
            index.compactions -= 1

    _in_background(state, entry, compact, done, f"{entry.name}/_design/{ddoc}")
    return respond(reply(202, {"ok": True}))


async def handle_ensure_full_commit(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """Every acknowledged write is already durable (fsync before acknowledging)."""
    require_method(request, "POST")
    require_json_content(request.headers)
    return respond(reply(201, {"ok": True, "instance_start_time": "0"}))
