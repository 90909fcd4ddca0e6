"""CouchDB's wire conventions: error bodies, JSON in and out, query parameters,
the methods a resource allows, and a write's answer (``ETag``, ``Location``).

Handlers raise ``HTTPError`` (or a settee error, mapped by ``error_reply``)
and return a ``Reply``; the app turns either into a response with CouchDB's
status code, ``{"error", "reason"}`` body and headers.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import math
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from yarl import URL

from settee.spec.errors import BadRequest, Conflict, CorruptionError, NotFound, SetteeError

__all__ = [
    "MAX_LOCATION",
    "HTTPError",
    "Reply",
    "attachment_url",
    "db_url",
    "decode_json",
    "decode_object",
    "doc_url",
    "encode_json",
    "error_reply",
    "etag",
    "etag_matches",
    "etag_of",
    "invalid_query_json",
    "method_not_allowed",
    "naming",
    "out_of_space",
    "parse_integer",
    "query_bool",
    "query_int",
    "query_json",
    "query_true",
    "reply",
    "request_url",
    "require_json_content",
    "require_method",
    "respond",
    "too_large",
    "url_encode",
    "written",
]


class HTTPError(Exception):
    """An HTTP error with CouchDB's body ``{"error": error, "reason": reason}``."""

    def __init__(
        self, status: int, error: str, reason: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(f"{status} {error}: {reason}")
        self.status = status
        self.error = error
        self.reason = reason
        self.headers = dict(headers or {})


@dataclass(frozen=True, slots=True)
class Reply:
    """A complete JSON response: status, encoded body and extra headers."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON with CouchDB's trailing newline. A str that UTF-8 cannot
    hold (a lone surrogate, say in an error message echoing a hostile key) is
    written as JSON's ``\\ud800`` escape instead of failing the answer. A value
    JSON cannot hold (an infinity a reduce reached, output of a view function
    nested past Python's recursion limit) was a 500: it is a 400 naming why."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (ValueError, RecursionError) as exc:
        what = "nests too deeply" if isinstance(exc, RecursionError) else str(exc)
        reason = f"the answer cannot be written as JSON: {what}"
        raise HTTPError(400, "bad_request", reason) from None
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    """A JSON number with a fraction or exponent; ``1e999`` (infinity) is refused,
    as NaN and Infinity are: no key or value may hold one."""
    value = float(text)
    if value in (math.inf, -math.inf):
        raise ValueError(f"{text} is out of range")
    return value


#: The deepest a JSON request body or parameter may nest: a document's 500 levels
#: (spec.docs) inside the few a request wraps it in, and far enough inside Python's
#: recursion limit for the code that reads the value, which shares it. Found
#: probing: values the parser took at 980 levels were 500s wherever they were
#: shown in an error (repr, json.dumps) or compared (``_find``, views).
MAX_JSON_DEPTH = 600


def parse_json(text: str | bytes) -> Any:
    """``json.loads`` with settee's number rules (ValueError/RecursionError on
    failure, RecursionError too past ``MAX_JSON_DEPTH``). Bytes are UTF-8 alone,
    as jiffy reads them: ``json.loads`` would also take UTF-16 and UTF-32 and skip
    a byte order mark, which CouchDB refuses as "invalid UTF-8 JSON"."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")  # UnicodeDecodeError is a ValueError
    value = json.loads(text, parse_constant=_no_constants, parse_float=_finite)
    if _brackets(text) > MAX_JSON_DEPTH and _nests_deeper(value, MAX_JSON_DEPTH):
        raise RecursionError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def _brackets(text: str | bytes) -> int:
    """How many arrays and objects ``text`` may open (a bound on its depth, counted
    at C speed so that a body with few skips the walk)."""
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")


def _nests_deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` holds arrays or objects more than ``limit`` levels deep
    (the outermost is level 1); level by level, without the recursion such a value
    exhausts, and in comprehensions, several times faster than a stack of pairs."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(limit):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
        if not level:
            return False
    return True


def decode_json(body: bytes) -> Any:
    """Parse a request body; 400 ``bad_request`` "invalid UTF-8 JSON" as CouchDB."""
    try:
        return parse_json(body)
    except ValueError:
        raise HTTPError(400, "bad_request", "invalid UTF-8 JSON") from None
    except RecursionError:  # valid JSON, which the parser cannot follow that deep
        raise HTTPError(400, "bad_request", "the JSON body nests too deeply") from None


def decode_object(body: bytes, what: str = "Request body") -> dict[str, Any]:
    value = decode_json(body)
    if not isinstance(value, dict):
        raise HTTPError(400, "bad_request", f"{what} must be a JSON object")
    return value


def reply(status: int, value: Any, headers: Mapping[str, str] | None = None) -> Reply:
    return Reply(status, encode_json(value), dict(headers or {}))


def respond(r: Reply) -> web.Response:
    """The aiohttp response for a ``Reply``."""
    headers = {"Content-Type": "application/json", **r.headers}
    return web.Response(status=r.status, body=r.body, headers=headers)


#: The status of an answer that damage on disk prevents (a flipped bit, a missing or
#: truncated file, a damaged side file): 410 Gone, "no longer available at the origin
#: server and ... likely to be permanent" (RFC 9110 15.5.11) — until the file is
#: restored. A 4xx, not CouchDB's 500 for file_corruption: a client retrying a 5xx
#: would get the same damage forever, and settee answers every request that cannot
#: succeed with a 4xx that says why (README "Over HTTP"); the body names the file.
DAMAGED = 410


def damaged(reason: str) -> HTTPError:
    """The answer for a database whose directory is damaged (``DAMAGED``, ``corruption``)."""
    return HTTPError(DAMAGED, "corruption", reason)


#: The words of the engine's refusal of a body past ``max_document_size``.
_TOO_LARGE = "above max_document_size="


def too_large(exc: BadRequest) -> bool:
    """Whether ``exc`` refuses a document body past ``max_document_size``."""
    return _TOO_LARGE in str(exc.args[0] if exc.args else "")


def naming(exc: BadRequest, doc_id: Any) -> BadRequest:
    """``exc`` with the id of the document it refuses, when it refuses its size:
    CouchDB's 413 ``document_too_large`` gives the id as its reason."""
    if too_large(exc) and isinstance(doc_id, str):
        exc.args = (*exc.args[:1], doc_id)
    return exc


def error_reply(exc: BaseException) -> Reply:
    """The CouchDB response for an exception a handler raised."""
    if isinstance(exc, HTTPError):
        return reply(exc.status, {"error": exc.error, "reason": exc.reason}, exc.headers)
    if isinstance(exc, NotFound):
        return reply(404, {"error": "not_found", "reason": exc.reason})
    if isinstance(exc, Conflict):
        return reply(409, {"error": "conflict", "reason": exc.reason})
    if isinstance(exc, BadRequest) and too_large(exc):
        # couch_doc:from_json_obj_validate's refusal: 413 naming the document, when
        # the handler said which (document_too_large), else the engine's reason.
        return reply(413, {"error": "document_too_large", "reason": exc.args[-1]})
    if isinstance(exc, BadRequest):
        # missing_stub: a stub the previous revision cannot satisfy (chttpd answers 412).
        status = 412 if exc.error == "missing_stub" else 400
        return reply(status, {"error": exc.error, "reason": str(exc)})
    if isinstance(exc, CorruptionError):
        return reply(DAMAGED, {"error": "corruption", "reason": str(exc)})
    if out_of_space(exc):
        # chttpd's insufficient_storage: the request was sound, the disk is full;
        # retry once there is room (the registry reopens a database it disabled).
        return reply(507, {"error": "insufficient_storage", "reason": str(exc)})
    if isinstance(exc, SetteeError):
        return reply(500, {"error": "unknown_error", "reason": str(exc)})
    return reply(500, {"error": "unknown_error", "reason": f"{type(exc).__name__}: {exc}"})


#: The errors of a write that found no room: the device or the user's quota is full.
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` comes of a write that found no room: an OSError with ENOSPC
    or EDQUOT, itself or anywhere along its causes (settee wraps I/O errors)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _NO_SPACE:
            return True
        current = current.__cause__ or current.__context__
    return False


def method_not_allowed(allowed: str) -> HTTPError:
    return HTTPError(
        405, "method_not_allowed", f"Only {allowed} allowed", headers={"Allow": allowed}
    )


def require_method(request: web.BaseRequest, allowed: str) -> None:
    """405 unless the request's method is one of ``allowed`` (comma-separated),
    HEAD counting as GET."""
    methods = allowed.split(",")
    if request.method not in methods and not (request.method == "HEAD" and "GET" in methods):
        raise method_not_allowed(allowed)


def etag_of(state: str) -> str:
    """A quoted ETag naming ``state`` (an md5, base64url), as couch_httpd:make_etag."""
    digest = hashlib.md5(state.encode("utf-8", "surrogatepass"), usedforsecurity=False).digest()
    return '"' + base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=") + '"'


def etag_matches(headers: Mapping[str, str], tag: str) -> bool:
    """Whether ``If-None-Match`` names ``tag``, as chttpd:etag_match reads it: a list
    split at commas and spaces, each entry's weak prefix ``W/`` dropped."""
    named = re.split(r"[, ]+", headers.get("If-None-Match", ""))
    return tag in (entry.removeprefix("W/") for entry in named)


def etag(rev: str) -> str:
    """CouchDB's ETag of a document revision: the rev, quoted."""
    return f'"{rev}"'


#: The longest ``Location`` header sent (the header-line limit of common HTTP stacks).
MAX_LOCATION = 8192


def written(
    status: int,
    result: dict[str, Any],
    location: str | None = None,
    tag: str | None = None,
    *,
    with_etag: bool = True,
) -> web.Response:
    """The answer to a document write: ``result`` with ``tag`` (by default its new
    rev) as the ``ETag`` unless not ``with_etag``, and ``location``, if given, as the
    ``Location``."""
    headers = {"ETag": etag(result["rev"]) if tag is None else tag} if with_etag else {}
    # Clients refuse longer header lines (Python's http.client above 64 KiB), which would
    # make a write of a very long id look failed. A 201 without Location names the
    # request's own URL (RFC 9110 §15.3.2), and the body carries the id.
    if location is not None and len(location) <= MAX_LOCATION:
        headers["Location"] = location
    return respond(reply(status, result, headers))


def request_url(request: web.BaseRequest, raw_path: str | None = None) -> str | None:
    """The absolute URL of the request (or of ``raw_path``, percent-encoded, on its
    host) without its query, for a ``Location``; None when the ``Host`` header names
    no URL (``x:abc``, a port that is no number). A Location is built after the
    write it names has happened: a bad Host must drop the header, not turn a
    stored write into a 500 a client would retry (found in review)."""
    try:
        url = request.url if raw_path is None else request.url.with_path(raw_path, encoded=True)
        return _forwarded(request, url.with_query(None))
    except ValueError:
        return None


def _forwarded(request: web.BaseRequest, url: URL) -> str:
    """``url`` on the host and scheme a proxy says the client used, as
    chttpd:absolute_uri builds it: ``X-Forwarded-Host`` before ``Host``, https when
    ``X-Forwarded-Ssl`` is ``on`` or ``X-Forwarded-Proto`` is ``https``
    (http_test.exs "location header should include X-Forwarded-Host")."""
    host = request.headers.get("X-Forwarded-Host")
    https = (
        request.headers.get("X-Forwarded-Ssl") == "on"
        or request.headers.get("X-Forwarded-Proto") == "https"
    )
    scheme = "https" if https else url.scheme
    if host is None:
        return str(url.with_scheme(scheme))
    origin = URL(f"{scheme}://{host}")  # ValueError for a host that names no URL
    if not origin.host or origin.raw_path not in ("", "/") or origin.query_string:
        raise ValueError(f"X-Forwarded-Host {host!r} is not a host")
    return str(origin.with_path(url.raw_path, encoded=True))


def doc_url(request: web.BaseRequest, doc_id: str) -> str | None:
    """The absolute URL of ``doc_id`` in the request's database (``request_url``),
    as chttpd_db builds a write's Location: the database name and the id each
    through couch_util:url_encode, every slash included (``_design%2Fname``, so
    a/b cannot name attachment b of a), whatever spelling the request used."""
    return request_url(request, f"/{_database_part(request)}/{url_encode(doc_id)}")


def attachment_url(request: web.BaseRequest, doc_id: str, name: str) -> str | None:
    """The absolute URL of attachment ``name`` of ``doc_id``, as chttpd_db's
    attachment PUT builds its Location: the id and the name each through
    couch_util:url_encode, every slash included (``request_url``)."""
    return request_url(
        request, f"/{_database_part(request)}/{url_encode(doc_id)}/{url_encode(name)}"
    )


def db_url(request: web.BaseRequest) -> str | None:
    """The absolute URL of the request's database, as chttpd_db's create answers
    it: ``"/" ++ couch_util:url_encode(DbName)``."""
    return request_url(request, f"/{_database_part(request)}")


def _database_part(request: web.BaseRequest) -> str:
    """The request's database name (the first path segment that is not empty, as
    the router reads ``//db//doc``), decoded and then couch_util:url_encode'd."""
    raw = next((part for part in request.rel_url.raw_path.split("/") if part), "")
    return url_encode(urllib.parse.unquote(raw, errors="surrogatepass"))


def url_encode(text: str) -> str:
    """couch_util:url_encode: each UTF-8 byte but ASCII letters, digits and ``_.-:``
    as ``%XX`` (upper case)."""
    data = text.encode("utf-8", "surrogatepass")
    return "".join(
        chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "_.-:") else f"%{b:02X}"
        for b in data
    )


def require_json_content(headers: Mapping[str, str]) -> None:
    """415 unless the request says ``Content-Type: application/json`` (chttpd's
    ``validate_ctype``, applied where CouchDB applies it): the type before any ``;``
    exactly, as couch_httpd compares it (``Application/JSON`` is refused there)."""
    ctype = headers.get("Content-Type", "")
    if ctype.split(";", 1)[0] != "application/json":
        raise HTTPError(415, "bad_content_type", "Content-Type must be application/json")


def query_bool(query: Mapping[str, str], name: str, default: bool = False) -> bool:
    value = query.get(name)
    if value is None:
        return default
    if value.lower() in ("true", "false"):  # couch_httpd's parse_boolean lower-cases
        return value.lower() == "true"
    raise HTTPError(
        400, "query_parse_error", f"Invalid boolean parameter {name}={value!r}: use true or false"
    )


#: What Erlang's ``list_to_integer`` (CouchDB's query parser) takes: ASCII digits
#: with an optional sign. Python's ``int`` also takes ``1_000``, spaces and other
#: scripts' digits; the length bound is ``int``'s own (a longer one is refused).
_INTEGER = re.compile(r"[+-]?[0-9]{1,4300}")


def parse_integer(value: str) -> int | None:
    """``value`` as CouchDB parses an integer query parameter, or None."""
    return int(value) if _INTEGER.fullmatch(value) else None


def query_true(query: Mapping[str, str], name: str) -> bool:
    """A flag as chttpd_db's document and ``_changes`` parsers read it
    (parse_doc_query, parse_changes_query): on for the value "true" alone, any other
    ignored (``revs=TRUE``, ``include_docs=1``), where a view's refuses one
    (couch_mrview_http:parse_boolean, ``query_bool``)."""
    return query.get(name) == "true"


def query_int(query: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    value = query.get(name)
    if value is None:
        return default
    number = parse_integer(value)
    if number is None or number < 0:
        raise HTTPError(
            400, "query_parse_error", f"Invalid value for {name}: {value!r}, expected an int >= 0"
        )
    return number


def query_json(query: Mapping[str, str], name: str) -> Any:
    """A JSON-encoded query parameter (``startkey="a"``); None when absent."""
    value = query.get(name)
    if value is None:
        return None
    try:
        return parse_json(value)
    except json.JSONDecodeError:
        raise invalid_query_json(name, value) from None
    except (ValueError, RecursionError):  # JSON, but no value a key can be (1e999, NaN)
        raise HTTPError(
            400, "query_parse_error", f"Invalid JSON in {name}={value!r}: quote strings"
        ) from None


def invalid_query_json(name: str, value: str) -> HTTPError:
    """What a query parameter that is not JSON at all answers: chttpd:catch_error's
    ``{invalid_json, _}`` clause (view_errors_test.exs: ``_all_docs?startkey=foo``
    is ``bad_request``), its reason first."""
    return HTTPError(
        400, "bad_request", f"invalid UTF-8 JSON: {name}={value!r} is not JSON (quote strings)"
    )
