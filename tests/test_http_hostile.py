"""A client that sends what no client should: settee serve answers 4xx, never 500.

Hypothesis draws hostile database names, query values and JSON bodies (unicode
digits, control characters, a trailing newline, numbers past 64 bits, lone
surrogates, invalid UTF-8 in the URL) for the endpoints that take them, and
checks every answer: below 500, a CouchDB error body when it is an error, the
server still serving afterwards, and no directory on disk whose name breaks
CouchDB's database-name rule (issue 15, "a server bad clients cannot break").
"""

from __future__ import annotations

import http.client
import json
import os
import re
import urllib.parse
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from settee.serve import start_server

#: CouchDB's rule for database names (couch_db:validatename), matched whole.
DB_NAME = re.compile(r"[a-z][a-z0-9_$()+/-]*")
#: couch_db.hrl's SYSTEM_DATABASES, which a database may also be named.
SYSTEM_DBS = {"_dbs", "_global_changes", "_metadata", "_nodes", "_replicator", "_users"}


def is_db_name(name: str) -> bool:
    """couch_db:validate_dbname, written apart from the server's so both must agree."""
    prefix, slash, base = name.rpartition("/")
    system = base in SYSTEM_DBS and (not slash or DB_NAME.fullmatch(prefix) is not None)
    return len(name) <= 238 and (DB_NAME.fullmatch(name) is not None or system)


#: What the server itself keeps beside the databases (settee.serve.local).
_SERVER_OWN = {"_local", "_views"}

_NASTY_TEXT = st.sampled_from(
    [
        "²",  # a unicode digit: str.isdigit() says yes, int() says no
        "٣",
        "1\n",
        "a\n",
        "\x00",
        "9223372036854775808",
        "-1",
        "1" * 5000,
        "1e3",
        "true",
        " 1",
        "",
    ]
)
_RAW_QUERY = st.one_of(
    _NASTY_TEXT.map(lambda s: urllib.parse.quote(s, safe="")),
    st.sampled_from(["%ED%A0%80", "%FF", "%C2", "%00", "%0A"]),  # invalid UTF-8, NUL, LF
)
_DB_NAME = st.one_of(
    _NASTY_TEXT.map(lambda s: "a" + s),
    _NASTY_TEXT,
    st.sampled_from(
        ["A", "a%0A", "a%0Ab", "a%00", "..", "a/..", "a%2F..%2F..", "_users2", "_users", "/_users"]
    ),
)
_QUERY_ENDPOINTS = [
    ("GET", "/_all_dbs?{k}={v}", ["startkey", "endkey", "limit", "skip", "descending"]),
    ("PUT", "/{db}?{k}={v}", ["q", "n"]),
    ("GET", "/{db}/_all_docs?{k}={v}", ["limit", "skip", "startkey", "keys", "descending"]),
    ("GET", "/{db}/_design_docs?{k}={v}", ["limit", "skip", "startkey", "endkey", "descending"]),
    ("GET", "/{db}/_local_docs?{k}={v}", ["limit", "skip", "startkey", "keys", "include_docs"]),
    ("GET", "/{db}/_changes?{k}={v}", ["since", "limit", "heartbeat", "timeout", "style"]),
    # Live feeds refuse before their headers go out (found in review: a bad since on
    # a continuous feed came after the chunked headers and cut the answer).
    ("GET", "/{db}/_changes?feed=continuous&timeout=1&{k}={v}", ["since", "limit", "style"]),
    ("GET", "/{db}/_changes?feed=eventsource&timeout=1&{k}={v}", ["since", "descending"]),
    ("GET", "/{db}/_changes?feed=longpoll&timeout=1&{k}={v}", ["since", "include_docs"]),
    ("GET", "/{db}/doc?{k}={v}", ["rev", "revs", "open_revs", "latest", "conflicts"]),
    ("PUT", "/{db}/doc?{k}={v}", ["new_edits", "rev", "batch"]),
    (
        "GET",
        "/{db}/_design/v/_view/v?{k}={v}",
        ["key", "keys", "startkey", "endkey", "limit", "skip", "group_level", "reduce", "stale"],
    ),
    ("GET", "/{db}/_design/v/_view/m?{k}={v}", ["group", "include_docs", "startkey_docid"]),
    ("GET", "/{db}/_design/v/_view/r?{k}={v}", ["key", "keys", "startkey", "endkey"]),
    ("GET", "/{db}/_design/v/_list/l/v?{k}={v}", ["keys", "startkey", "limit", "group_level"]),
    ("GET", "/{db}/_design/v/_show/s/doc?{k}={v}", ["format", "rev"]),
    ("GET", "/{db}/_design/v/_show/p/{v}?{k}=html", ["format"]),
    ("GET", "/_scheduler/docs?{k}={v}", ["states", "limit", "skip"]),
    ("GET", "/_scheduler/docs/_replicator/{v}?{k}=1", ["states"]),
]
_BAD_JSON_VALUES = st.sampled_from(
    [
        '"\\ud800"',
        '"a\\udfffb"',
        "1" * 5000,
        "1e400",
        "NaN",
        "-Infinity",
        "[" * 5000 + "]" * 5000,
        '{"_rev": "1-' + "1" * 40 + '"}',
    ]
)


class _Client:
    def __init__(self, port: int) -> None:
        self.port = port

    def __call__(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            headers = headers or {"Content-Type": "application/json"}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[_Client, Path]]:
    root = tmp_path_factory.mktemp("hostile")
    handle = start_server(str(root), "127.0.0.1", 0, fsync=False)
    client = _Client(handle.port)
    assert client("PUT", "/target")[0] == 201
    assert client("PUT", "/target/doc", b'{"v": 1}')[0] == 201
    assert client("PUT", "/_replicator")[0] == 201
    views = {
        "v": {"map": "function(doc) { emit([doc.v, doc._id], doc.v); }", "reduce": "_stats"},
        "m": {"map": "function(doc) { emit(doc._id, {_id: 'doc'}); }"},
        # The raw collation's keys (spec.collation.raw_sort_key) of hostile ranges too.
        "r": {
            "map": "function(doc) { emit([doc.v, doc._id], 1); }",
            "options": {"collation": "raw"},
        },
    }
    design = {
        "views": views,
        "lists": {"l": "function(h, req) { var r; while (r = getRow()) send(toJSON(r)); }"},
        "shows": {
            "s": "function(doc, req) { return {json: [doc, req.query]}; }",
            "p": "function(doc, req) { provides('html', function() { return toJSON(doc); }); }",
        },
    }
    assert client("PUT", "/target/_design/v", json.dumps(design).encode())[0] == 201
    yield client, root
    handle.stop()


def _send(client: _Client, root: Path, method: str, path: str, body: bytes | None = None) -> None:
    """Send one hostile request and check the answer and what it left on disk."""
    what = f"{method} {path} {(body or b'')[:80]!r}"
    before = {entry.name for entry in root.iterdir()}
    status, raw = client(method, path, body)
    assert status < 500, f"{what} -> {status} {raw[:300]!r}"
    if status >= 400 and raw:
        answer = json.loads(raw)
        assert set(answer) >= {"error", "reason"}, (what, answer)
    created = {entry.name for entry in root.iterdir()} - before - _SERVER_OWN
    for name in created:
        assert is_db_name(name.replace("%2F", "/")), f"{what} created {name!r}"
    assert client("GET", "/target/doc")[0] == 200, f"server stopped serving after {what}"


_HOSTILE = settings(
    max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@_HOSTILE
@given(name=_DB_NAME, method=st.sampled_from(["PUT", "GET", "DELETE"]))
def test_hostile_database_names_are_4xx_and_create_nothing_invalid(
    served: tuple[_Client, Path], name: str, method: str
) -> None:
    client, root = served
    path = "/" + (name if "%" in name else urllib.parse.quote(name, safe=""))
    _send(client, root, method, path)


@_HOSTILE
@given(endpoint=st.sampled_from(_QUERY_ENDPOINTS), data=st.data(), value=_RAW_QUERY)
def test_hostile_query_values_are_4xx(
    served: tuple[_Client, Path], endpoint: tuple[str, str, list[str]], data: Any, value: str
) -> None:
    client, root = served
    method, template, keys = endpoint
    _send_query(client, root, method, template, data.draw(st.sampled_from(keys)), value)


def _send_query(
    client: _Client, root: Path, method: str, template: str, key: str, value: str
) -> None:
    """``template`` with ``key`` set to ``value``, sent and checked (``_send``): on
    the target database when it only reads, else on a fresh one, deleted after."""
    db = "target" if method == "GET" or "doc" in template else "fresh"
    path = template.format(db=db, k=key, v=value)
    body = b'{"v": 2}' if method == "PUT" and "doc" in template else None
    _send(client, root, method, path, body)
    if db == "fresh":
        client("DELETE", "/fresh")


#: Numbers every integer query parameter must refuse or take, never a 500: past
#: Python's int() limit of 4,300 digits, past 64 bits, negative, not integers.
_NASTY_NUMBERS = ["9" * 5000, "0" * 4301 + "1", str(2**63), "-1", "1e400", "NaN", "-0"]


_NUMBER_ENDPOINTS = [
    *_QUERY_ENDPOINTS,
    # Found probing: int() of 5,000 digits was a 500 in global_changes' parser.
    ("GET", "/_db_updates?{k}={v}", ["limit", "heartbeat", "timeout", "since"]),
]


@pytest.mark.parametrize(
    ("method", "template", "keys"),
    _NUMBER_ENDPOINTS,
    ids=[f"{method} {template}" for method, template, _ in _NUMBER_ENDPOINTS],
)
def test_nasty_numbers_in_every_query_key_are_4xx(
    served: tuple[_Client, Path], method: str, template: str, keys: list[str]
) -> None:
    """Every key of every endpoint above with each nasty number, not left to draws:
    the property test above meets a given pair once in hundreds of examples."""
    client, root = served
    for key in keys:
        for value in _NASTY_NUMBERS:
            _send_query(client, root, method, template, key, value)


@_HOSTILE
@given(
    where=st.sampled_from(["/target/_local/l", "/target/d", "/target/_bulk_docs"]),
    value=_BAD_JSON_VALUES,
)
def test_hostile_json_values_are_4xx(served: tuple[_Client, Path], where: str, value: str) -> None:
    client, root = served
    doc = '{"v": ' + value + "}"
    body = ('{"docs": [' + doc + "]}") if where.endswith("_bulk_docs") else doc
    method = "POST" if where.endswith("_bulk_docs") else "PUT"
    _send(client, root, method, where, body.encode())


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32-be", "utf-8-sig"])
def test_json_not_in_utf8_is_invalid(served: tuple[_Client, Path], encoding: str) -> None:
    """Found probing: a body in UTF-16 or UTF-32, or UTF-8 after a byte order mark,
    was stored (``json.loads`` detects them); jiffy reads UTF-8 alone, so CouchDB
    answers 400 "invalid UTF-8 JSON" and stores nothing."""
    client, _root = served
    for method, where, body in [
        ("PUT", "/target/utf", '{"v": "\u00e9"}'),
        ("PUT", "/target/_local/utf", '{"v": 1}'),
        ("POST", "/target/_bulk_docs", '{"docs": [{"_id": "utf"}]}'),
    ]:
        status, raw = client(method, where, body.encode(encoding))
        assert (status, json.loads(raw)["reason"]) == (400, "invalid UTF-8 JSON"), where
        assert client("GET", "/target/_local/utf" if "_local" in where else "/target/utf")[0] == 404


_JSON_ANY = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_BODY_ENDPOINTS = [
    ("POST", "/target/_find", "selector"),
    ("POST", "/target/_find", "fields"),
    ("POST", "/target/_find", "sort"),
    ("POST", "/target/_find", "bookmark"),
    ("POST", "/target/_find", "limit"),
    ("PUT", "/target/_security", None),
    ("PUT", "/target/_security", "members"),
    ("POST", "/target/_all_docs", "keys"),
    ("POST", "/target/_local_docs", "keys"),
    ("POST", "/target/_design_docs", "startkey"),
    ("POST", "/target/_bulk_get", "docs"),
    ("POST", "/target/_revs_diff", None),
    ("POST", "/target/_changes?filter=_doc_ids", "doc_ids"),
    ("POST", "/target/_bulk_docs", "docs"),
    ("POST", "/target/_bulk_docs", "new_edits"),
    ("POST", "/target", None),
    ("PUT", "/target/_local/h", None),
    ("PUT", "/target/d2", "_revisions"),
    ("PUT", "/target/d3", "_deleted"),
    ("DELETE", "/target/doc?rev={v}", None),
    ("POST", "/target/_index", "index"),
    ("POST", "/target/_index", None),
    ("POST", "/target/_find", "use_index"),
    ("POST", "/target/_explain", "selector"),
    ("POST", "/target/_explain", "sort"),
    # A _replicator database's documents must describe a replication (403 otherwise).
    ("PUT", "/_replicator/r", None),
    ("PUT", "/_replicator/r", "source"),
    ("PUT", "/_replicator/r", "doc_ids"),
    ("POST", "/_replicator/_bulk_docs", "docs"),
]


@_HOSTILE
@given(endpoint=st.sampled_from(_BODY_ENDPOINTS), value=_JSON_ANY)
def test_hostile_request_bodies_are_4xx(
    served: tuple[_Client, Path], endpoint: tuple[str, str, str | None], value: Any
) -> None:
    """Any JSON where the endpoint expects a particular shape: a field of the wrong
    type, a number past 64 bits, nesting where a string belongs."""
    client, root = served
    method, path, field = endpoint
    if "{v}" in path:
        path = path.format(v=urllib.parse.quote(json.dumps(value), safe=""))
        body = None
    else:
        body = json.dumps(value if field is None else {field: value}).encode()
    _send(client, root, method, path, body)


_DEEP_FIELDS = [
    *_BODY_ENDPOINTS,
    *[("POST", "/target/_find", field) for field in ("skip", "r", "conflicts", "execution_stats")],
    *[("POST", "/target/_design/v/_view/v", f) for f in ("limit", "group_level", "keys", "stale")],
    ("POST", "/target/_design/v/_view/v/queries", "queries"),
    ("POST", "/target/_all_docs", "limit"),
    ("PUT", "/target/_revs_limit", None),
]


@pytest.mark.parametrize(
    ("method", "path", "field"),
    _DEEP_FIELDS,
    ids=[f"{method} {path} {field}" for method, path, field in _DEEP_FIELDS],
)
def test_json_nested_near_the_recursion_limit_is_4xx(
    served: tuple[_Client, Path], method: str, path: str, field: str | None
) -> None:
    """Found probing: a value nested 980 levels deep, which the JSON parser still
    reads, was a 500 (RecursionError) wherever it was shown in an error (a bad
    ``limit``, ``fields`` or sort direction of ``_find``, a view parameter) or
    compared; every endpoint and field, at depths from a document's limit to past
    the parser's."""
    client, root = served
    for depth in (499, 600, 601, 900, 980, 985, 990, 5000):
        value = "[" * depth + "1" + "]" * depth
        if "{v}" in path:
            _send(client, root, method, path.format(v=urllib.parse.quote(value)))
            continue
        body = value if field is None else '{"' + field + '": ' + value + "}"
        if path.endswith(("_find", "_explain")) and field != "selector":
            body = '{"selector": {"v": 1}, ' + body[1:]  # else refused before the field
        _send(client, root, method, path, body.encode())


# Mango selectors: every operator (valid, unsupported, unknown), dotted, escaped, empty
# and array-index field names, any JSON as arguments, nested combinations.
_MANGO_KEY = st.sampled_from(
    [
        *("$and", "$or", "$nor", "$not", "$eq", "$ne", "$lt", "$gte", "$in", "$nin", "$all"),
        *("$mod", "$size", "$regex", "$type", "$exists", "$elemMatch", "$allMatch"),
        *("$keyMapMatch", "$beginsWith", "$where", "$text", "$bogus"),
        *("a", "a.b", "a\\.b", "", ".", "a..b", "b.0", "b.-1", "b.99", "_id", "v"),
        "b." + "9" * 5000,  # int() of it raised (found in review)
    ]
)
_SELECTOR = st.dictionaries(
    _MANGO_KEY,
    st.recursive(
        _JSON_ANY,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(_MANGO_KEY, inner, max_size=3)
        ),
        max_leaves=12,
    ),
    max_size=3,
)
_MANGO_DOCS = [
    {"a": {"b": [1, "x", {"c": None}]}, "b": [3, 2.5, "s"], "v": "Text"},
    {"a": 5, "b": {"0": True}, "a.b": -(2**70), "v": [[], {}]},
]


@_HOSTILE
@given(selector=_SELECTOR, where=st.sampled_from(["changes", "find", "indexed find"]))
@example(selector={"b." + "9" * 5000: 1}, where="find")  # the review's find, not left to luck
def test_hostile_selectors_are_4xx(
    served: tuple[_Client, Path], selector: dict[str, Any], where: str
) -> None:
    """Any selector CouchDB would refuse is a 400; any it accepts is evaluated on
    documents whose shapes meet its paths, and answered: by the changes filter,
    a full scan, or a json index on the fields the documents share (the same
    selector as a partial filter, too)."""
    client, root = served
    for i, doc in enumerate(_MANGO_DOCS):
        client("PUT", f"/target/mango{i}", json.dumps(doc).encode())  # 409 after the first
    body: dict[str, Any] = {"selector": selector}
    path = "/target/_changes?filter=_selector" if where == "changes" else "/target/_find"
    if where == "indexed find":
        index = {"fields": ["a", "b"], "partial_filter_selector": selector}
        _send(client, root, "POST", "/target/_index", json.dumps({"index": index}).encode())
        body["use_index"] = "ab"
        index = {"fields": ["a", "b"]}
        ask = {"index": index, "ddoc": "ab", "name": "ab"}
        _send(client, root, "POST", "/target/_index", json.dumps(ask).encode())
    _send(client, root, "POST", path, json.dumps(body).encode())


_PART_CONTENT = st.one_of(
    st.binary(max_size=30),
    st.sampled_from(
        [
            b"{}",
            b"[1]",
            b'{"_attachments": 5}',
            b'{"_attachments": {"a": {"follows": true}}}',
            b'{"_attachments": {"a": {"follows": true, "length": 2, "digest": "md5-x"}}}',
            b'{"_attachments": {"a": {"follows": true}, "b": {"stub": true}}}',
            b'{"_rev": "1-a", "_attachments": {"_a": {"follows": true}}}',
            b'{"_attachments": {"a": {"follows": true, "encoding": "gzip"}}}',
            b'{"_attachments": {"a": {"follows": true, "encoding": ["gzip"]}}}',
            b'{"_attachments": {"a": {"follows": true, "content_type": 7, "revpos": "x"}}}',
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00",  # a gzip header and nothing after it
        ]
    ),
)
_PARTS = st.lists(
    st.tuples(st.sampled_from([b"Content-Type: application/json", b"X: y", b""]), _PART_CONTENT),
    max_size=4,
)


@_HOSTILE
@given(boundary=st.text(alphabet="abcxyz-'\"= ;", max_size=6), parts=_PARTS, raw=st.booleans())
def test_hostile_multipart_bodies_are_4xx(
    served: tuple[_Client, Path], boundary: str, parts: list[tuple[bytes, bytes]], raw: bool
) -> None:
    """multipart/related PUTs (CouchDB's replicator sends them): well-formed parts
    with any content, or the same pieces run together: a 4xx or a stored document,
    never a 500."""
    client, _root = served
    delimiter = b"--" + boundary.encode("utf-8", "replace")
    if raw:
        body = delimiter.join(head + content for head, content in parts)
    else:
        body = b"".join(delimiter + b"\r\n" + h + b"\r\n\r\n" + c + b"\r\n" for h, c in parts)
        body += delimiter + b"--"
    headers = {"Content-Type": f"multipart/related; boundary={boundary}"}
    status, answer = client("PUT", "/target/mp?new_edits=false", body, headers)
    assert status < 500, (status, answer[:300])
    assert client("GET", "/target/doc")[0] == 200


_ACCEPT = st.lists(
    st.sampled_from(
        [
            "multipart/mixed",
            "multipart/related",
            "multipart/*",
            "*/*",
            "application/json",
            ";q=0",
            ";q=nan",
            ";q=x",
            ";boundary=",
            ",",
            " ",
            "\u00e9",
        ]
    ),
    max_size=5,
).map("".join)


@_HOSTILE
@given(accept=_ACCEPT, which=st.sampled_from(["attachments", "open_revs", "bulk_get"]))
def test_any_accept_header_gets_an_answer(
    served: tuple[_Client, Path], accept: str, which: str
) -> None:
    """Whatever ``Accept`` says, a document with attachments is answered (JSON or
    multipart), never a 500, and a multipart answer carries the bytes."""
    client, _root = served
    body = {"_attachments": {"a b": {"data": "aGVsbG8="}, "c": {"data": ""}}}
    client("PUT", "/target/att", json.dumps(body).encode())  # 409 after the first
    headers = {"Content-Type": "application/json", "Accept": accept.encode().decode("latin-1")}
    if which == "bulk_get":
        ask = json.dumps({"docs": [{"id": "att"}, {"id": "nope"}]}).encode()
        status, raw = client("POST", "/target/_bulk_get?attachments=true", ask, headers)
    else:
        query = "attachments=true" + ("&open_revs=all" if which == "open_revs" else "")
        status, raw = client("GET", f"/target/att?{query}", None, headers)
    assert status == 200, (status, raw[:300])
    assert b"hello" in raw or b"aGVsbG8=" in raw


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/target/_local/c2", '{"_rev": "0-' + "9" * 5000 + '"}'),
        ("PUT", "/target/_local/c2", '{"_rev": "0-\\u0661"}'),
        ("DELETE", "/target/_local/c2?rev=0-" + "9" * 5000, None),
        (
            "POST",
            "/target/_bulk_docs",
            '{"docs": [{"_id": "_local/ok1"}, {"_id": "_local/\\ud800"}]}',
        ),
        ("POST", "/target/_bulk_docs", '{"docs": [{"_id": "_local/ok2", "x": 1}, {"_id": 5}]}'),
    ],
    ids=[
        "5000-digit rev",
        "Arabic-Indic digit rev",
        "5000-digit rev to delete",
        "lone surrogate id",
        "refused with a bad document",
    ],
)
def test_hostile_local_documents_are_4xx_and_a_refusal_stores_none(
    served: tuple[_Client, Path], method: str, path: str, body: str | None
) -> None:
    """Found in review: each was a 500 (int() of 5,000 digits, a lone surrogate in a
    JSON file name's document), or stored the ``_local/`` documents of a
    ``_bulk_docs`` it refused; and a failed write left a ``.json.tmp`` behind."""
    client, root = served
    _send(client, root, method, path, None if body is None else body.encode())
    status, _ = client(method, path, None if body is None else body.encode())
    if status >= 400 and "ok2" in (body or ""):
        assert client("GET", "/target/_local/ok2")[0] == 404
    assert not list(root.glob("_local/**/*.tmp"))


@_HOSTILE
@given(
    encoding=st.sampled_from(["gzip", "deflate", "br", "x-bogus", "identity", "gzip, gzip"]),
    compressed=st.booleans(),
    where=st.sampled_from(
        [("PUT", "/target/enc"), ("POST", "/target/_bulk_docs"), ("PUT", "/target/enc2/att")]
    ),
)
def test_a_body_that_is_not_in_its_content_encoding_is_4xx(
    served: tuple[_Client, Path], encoding: str, compressed: bool, where: tuple[str, str]
) -> None:
    """Found in review: ``Content-Encoding: gzip`` over bytes that are not gzip was a
    500 (aiohttp's RequestPayloadError). A body that is what it says is read."""
    import gzip

    client, _ = served
    method, path = where
    plain = b'{"docs": [{"v": 1}]}' if path.endswith("_bulk_docs") else b'{"v": 1}'
    body = gzip.compress(plain) if compressed else plain
    headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
    status, raw = client(method, path, body, headers)
    assert status < 500, (
        f"{method} {path} ({encoding}, compressed={compressed}) -> {status} {raw!r}"
    )
    assert client("GET", "/target/doc")[0] == 200


def test_a_gzip_body_is_read_and_a_gzip_bomb_is_413(served: tuple[_Client, Path]) -> None:
    import gzip

    client, _ = served
    gz = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    status, raw = client("PUT", "/target/zipped", gzip.compress(b'{"v": 7}'), gz)
    assert status == 201, raw
    assert json.loads(client("GET", "/target/zipped")[1])["v"] == 7
    # A few hundred KB that unpack past the request limit (2 x max_document_size + 1 MiB).
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    megabyte = b"x" * 2**20
    bomb = packer.compress(b'{"v": "') + b"".join(packer.compress(megabyte) for _ in range(140))
    bomb += packer.flush()
    status, raw = client("PUT", "/target/bomb", bomb, gz)
    assert status == 413, raw
    status, raw = client("PUT", "/target/other", b'{"v": 1}', {**gz, "Content-Encoding": "br"})
    assert status == 415 and json.loads(raw)["error"] == "bad_content_type"


def test_view_output_json_cannot_hold_is_4xx(served: tuple[_Client, Path]) -> None:
    """Found in review: a map function emitting a value nested 10,000 deep, and a _sum
    reaching infinity (1e308 twice), were 500s on every query of their views. The
    first is a map error now (couchjs skips the document), the second CouchDB's
    builtin_reduce_error."""
    client, _ = served
    assert client("PUT", "/outputs")[0] == 201
    for n in range(2):
        assert client("PUT", f"/outputs/d{n}", b'{"v": 1}')[0] == 201
    deep = "function(doc) { var x = 1; for (var i = 0; i < 10000; i++) { x = [x]; } "
    deep += "emit(doc._id, x); }"
    views = {
        "deep": {"map": deep},
        "huge": {"map": "function(doc) { emit(1, 1e308); }", "reduce": "_sum"},
        "stats": {"map": "function(doc) { emit(1, 1e200); }", "reduce": "_stats"},
    }
    assert client("PUT", "/outputs/_design/o", json.dumps({"views": views}).encode())[0] == 201
    # A map result that cannot be read is a map error: the document emits nothing.
    status, raw = client("GET", "/outputs/_design/o/_view/deep")
    assert (status, json.loads(raw)["rows"]) == (200, [])
    for view in ("huge", "stats"):
        status, raw = client("GET", f"/outputs/_design/o/_view/{view}")
        assert 400 <= status < 500, (view, status, raw[:200])
        assert json.loads(raw)["error"] == "builtin_reduce_error"
    assert client("GET", "/outputs/_design/o/_view/huge?reduce=false")[0] == 200
    client("DELETE", "/outputs")


def test_a_validate_doc_update_that_does_not_compile_can_be_fixed(
    served: tuple[_Client, Path],
) -> None:
    """Found probing: a design document whose ``validate_doc_update`` does not
    compile (CouchDB stores it: only views are compiled on save) refused every
    write with 400 compilation_error, its own deletion and any design document
    too, so over HTTP the database could never be written again. Design documents
    are not validated (couch_db:validate_doc_update), so not compiled for either;
    the other writes are refused, each in a ``_bulk_docs``, none stored."""
    client, _ = served
    assert client("PUT", "/brokenvdu")[0] == 201
    vdu = {"validate_doc_update": "function(newDoc, oldDoc) { throw({forbidden: 'x'})"}
    status, raw = client("PUT", "/brokenvdu/_design/bad", json.dumps(vdu).encode())
    assert status == 201, raw
    rev = json.loads(raw)["rev"]
    status, raw = client("PUT", "/brokenvdu/plain", b"{}")
    assert (status, json.loads(raw)["error"]) == (400, "compilation_error")
    status, raw = client("POST", "/brokenvdu/_bulk_docs", b'{"docs": [{"_id": "a"}, {"_id": "b"}]}')
    assert (
        status == 201 and [row.get("error") for row in json.loads(raw)] == ["compilation_error"] * 2
    )
    assert client("GET", "/brokenvdu/a")[0] == 404
    assert client("PUT", "/brokenvdu/_design/other", b"{}")[0] == 201
    assert client("DELETE", f"/brokenvdu/_design/bad?rev={rev}")[0] == 200
    assert client("PUT", "/brokenvdu/plain", b"{}")[0] == 201
    client("DELETE", "/brokenvdu")


def couch_stores_ddoc(doc: dict[str, Any]) -> bool:
    """couch_mrview:validate (CouchDB 3.5) on a design document's members, written
    apart from the server's so both must agree: the types of each member, a map
    function in every view but ``lib``, and builtin reduces only by known prefixes."""

    def functions(value: Any) -> bool:  # filters, lists, shows, updates
        return isinstance(value, dict) and all(isinstance(f, dict | str) for f in value.values())

    def view_ok(name: str, view: Any) -> bool:
        if not isinstance(view, dict) or not isinstance(view.get("reduce", ""), str):
            return False
        if ("map" in view or name != "lib") and not isinstance(view.get("map"), str):
            return False
        builtin = ("_sum", "_count", "_stats", "_approx_count_distinct", "_first", "_last")
        reduce = view.get("reduce", "")
        if name != "lib" and reduce.startswith(("_top_", "_bottom_")):
            rank = reduce.split("_", 2)[2]  # check_rank: binary_to_integer, 1..100
            return re.fullmatch(r"[+-]?[0-9]+", rank) is not None and 1 <= int(rank) <= 100
        return name == "lib" or not reduce.startswith("_") or reduce.startswith(builtin)

    flags = ("include_design", "local_seq", "partitioned")
    checks = {
        "filters": functions,
        "lists": functions,
        "shows": functions,
        "updates": functions,
        "language": lambda v: isinstance(v, str),
        "validate_doc_update": lambda v: isinstance(v, str),
        "rewrites": lambda v: isinstance(v, str | list),
        "options": lambda v: (
            isinstance(v, dict) and all(isinstance(v[f], bool) for f in flags if f in v)
        ),
        "views": lambda v: isinstance(v, dict) and all(view_ok(n, w) for n, w in v.items()),
    }
    partitioned = isinstance(doc.get("options"), dict) and doc["options"].get("partitioned")
    if partitioned is True:  # settee's databases never are, and couch_mrview checks
        return False
    return all(check(doc[member]) for member, check in checks.items() if member in doc)


def couch_refusal(doc: dict[str, Any]) -> str | None:
    """The error CouchDB refuses ``doc`` with, or None when it stores it: the checks
    of ``couch_stores_ddoc``, then each JavaScript view's map and reduce compiled
    (couch_query_servers:try_compile, as couchjs's add_fun evaluates the source as
    a function expression), here in an isolate of this test's own."""
    if not couch_stores_ddoc(doc):
        return "invalid_design_doc"
    if doc.get("language", "javascript") != "javascript":
        return None
    for name, view in doc.get("views", {}).items():
        if name == "lib":
            continue
        sources = [view["map"], view.get("reduce", "")]
        if not all(_compiles(src) for src in sources if src and not src.startswith("_")):
            return "compilation_error"
    return None


def _compiles(source: str) -> bool:
    from py_mini_racer import JSEvalException, MiniRacer

    try:
        # couchjs evaluates the source as a script ending in the function: a trailing
        # ";" or line comment is fine (rewrite_fun.js).
        expression = re.sub(r"[\s;]+$", "", source)
        check = f"typeof ({expression}\n) === 'function'"
        return bool(MiniRacer().eval(check, timeout=2000))
    except JSEvalException:
        return False


#: Any JSON the engine stores (its integers fit in 64 bits), for design documents.
_JSON_STORED = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_VIEW = st.dictionaries(
    st.sampled_from(["map", "reduce"]),
    st.one_of(
        st.sampled_from(
            [
                *("function(doc) { emit(1, 1); }", "_count", "_sum_x", "_bogus", "_"),
                *("_first", "_last2", "_top_3", "_top_0", "_bottom_+100", "_bottom_101"),
                *("_top_x", "_top_", "_topx", "_bottom_²"),
            ]
        ),
        _JSON_STORED,
    ),
)
_DDOC = st.dictionaries(
    st.sampled_from(
        [
            *("filters", "language", "lists", "options", "rewrites", "shows", "updates"),
            *("validate_doc_update", "views", "other"),
        ]
    ),
    st.one_of(
        _JSON_STORED,
        st.dictionaries(st.sampled_from(["v", "lib", "f"]), st.one_of(_VIEW, _JSON_STORED)),
        st.dictionaries(
            st.sampled_from(["include_design", "local_seq", "partitioned", "x"]), _JSON_STORED
        ),
    ),
    max_size=3,
)


@_HOSTILE
@given(ddoc=_DDOC, how=st.sampled_from(["PUT", "_bulk_docs", "new_edits=false"]))
@example(ddoc={"validate_doc_update": 7}, how="PUT")  # found probing: every write refused
@example(ddoc={"views": {"v": {"map": "function(doc) {}", "reduce": 5}}}, how="_bulk_docs")
@example(ddoc={"options": {"partitioned": True}}, how="new_edits=false")
@example(ddoc={"views": {"v": {"map": "function(doc) }{"}}}, how="new_edits=false")
@example(ddoc={"views": {"v": {"map": "abc"}}}, how="PUT")  # stored, every query failed
def test_a_design_document_couchdb_refuses_is_refused_and_not_stored(
    served: tuple[_Client, Path], ddoc: dict[str, Any], how: str
) -> None:
    """Found probing: any member of any type was stored, ``"validate_doc_update":
    7`` too, after which every write to the database was 400 compilation_error.
    CouchDB refuses what couch_mrview:validate refuses, with ``invalid_design_doc``,
    by each path a design document is written."""
    client, _ = served
    if client("PUT", "/ddocs")[0] == 201:
        assert client("PUT", "/ddocs/plain", b"{}")[0] == 201
    if how == "PUT":
        status, raw = client("PUT", "/ddocs/_design/h", json.dumps(ddoc).encode())
        refusal = json.loads(raw).get("error") if status >= 400 else None
    else:
        replicated = how == "new_edits=false"
        doc = {"_id": "_design/h", **ddoc, **({"_rev": "1-a"} if replicated else {})}
        body = {"docs": [doc], "new_edits": not replicated}
        status, raw = client("POST", "/ddocs/_bulk_docs", json.dumps(body).encode())
        assert status == 201, raw
        refusal = next((row.get("error") for row in json.loads(raw)), None)
    stored = client("GET", "/ddocs/_design/h")
    expected = couch_refusal(ddoc)
    if expected is None:
        assert refusal is None and stored[0] == 200, (ddoc, raw)
        purge = {"_design/h": [json.loads(stored[1])["_rev"]]}  # gone, for the next example
        assert client("POST", "/ddocs/_purge", json.dumps(purge).encode())[0] == 201
    else:
        assert refusal == expected and stored[0] == 404, (ddoc, raw)
    status, raw = client("GET", "/ddocs/plain")
    rev = json.loads(raw)["_rev"]
    assert client("PUT", "/ddocs/plain", json.dumps({"_rev": rev}).encode())[0] == 201


@pytest.mark.parametrize(
    ("method", "path", "same_as"),
    [
        ("GET", "//target", "/target"),
        ("GET", "/target//doc", "/target/doc"),
        ("GET", "//target//doc//", "/target/doc"),
        ("PUT", "/target//slashes", "/target/slashes"),
        (
            "GET",
            "/target/_design//v/_view//v?reduce=false",
            "/target/_design/v/_view/v?reduce=false",
        ),
    ],
)
def test_empty_path_segments_are_dropped_as_chttpd_drops_them(
    served: tuple[_Client, Path], method: str, path: str, same_as: str
) -> None:
    """chttpd splits the path with string:tokens, which drops empty segments, so
    ``//db//doc`` is ``/db/doc`` (a client joining a base URL ending in ``/``
    sends them). Found probing: ``GET //db`` was 404 "Database does not exist.",
    ``GET /db//doc`` a 400 about an empty document id, ``PUT /db//doc`` 400
    illegal_docid."""
    client, root = served
    _send(client, root, method, path, b"{}" if method == "PUT" else None)
    status, _ = client(method, path, b"{}" if method == "PUT" else None)
    expected = 409 if method == "PUT" else 200  # the second PUT names no rev
    assert status == expected, (method, path, status)
    assert client("GET", same_as)[0] == 200
    if method == "PUT":  # a POST's Location names the new document in its database
        conn = http.client.HTTPConnection("127.0.0.1", client.port, timeout=30)
        conn.request(
            "POST", "//target/", b'{"_id": "posted"}', {"Content-Type": "application/json"}
        )
        location = conn.getresponse().getheader("Location", "")
        conn.close()
        assert location.endswith(f":{client.port}/target/posted"), location
