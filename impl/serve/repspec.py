"""What a ``POST /_replicate`` body asks for: endpoints, options, and the replication id.

Read as CouchDB 3.5's ``couch_replicator_parse`` reads it, with no request made:
endpoints are http(s) URLs only (a string, or ``{"url", "headers"}``); a bare
database name is refused (``local_endpoints_not_supported``), as CouchDB 3 does.
Options of the wrong type are 400 ``bad_request`` naming the option; unknown
options are ignored, as CouchDB skips them.

The replication id (``couch_replicator_ids``, version 4) is an md5 over the
server's uuid, each endpoint's user, host, non-default port, path and extra
headers (never a password: changing it keeps the checkpoints), and the filter:
the user filter's *code* with its query parameters, the ``doc_ids``, or the
normalised selector. ``+continuous`` and ``+create_target`` are appended to it
to name the job (``_local_id``); the checkpoint documents are ``_local/<base>``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from settee.httpclient import Server
from settee.serve.protocol import HTTPError
from settee.spec import selector as mango
from settee.spec.errors import SetteeError

__all__ = [
    "REP_ID_VERSION",
    "Endpoint",
    "Spec",
    "parse_endpoint",
    "parse_spec",
    "quote_id",
    "replication_id",
    "replicator_doc_refusal",
    "user_filter",
    "without_password",
]

#: couch_replicator.hrl's ?REP_ID_VERSION: answered as ``replication_id_version``.
REP_ID_VERSION = 4
#: Ports couch_replicator_ids leaves out of the id (``get_non_default_port``).
_DEFAULT_PORTS = {("http", 80), ("https", 443), ("http", 5984)}
_BOOLEANS = ("cancel", "create_target", "winning_revs_only", "continuous", "use_bulk_get")
_OBJECTS = {
    "create_target_params": "a JSON object",
    "query_params": "an object",
    "selector": "a JSON object",
}
#: Numeric options (couch_util:to_integer: an integer, or a string of one), defaults.
_INTEGERS = {
    "worker_batch_size": 500,
    "connection_timeout": 30000,
    "checkpoint_interval": 30000,
    "retries_per_request": 5,
}
_EXCLUSIVE = "`doc_ids`,`filter`,`selector` are mutually exclusive"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One side of a replication: where its requests go and how it is named."""

    server: Server
    #: The URL without its password, with a trailing slash (couch_replicator_api_wrap:db_uri).
    uri: str
    #: What the replication id takes from it (user, host, port, path, headers).
    identity: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Spec:
    """A parsed request body; ``extra`` holds the options as CouchDB names them."""

    source: Endpoint | None
    target: Endpoint | None
    cancel: bool
    #: The job named by ``replication_id``/``_local_id``/``id`` (cancel by id).
    job_id: str | None
    continuous: bool
    create_target: bool
    create_target_params: tuple[tuple[str, Any], ...]
    doc_ids: tuple[str, ...] | None
    filter: str | None
    query_params: tuple[tuple[str, Any], ...]
    selector: Any
    since_seq: Any
    use_checkpoints: bool
    winning_revs_only: bool
    use_bulk_get: bool
    batch_size: int
    timeout: float
    retries: int
    checkpoint_interval: float


def parse_spec(body: dict[str, Any]) -> Spec:
    """The replication ``body`` asks for; HTTPError 400 for what CouchDB refuses."""
    for name in _BOOLEANS:
        if name in body and not isinstance(body[name], bool):
            raise _bad(f"parameter `{name}` must be a boolean")
    for name, kind in _OBJECTS.items():
        if name in body and not isinstance(body[name], dict):
            raise _bad(f"parameter `{name}` must be {kind}")
    _check_query_params(body.get("query_params", {}))
    doc_ids = _doc_ids(body.get("doc_ids"))
    filter_name = body.get("filter")
    chosen = [doc_ids is not None, filter_name is not None, "selector" in body]
    if sum(chosen) > 1:
        raise _bad(_EXCLUSIVE)
    if filter_name is not None and not isinstance(filter_name, str):
        raise _bad("parameter `filter` must be a string")
    for name in ("proxy", "source_proxy", "target_proxy"):
        if body.get(name) not in (None, ""):
            # Sending the requests straight to the endpoint instead would be a surprise.
            raise _bad(f"parameter `{name}`: settee serve replicates without proxies")
    job_id = _job_id(body)
    cancel_by_id = body.get("cancel") is True and job_id is not None
    numbers = {name: _integer(body, name, default) for name, default in _INTEGERS.items()}
    return Spec(
        source=None if cancel_by_id else parse_endpoint(body.get("source")),
        target=None if cancel_by_id else parse_endpoint(body.get("target")),
        cancel=body.get("cancel") is True,
        job_id=job_id,
        continuous=body.get("continuous") is True,
        create_target=body.get("create_target") is True,
        create_target_params=tuple(sorted(body.get("create_target_params", {}).items())),
        doc_ids=doc_ids,
        filter=_checked_filter(filter_name, body),
        query_params=tuple(sorted(body.get("query_params", {}).items())),
        selector=_checked_selector(body),
        since_seq=body.get("since_seq"),
        # couch_replicator_scheduler_job only turns checkpoints off for `false`.
        use_checkpoints=body.get("use_checkpoints") is not False,
        winning_revs_only=body.get("winning_revs_only") is True,
        use_bulk_get=body.get("use_bulk_get") is not False,
        batch_size=max(1, numbers["worker_batch_size"]),
        # Within what a socket timeout can hold, and no longer than a one-shot may wait.
        timeout=min(max(1, numbers["connection_timeout"]), 3_600_000) / 1000,
        checkpoint_interval=max(0, numbers["checkpoint_interval"]) / 1000,
        # Bounded, so a server that is gone ends the job within a minute or so of waits.
        retries=min(max(0, numbers["retries_per_request"]), 8),
    )


def replicator_doc_refusal(doc: dict[str, Any]) -> HTTPError | None:
    """A ``_replicator`` database's check of a document about to be written
    (couch_replicator_docs:before_doc_update): 403 ``forbidden`` when it does not
    describe a replication, with the reason the parse gives. Design and ``_local``
    documents, deletions and documents already marked ``failed`` are not checked."""
    doc_id = doc.get("_id")
    if not isinstance(doc_id, str) or doc_id.startswith(("_design/", "_local/")):
        return None
    if doc.get("_deleted") is True or doc.get("_replication_state") == "failed":
        return None
    try:
        parse_spec(replication_fields(doc))
    except HTTPError as exc:
        return HTTPError(403, "forbidden", exc.reason)
    return None


def replication_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """A ``_replicator`` document's body as a replication request: without its
    ``_``-fields (its id, revision and the replicator's own state fields)."""
    return {k: v for k, v in doc.items() if not k.startswith("_")}


def _bad(reason: str) -> HTTPError:
    return HTTPError(400, "bad_request", reason)


def _check_query_params(params: Any) -> None:
    # couch_replicator_httpd_util:validate_rep_props: they become a query string.
    for key, value in params.items():
        if not isinstance(value, str):
            raise _bad(f"{key} value must be a string.")


def _doc_ids(value: Any) -> tuple[str, ...] | None:
    """CouchDB's ``doc_ids``: null is none; each id percent-decoded (the old
    replicator took encoded ids), sorted and unique."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise _bad("parameter `doc_ids` must be an array")
    if not all(isinstance(doc_id, str) for doc_id in value):
        raise _bad("parameter `doc_ids` must be an array of strings")
    return tuple(sorted({unquote(doc_id) for doc_id in value}))


def _job_id(body: dict[str, Any]) -> str | None:
    # couch_replicator_ids:convert: a "+" the URL decoding made a space is a "+" again.
    for name in ("_local_id", "replication_id", "id"):
        value = body.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise _bad(f"parameter `{name}` must be a string")
            return value.replace(" ", "+")
    return None


def _integer(body: dict[str, Any], name: str, default: int) -> int:
    value = body.get(name, default)
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"parameter `{name}` must be an integer")
    return value


def _checked_filter(name: str | None, body: dict[str, Any]) -> str | None:
    if name is None or name.startswith("_"):
        if name == "_view" and not _view_param(body):
            raise _bad("Invalid `view` parameter.")
        return name
    if "/" not in name:
        raise _bad("Invalid filter. Must match `ddocname/filtername`.")
    return name


def _view_param(body: dict[str, Any]) -> bool:
    view = body.get("query_params", {}).get("view")
    return isinstance(view, str) and len(view.split("/")) == 2


def _checked_selector(body: dict[str, Any]) -> Any:
    if "selector" not in body:
        return None
    try:
        mango.normalize(body["selector"])
    except mango.BadSelector as exc:
        raise HTTPError(400, exc.error, str(exc)) from None
    return body["selector"]


# -- endpoints ----------------------------------------------------------------------------------


def parse_endpoint(value: Any) -> Endpoint:
    """An http(s) URL, or ``{"url", "headers"}``; 400 for anything else."""
    if value is None:
        raise _bad("Missing replicator database")
    if isinstance(value, str):
        if not value.startswith(("http://", "https://")):
            # CouchDB 3 refuses a bare database name (its reply is a 500 "error"
            # whose reason is this; a request the server cannot take is a 400 here).
            raise _bad("local_endpoints_not_supported")
        return _endpoint(value, {})
    if isinstance(value, dict):
        url, headers = value.get("url"), value.get("headers", {})
        if not isinstance(url, str) or not isinstance(headers, dict):
            raise HTTPError(400, "invalid_replication", "endpoint has an invalid url")
        if not all(isinstance(v, str) for v in headers.values()):
            raise _bad("endpoint headers must be strings")
        return _endpoint(url, {**headers, **_basic_auth(value.get("auth"))})
    raise _bad("the source and target must be a URL or an object with a `url`")


def _basic_auth(auth: Any) -> dict[str, str]:
    """CouchDB 3's ``"auth": {"basic": {"username", "password"}}``, as a header."""
    if auth is None:
        return {}
    basic = auth.get("basic") if isinstance(auth, dict) else None
    user = basic.get("username") if isinstance(basic, dict) else None
    password = basic.get("password") if isinstance(basic, dict) else None
    if not isinstance(user, str) or not isinstance(password, str):
        raise _bad('endpoint `auth` must be {"basic": {"username", "password"}}')
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": "Basic " + token}


def _endpoint(url: str, headers: dict[str, str]) -> Endpoint:
    try:
        server = Server.from_url(url)
    except (SetteeError, ValueError):  # urlsplit's ValueError: "http://[::1", say
        raise HTTPError(400, "invalid_replication", "endpoint has an invalid url") from None
    # Given headers win over the URL's (couch_replicator_utils:normalize_basic_auth).
    extra = tuple((name, value) for name, value in sorted(headers.items()))
    given = {name.lower() for name, _ in extra}
    kept = tuple(h for h in server.headers if h[0].lower() not in given)
    server = dataclasses.replace(server, headers=kept + extra)
    parts = urlsplit(url)
    port = server.port
    if port is not None and (server.scheme, port) in _DEFAULT_PORTS:
        port = None
    path = (parts.path or "/").rstrip("/") + "/"
    plain = tuple(h for h in extra if h[0].lower() != "authorization")
    user = _basic_user(dict(server.headers).get("Authorization"))
    identity = ("remote", user, server.host, port, path, plain)
    return Endpoint(server, without_password(url), identity)


def _basic_user(authorization: str | None) -> str | None:
    """The user a Basic ``Authorization`` names (from the URL or ``auth``), which the
    replication id takes (couch_replicator_utils:get_basic_auth_creds)."""
    if authorization is None or not authorization.startswith("Basic "):
        return None
    try:
        decoded = base64.b64decode(authorization[len("Basic ") :], validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    return decoded.split(":", 1)[0]


def without_password(url: str) -> str:
    """couch_util:url_strip_password, and the trailing slash CouchDB adds."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(":" + parts.password + "@", ":*****@", 1)
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return f"{parts.scheme}://{netloc}{path}"


# -- the replication id -------------------------------------------------------------------------


def user_filter(spec: Spec) -> tuple[str, str] | None:
    """``(design document id, filter name)`` of a ``ddoc/name`` filter, else None."""
    if spec.filter is None or spec.filter.startswith("_"):
        return None
    ddoc, name = spec.filter.split("/", 1)
    return "_design/" + ddoc, name


def replication_id(spec: Spec, server_uuid: str, filter_code: str | None) -> tuple[str, str]:
    """``(base, extension)``: the checkpoints are ``_local/<base>``, the job is
    ``base + extension``. ``filter_code`` is the user filter's source, fetched
    from the source, so a changed filter starts over (COUCHDB-892)."""
    assert spec.source is not None and spec.target is not None  # not a cancel by id
    parts: list[Any] = [server_uuid, spec.source.identity, spec.target.identity]
    if filter_code is not None:
        parts += [filter_code, dict(spec.query_params)]
    elif spec.filter is not None:
        parts += [spec.filter, dict(spec.query_params)]
    elif spec.doc_ids is not None:
        parts.append(list(spec.doc_ids))
    elif spec.selector is not None:
        parts.append(spec.selector)
    if spec.winning_revs_only:
        parts.append("winning_revs_only")
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=list)
    base = hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()
    ext = "+continuous" if spec.continuous else ""
    ext += "+create_target" if spec.create_target else ""
    return base, ext


def quote_id(doc_id: str) -> str:
    """A document id as a path segment; ``_design/`` and ``_local/`` keep their
    slash (a GET of ``_design%2Fx`` is a redirect, which no replicator follows)."""
    for prefix in ("_design/", "_local/"):
        if doc_id.startswith(prefix):
            return prefix + quote(doc_id[len(prefix) :], safe="")
    return quote(doc_id, safe="")
