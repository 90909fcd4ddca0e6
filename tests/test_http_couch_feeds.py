"""Replication-side requests as CouchDB 3.5 answers them, each checked against the
source function its comment names: ``_changes`` (chttpd_db:parse_changes_query,
fabric_view_changes' since, couch_changes' filters and their ``req``, couchjs's
handling of what a function throws), ``_revs_diff``/``_missing_revs`` and
``_bulk_get`` (couch_doc:parse_rev, parse_doc_query, bulk_get_parse_arg),
attachments (chttpd_db:db_attachment_req; the gzip encoding CouchDB gives its
compressible types, couch_db:with_stream; stubs, couch_doc:merge_stubs) and
``_all_docs``' parameters (couch_mrview_http:parse_param).
"""

from __future__ import annotations

import base64
import email.parser
import gzip
import itertools
import json
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from tests import test_http
from tests.test_http import Client, put

# tests/test_http.py's fixtures: one server for this module, a fresh database per test.
server, client, db = test_http.server, test_http.client, test_http.db

INVALID_REV = {"error": "bad_request", "reason": "Invalid rev format"}


# -- _changes ------------------------------------------------------------------------------------

MALFORMED_SINCE = {
    "error": "bad_request",
    "reason": "Malformed sequence supplied in 'since' parameter.",
}


@pytest.mark.parametrize("feed", ["normal", "longpoll", "continuous", "eventsource"])
@pytest.mark.parametrize("since", ["garbage", "1"])
def test_bad_since_is_malformed(client: Client, db: str, feed: str, since: str) -> None:
    # fabric_view_changes:validate_start_seq, on every feed before any row goes out.
    put(client, db, "a", {})
    answer = client("GET", f"{db}/_changes?feed={feed}&since={since}&timeout=1")
    assert (answer.status, answer.json) == (400, MALFORMED_SINCE)


def test_since_may_be_quoted_or_lack_its_number(client: Client, db: str) -> None:
    # fabric_view_changes:unpack_seq_regex_match takes ^"?([0-9]+-)?(opaque)"?$ and
    # decodes the opaque part alone.
    for doc_id in ("a", "b"):
        put(client, db, doc_id, {})
    first = client("GET", f"{db}/_changes?limit=1").json["last_seq"]
    rest = client("GET", f"{db}/_changes?since={first}").json["results"]
    assert len(rest) == 1
    number, _, opaque = first.partition("-")
    for since in (f'"{first}"', opaque, f"{int(number) + 41}-{opaque}", f'"{opaque}'):
        answer = client("GET", f"{db}/_changes?since={since}")
        assert answer.status == 200, (since, answer.json)
        assert answer.json["results"] == rest, since


def test_changes_parameter_names_are_read_in_any_case(client: Client, db: str) -> None:
    # chttpd_db:parse_changes_query folds over string:to_lower(Key): Since, LIMIT and
    # Include_Docs are since, limit and include_docs, and last-event-id is a since.
    put(client, db, "a", {})
    put(client, db, "b", {})
    now = client("GET", f"{db}/_changes").json["last_seq"]
    assert client("GET", f"{db}/_changes?Since={now}").json["results"] == []
    assert client("GET", f"{db}/_changes?last-event-id={now}").json["results"] == []
    rows = client("GET", f"{db}/_changes?LIMIT=1&Include_Docs=true").json["results"]
    assert len(rows) == 1 and rows[0]["doc"]["_id"] == rows[0]["id"]
    refused = client("GET", f"{db}/_changes?Feed=sometimes")
    assert refused.status == 400


def test_descending_changes_ignore_since(client: Client, db: str) -> None:
    # fabric_view_changes:get_start_seq starts a descending feed at the update seq,
    # so since is never unpacked (nor refused).
    put(client, db, "a", {})
    answer = client("GET", f"{db}/_changes?descending=true&since=garbage")
    assert answer.status == 200
    assert [row["id"] for row in answer.json["results"]] == ["a"]


def test_a_posted_doc_ids_filter_reads_its_ids_from_the_body_alone(client: Client, db: str) -> None:
    # couch_changes:get_doc_ids(#httpd{method = 'POST'}) reads the body's doc_ids.
    put(client, db, "a", {})
    path = f'{db}/_changes?filter=_doc_ids&doc_ids=["a"]'
    refused = client("POST", path, {})
    reason = "`doc_ids` filter parameter is not a list of doc ids."
    assert (refused.status, refused.json) == (400, {"error": "bad_request", "reason": reason})
    assert client("POST", path, {"doc_ids": []}).json["results"] == []
    assert [row["id"] for row in client("GET", path).json["results"]] == ["a"]


def test_a_filter_function_gets_couchs_request_object(client: Client, db: str) -> None:
    # couch_changes:filter passes chttpd_external:json_req_obj: a fresh uuid among
    # its fields, the database's info as GET /db answers it, "undefined" as the body
    # of a GET (mochiweb's recv_body), and key, startkey, endkey and descending
    # decoded from JSON in req.query (json_query_keys), the cookies in req.cookie.
    pytest.importorskip("py_mini_racer", reason="JavaScript needs pip install -e '.[js]'")
    check = (
        'req.method == "GET" && req.body == "undefined" && req.id === null'
        ' && typeof req.uuid == "string" && req.uuid.length == 32 && req.query.x == "1"'
        ' && req.path[1] == "_changes" && req.info.db_name == req.path[0]'
        ' && req.info.doc_count == 2 && typeof req.info.update_seq == "string"'
        ' && req.query.key[0] == 1 && req.query.startkey === "s" && req.query.other == "[1]"'
        ' && req.cookie.flavour == "oat" && req.cookie.size == "2"'
    )
    source = f"function (doc, req) {{ return {check}; }}"
    put(client, db, "_design/r", {"filters": {"m": source}})
    put(client, db, "a", {})
    query = "x=1&key=[1]&startkey=%22s%22&other=[1]"
    cookie = {"Cookie": 'flavour=oat; size="2"'}
    answer = client("GET", f"{db}/_changes?filter=r/m&{query}", headers=cookie)
    assert answer.status == 200, answer.json
    assert [row["id"] for row in answer.json["results"]] == ["_design/r", "a"]


def test_a_posted_filter_gets_the_body_as_an_object(client: Client, db: str) -> None:
    # chttpd_db:handle_changes_req keeps a POST's decoded JSON as req_body, which
    # chttpd_external:json_req_obj_field(<<"body">>) passes on as it is: an object.
    pytest.importorskip("py_mini_racer", reason="JavaScript needs pip install -e '.[js]'")
    check = 'typeof req.body == "object" && req.body.want == doc._id'
    put(client, db, "_design/r", {"filters": {"b": f"function (doc, req) {{ return {check}; }}"}})
    put(client, db, "a", {})
    put(client, db, "b", {})
    answer = client("POST", f"{db}/_changes?filter=r/b", {"want": "b"})
    assert answer.status == 200, answer.json
    assert [row["id"] for row in answer.json["results"]] == ["b"]


@pytest.mark.parametrize(
    ("thrown", "error", "reason"),
    [
        ('"oops"', "unnamed_error", "oops"),
        ('{error: "not_yet", reason: "come back later"}', "not_yet", "come back later"),
        ('["error", "busy", "try again"]', "busy", "try again"),
    ],
    ids=["string", "object", "array"],
)
def test_filter_throws(client: Client, db: str, thrown: str, error: str, reason: str) -> None:
    # share/server/loop.js handleError: a thrown {error, reason} or ["error", e, r]
    # keeps its names, anything else is unnamed_error (its reason here the value's
    # text: couchjs's toSource() varies with the engine). CouchDB answers 500; settee
    # answers a design function's error with a 400, never a 5xx.
    pytest.importorskip("py_mini_racer", reason="JavaScript needs pip install -e '.[js]'")
    put(client, db, "_design/r", {"filters": {"t": f"function (doc, req) {{ throw {thrown}; }}"}})
    answer = client("GET", f"{db}/_changes?filter=r/t")
    assert (answer.status, answer.json) == (400, {"error": error, "reason": reason})


def test_changes_405_names_couchs_methods(client: Client, db: str) -> None:
    answer = client("PUT", f"{db}/_changes")
    assert answer.status == 405
    assert answer.json == {"error": "method_not_allowed", "reason": "Only GET,POST,HEAD allowed"}


# -- _revs_diff and _missing_revs ----------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["_revs_diff", "_missing_revs"])
@pytest.mark.parametrize("rev", ["bad", 1, "1-" + "z" * 32])
def test_unparsed_rev(client: Client, db: str, endpoint: str, rev: object) -> None:
    # fabric:get_missing_revs parses each rev with couch_doc:parse_rev; a 32-character
    # hash must be hex (parse_revid's list_to_integer(_, 16)).
    answer = client("POST", f"{db}/{endpoint}", {"a": [rev]})
    assert (answer.status, answer.json) == (400, INVALID_REV)


def test_revs_diff_reads_revs_as_couch_writes_them(client: Client, db: str) -> None:
    rev = put(client, db, "a", {})
    long = "9" * 5000 + "-x"  # a position no int() converts, and no store holds
    asked = {"a": [rev.upper().replace("1-", "+01-"), "0-x", "02-x", long], "b": ["1-x"]}
    answer = client("POST", f"{db}/_revs_diff", asked)
    assert answer.status == 200
    # 01-<upper hex> is the stored rev (parse_rev reads the integer and the hex);
    # 0-x parses but no document can hold it; 02-x comes back as 2-x (rev_to_str).
    assert answer.json["b"] == {"missing": ["1-x"]}
    assert sorted(answer.json["a"]["missing"]) == ["0-x", "2-x", long]
    missing = client("POST", f"{db}/_missing_revs", asked).json["missing_revs"]
    assert sorted(missing["a"]) == ["0-x", "2-x", long]


# -- _bulk_get -----------------------------------------------------------------------------------


def test_bulk_get_flags_are_on_for_true_alone(client: Client, db: str) -> None:
    # chttpd_db:bulk_get_parse_doc_query reads them with parse_doc_query: {"revs", "true"}
    # turns revs on, any other value is ignored (no 400).
    put(client, db, "a", {})
    for value in ("maybe", "TRUE", "1"):
        answer = client(
            "POST", f"{db}/_bulk_get?revs={value}&latest={value}", {"docs": [{"id": "a"}]}
        )
        assert answer.status == 200
        assert "_revisions" not in answer.json["results"][0]["docs"][0]["ok"]
    on = client("POST", f"{db}/_bulk_get?revs=true", {"docs": [{"id": "a"}]})
    assert "_revisions" in on.json["results"][0]["docs"][0]["ok"]


def test_bulk_get_finds_no_local_document(client: Client, db: str) -> None:
    # couch_db:open_doc_revs_int looks ids up in the id tree, where no _local
    # document is: not_found missing, as for any document the database lacks.
    assert client("PUT", f"{db}/_local/l", {"a": 1}).status == 201
    put(client, db, "d", {})
    docs = [{"id": "_local/l"}, {"id": "_local/l", "rev": "0-1"}, {"id": "d", "rev": "00-1"}]
    rows = client("POST", f"{db}/_bulk_get", {"docs": docs}).json["results"]
    errors = [row["docs"][0]["error"] for row in rows]
    # A rev couch_doc:parse_rev reads (0-1, 00-1) is missing, written back by rev_to_str.
    assert errors == [
        {"id": "_local/l", "rev": "undefined", "error": "not_found", "reason": "missing"},
        {"id": "_local/l", "rev": "0-1", "error": "not_found", "reason": "missing"},
        {"id": "d", "rev": "0-1", "error": "not_found", "reason": "missing"},
    ]


def test_bulk_get_takes_an_empty_object_for_no_document(client: Client, db: str) -> None:
    # bulk_get_parse_arg matches {[_ | _] = Props}: {} is not a document request.
    answer = client("POST", f"{db}/_bulk_get", {"docs": [{}]})
    error = answer.json["results"][0]["docs"][0]["error"]
    assert error == {
        "id": None,
        "rev": None,
        "error": "bad_request",
        "reason": "document must be a JSON object",
    }


# -- attachments ---------------------------------------------------------------------------------


def test_attachment_reads_carry_the_sandbox_policy(client: Client, db: str) -> None:
    # chttpd_util:maybe_add_csp_header("attachments", _, "sandbox"), on by default.
    rev = put(client, db, "a", {})
    html = {"Content-Type": "text/html"}
    assert (
        client("PUT", f"{db}/a/page.html?rev={rev}", raw=b"<script>1</script>", headers=html).status
        == 201
    )
    for method in ("GET", "HEAD"):
        answer = client(method, f"{db}/a/page.html")
        assert answer.headers["Content-Security-Policy"] == "sandbox"


def test_an_attachment_request_reads_its_rev_as_couch_does(client: Client, db: str) -> None:
    # db_attachment_req: ?rev= and a write's If-Match go through couch_doc:parse_rev
    # (extract_header_rev); a GET's If-Match is read as its rev, as attachments.rst
    # documents it (the source's GET ignores it).
    rev = put(client, db, "d", {})
    octets = {"Content-Type": "application/octet-stream"}
    assert client("PUT", f"{db}/d/a.bin?rev={rev}", raw=b"abc", headers=octets).status == 201
    answers = [
        client("GET", f"{db}/d/a.bin?rev=junk"),
        client("PUT", f"{db}/d/a.bin?rev=junk", raw=b"x", headers=octets),
        client("PUT", f"{db}/d/a.bin", raw=b"x", headers={**octets, "If-Match": '"junk"'}),
        client("DELETE", f"{db}/d/a.bin?rev=junk"),
        client("DELETE", f"{db}/d/a.bin", headers={"If-Match": "junk"}),
        client("GET", f"{db}/d/a.bin", headers={"If-Match": '"junk"'}),
    ]
    assert [(a.status, a.json) for a in answers] == [(400, INVALID_REV)] * len(answers)
    second = client("PUT", f"{db}/d/a.bin", raw=b"new", headers={**octets, "If-Match": f'"{rev}"'})
    assert second.status == 409  # rev names the document before the attachment
    current = client("GET", f"{db}/d").json["_rev"]
    newer = client("PUT", f"{db}/d/a.bin?rev={current}", raw=b"new", headers=octets)
    assert newer.status == 201
    read = client("GET", f"{db}/d/a.bin", headers={"If-Match": f'"{current}"'})
    assert (read.status, read.raw) == (200, b"abc")


def test_an_attachment_put_takes_gzip_and_identity_alone(client: Client, db: str) -> None:
    # db_attachment_req: any other Content-Encoding is bad_ctype, with its own reason.
    headers = {"Content-Type": "application/octet-stream", "Content-Encoding": "br"}
    refused = client("PUT", f"{db}/d/a.bin", raw=b"x", headers=headers)
    reason = "Only gzip and identity content-encodings are supported"
    assert (refused.status, refused.json) == (415, {"error": "bad_content_type", "reason": reason})
    headers["Content-Encoding"] = "gzip"
    assert client("PUT", f"{db}/d/a.bin", raw=gzip.compress(b"abc"), headers=headers).status == 201
    assert client("GET", f"{db}/d/a.bin").raw == b"abc"


def test_a_stub_with_no_previous_revision_names_itself(client: Client, db: str) -> None:
    # couch_db:prep_and_validate_updates (and the replicated kind) merge a new
    # document's stubs against #doc{}: couch_doc:merge_stubs answers "Invalid
    # attachment stub in <id> for <name>" (its nil clause is never reached in 3.5).
    stub = {"_attachments": {"a.txt": {"stub": True}}}
    put_answer = client("PUT", f"{db}/s1", stub)
    reason = "Invalid attachment stub in s1 for a.txt"
    assert (put_answer.status, put_answer.json) == (
        412,
        {"error": "missing_stub", "reason": reason},
    )
    rows = client("POST", f"{db}/_bulk_docs", {"docs": [{"_id": "s2", **stub}]}).json
    assert rows == [
        {"id": "s2", "error": "missing_stub", "reason": "Invalid attachment stub in s2 for a.txt"}
    ]


def test_inline_data_that_is_not_base64_has_couchs_reason(client: Client, db: str) -> None:
    # couch_att:inline_from_json: base64:decode fails -> "Invalid attachment data for N".
    body = {"_attachments": {"a.txt": {"content_type": "text/plain", "data": "!!!"}}}
    answer = client("PUT", f"{db}/d", body)
    reason = "Invalid attachment data for a.txt"
    assert (answer.status, answer.json) == (400, {"error": "bad_request", "reason": reason})


def test_a_map_that_throws_a_value_skips_the_document(client: Client, db: str) -> None:
    # share/server/views.js map_doc catches what the map throws, Error or not, and
    # handleViewError logs it and goes on: the document has no rows.
    pytest.importorskip("py_mini_racer", reason="JavaScript needs pip install -e '.[js]'")
    source = 'function (doc) { if (doc._id == "a") { throw "no"; } emit(doc._id, null); }'
    put(client, db, "_design/t", {"views": {"v": {"map": source}}})
    put(client, db, "a", {})
    put(client, db, "b", {})
    answer = client("GET", f"{db}/_design/t/_view/v")
    assert answer.status == 200, answer.json
    assert [row["id"] for row in answer.json["rows"]] == ["b"]


def test_a_reduce_that_throws_reduces_to_null(client: Client, db: str) -> None:
    # share/server/views.js runReduce catches what a reduce throws (handleViewError
    # logs it) and sets that reduction to null; the query still answers.
    pytest.importorskip("py_mini_racer", reason="JavaScript needs pip install -e '.[js]'")
    emit = "function (doc) { emit(doc._id, 1); }"
    views = {
        "thrown": {"map": emit, "reduce": 'function (k, v, r) { throw "no"; }'},
        "error": {"map": emit, "reduce": 'function (k, v, r) { throw new Error("no"); }'},
    }
    put(client, db, "_design/t", {"views": views})
    put(client, db, "a", {})
    for view in views:
        whole = client("GET", f"{db}/_design/t/_view/{view}")
        assert (whole.status, whole.json) == (200, {"rows": [{"key": None, "value": None}]})
        grouped = client("GET", f"{db}/_design/t/_view/{view}?group=true").json["rows"]
        assert grouped == [{"key": "a", "value": None}]


def test_an_attachment_location_url_encodes_the_id_and_the_name(client: Client, db: str) -> None:
    # db_attachment_req: Location is /db/ + couch_util:url_encode(DocId) + / +
    # url_encode(FileName), which keeps letters, digits and _.-: alone.
    octets = {"Content-Type": "application/octet-stream"}
    for doc_id, path, tail in [
        ("d", "d/dir/x%20y~.txt", "/d/dir%2Fx%20y%7E.txt"),
        ("_design/x", "_design/x/a:b.txt", "/_design%2Fx/a:b.txt"),
    ]:
        answer = client("PUT", f"{db}/{path}", raw=b"x", headers=octets)
        assert answer.status == 201, answer.json
        assert answer.json["id"] == doc_id
        assert answer.headers["Location"].endswith(db + tail), answer.headers["Location"]


# -- _all_docs -----------------------------------------------------------------------------------

_PARAMETERS = (
    "limit",
    "skip",
    "descending",
    "include_docs",
    "inclusive_end",
    "update_seq",
    "conflicts",
    "stale",
    "stable",
    "update",
    "sorted",
    "att_encoding_info",
)
_TEXTS = ("-1", "x", "TRUE")
_VALUES = (-1, 1.5, "TRUE")


def test_all_docs_parses_its_parameters_as_a_view_does(client: Client, db: str) -> None:
    # chttpd_db:all_docs_view reads them with couch_mrview_http:parse_body_and_query,
    # a view's own parser: each bad value is the view's 400 query_parse_error, with
    # its reason, from the query string and from a POST body alike.
    put(client, db, "_design/d", {"views": {"v": {"map": "function (doc) { emit(doc._id); }"}}})
    view = f"{db}/_design/d/_view/v"
    for name in _PARAMETERS:
        for text in _TEXTS:
            expected = client("GET", f"{view}?{name}={text}")
            answer = client("GET", f"{db}/_all_docs?{name}={text}")
            assert answer.status == expected.status, (name, text, answer.json)
            if expected.status == 400:
                assert answer.json == expected.json, (name, text)
        for value in _VALUES:
            expected = client("POST", view, {name: value})
            answer = client("POST", f"{db}/_all_docs", {name: value})
            assert answer.status == expected.status, (name, value, answer.json)
            if expected.status == 400:
                assert answer.json == expected.json, (name, value)


# -- compressible attachments (settee.serve.encoding) --------------------------------------------

_LOREM = b"Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 40
_ATTACHED = {
    "lorem.txt": ("text/plain", _LOREM),
    "data.json": ("application/json; charset=utf-8", b'{"a": [1, 2, 3]}' * 20),
    "data.bin": ("application/octet-stream", _LOREM),
    "foo.test": ("application/test", b"this is 21 chars long"),
}


def _couch_gzip(data: bytes) -> bytes:
    """What couch_stream:gzip_init stores: zlib's gzip wrapper at level 8."""
    z = zlib.compressobj(8, zlib.DEFLATED, 16 + zlib.MAX_WBITS, 8)
    return z.compress(data) + z.flush()


def _attach_all(client: Client, db: str, doc_id: str) -> str:
    atts = {
        name: {"content_type": ctype, "data": base64.b64encode(data).decode()}
        for name, (ctype, data) in _ATTACHED.items()
    }
    return put(client, db, doc_id, {"_attachments": atts})


def _check_encoding_info(attachments: dict[str, Any]) -> None:
    for name, (ctype, data) in _ATTACHED.items():
        att = attachments[name]
        if ctype.startswith(("text/", "application/json")):
            assert att["encoding"] == "gzip", name
            assert att["encoded_length"] == len(_couch_gzip(data)), name
            assert att.get("length", len(data)) == len(data), name  # inline: no length
        else:
            assert "encoding" not in att and "encoded_length" not in att, name


def test_att_encoding_info_shows_compressible_attachments_as_gzip(client: Client, db: str) -> None:
    # couch_db:with_stream gzips the default compressible_types (text/*,
    # application/json, ...) and couch_att:to_json shows it with att_encoding_info
    # (attachments_multipart_test.exs: baz.txt, text/plain, is "gzip").
    _attach_all(client, db, "d")
    plain = client("GET", f"{db}/d").json["_attachments"]
    assert all("encoding" not in att for att in plain.values())
    _check_encoding_info(client("GET", f"{db}/d?att_encoding_info=true").json["_attachments"])
    inline = client("GET", f"{db}/d?att_encoding_info=true&attachments=true").json
    _check_encoding_info(inline["_attachments"])
    assert base64.b64decode(inline["_attachments"]["lorem.txt"]["data"]) == _LOREM
    revs = client("GET", f"{db}/d?att_encoding_info=true&open_revs=all").json
    _check_encoding_info(revs[0]["ok"]["_attachments"])
    put(client, db, "_design/v", {"views": {"all": {"map": "function (doc) { emit(null); }"}}})
    rows = [
        client("GET", f"{db}/_changes?include_docs=true&att_encoding_info=true").json["results"],
        client("GET", f"{db}/_all_docs?include_docs=true&att_encoding_info=true").json["rows"],
        client("GET", f"{db}/_design/v/_view/all?include_docs=true&att_encoding_info=true").json[
            "rows"
        ],
    ]
    for listed in rows:
        (doc,) = [row["doc"] for row in listed if row["id"] == "d"]
        _check_encoding_info(doc["_attachments"])
    got = client("POST", f"{db}/_bulk_get?att_encoding_info=true", {"docs": [{"id": "d"}]})
    _check_encoding_info(got.json["results"][0]["docs"][0]["ok"]["_attachments"])


def test_a_compressible_attachment_is_sent_gzipped_and_never_by_ranges(
    client: Client, db: str
) -> None:
    # chttpd_db:db_attachment_req: Content-Encoding: gzip when the client accepts it,
    # the whole attachment otherwise, and ranges only of an identity-encoded one.
    _attach_all(client, db, "d")
    gz = client("GET", f"{db}/d/lorem.txt", headers={"Accept-Encoding": "gzip, deflate"})
    assert gz.status == 200 and gz.headers["Content-Encoding"] == "gzip"
    assert gz.headers["Accept-Ranges"] == "none"
    assert gzip.decompress(gz.raw) == _LOREM
    assert int(gz.headers["Content-Length"]) == len(_couch_gzip(_LOREM))
    assert "Content-MD5" not in gz.headers  # it would be of the gzip (RFC 2616 14.15)
    for accept in ({}, {"Accept-Encoding": "gzip;q=0, identity"}):
        whole = client("GET", f"{db}/d/lorem.txt", headers=accept)
        assert whole.raw == _LOREM and "Content-Encoding" not in whole.headers
    ranged = client("GET", f"{db}/d/lorem.txt", headers={"Range": "bytes=0-4"})
    assert (ranged.status, ranged.raw) == (200, _LOREM)
    binary = client("GET", f"{db}/d/data.bin", headers={"Range": "bytes=0-4", **gz.headers})
    assert (binary.status, binary.raw) == (206, _LOREM[:5])
    assert binary.headers["Accept-Ranges"] == "bytes"


_EXAMPLES = itertools.count()
_TYPES = st.sampled_from(
    [
        "text/plain",
        "Text/HTML; charset=utf-8",
        "application/json",
        "application/javascript",
        "application/xml",
        "application/jsonp",
        "application/octet-stream",
        "image/svg+xml",
        "textual/plain",
    ]
)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content_type=_TYPES, data=st.binary(max_size=300))
def test_what_att_encoding_info_says_is_what_a_gzip_get_sends(
    client: Client, db: str, content_type: str, data: bytes
) -> None:
    """Oracle: CouchDB's compressible_types (couch_db:compressible_att_type) decide
    the encoding; for an encoded attachment encoded_length is the body a GET that
    accepts gzip sends, and it unzips to the bytes; an identity one is sent as is."""
    doc_id = f"p{next(_EXAMPLES)}"  # the database is the test's, each example a document
    put_answer = client("PUT", f"{db}/{doc_id}/f", raw=data, headers={"Content-Type": content_type})
    assert put_answer.status == 201
    att = client("GET", f"{db}/{doc_id}?att_encoding_info=true").json["_attachments"]["f"]
    got = client("GET", f"{db}/{doc_id}/f", headers={"Accept-Encoding": "gzip"})
    major = content_type.split(";")[0].strip().lower()
    if major.startswith("text/") or major in _COMPRESSIBLE:
        assert (att["encoding"], got.headers["Content-Encoding"]) == ("gzip", "gzip")
        assert att["encoded_length"] == len(got.raw) == int(got.headers["Content-Length"])
        assert gzip.decompress(got.raw) == data
    else:
        assert "encoding" not in att and "Content-Encoding" not in got.headers
        assert got.raw == data
    assert att["length"] == len(data)


_COMPRESSIBLE = ("application/javascript", "application/json", "application/xml")


def _multipart_revisions(answer: Any) -> list[Any]:
    """The revisions of an ``open_revs`` multipart/mixed answer, each its parts."""
    outer = email.parser.BytesParser().parsebytes(
        b"Content-Type: " + answer.headers["Content-Type"].encode() + b"\r\n\r\n" + answer.raw
    )
    return list(outer.get_payload())


def test_open_revs_multipart_sends_only_attachments_after_atts_since(
    client: Client, db: str
) -> None:
    # couch_db:open_doc_revs applies atts_since (stubs at or below the ancestor's
    # position) and send_docs_multipart sends what is not a stub: a port of
    # attachments_multipart_test.exs's atts_since check.
    first = put(client, db, "d", {})
    octets = {"Content-Type": "application/octet-stream"}
    second = client("PUT", f"{db}/d/one.bin?rev={first}", raw=b"one", headers=octets).json["rev"]
    third = client("PUT", f"{db}/d/two.bin?rev={second}", raw=b"two", headers=octets).json["rev"]
    path = f'{db}/d?open_revs=["{third}"]&atts_since=["{second}"]'
    (related,) = _multipart_revisions(client("GET", path, headers={"Accept": "multipart/mixed"}))
    doc_part, *att_parts = related.get_payload()
    atts = json.loads(doc_part.get_payload(decode=True))["_attachments"]
    assert atts["one.bin"]["stub"] is True and atts["two.bin"]["follows"] is True
    assert [p.get_filename() for p in att_parts] == ["two.bin"]
    assert att_parts[0].get_payload(decode=True) == b"two"
    every = f'{db}/d?open_revs=["{third}"]'
    (related,) = _multipart_revisions(client("GET", every, headers={"Accept": "multipart/mixed"}))
    assert len(related.get_payload()) == 3


def test_multipart_answers_send_compressible_attachments_gzipped(client: Client, db: str) -> None:
    # chttpd_db:send_docs_multipart: att_encoding_info in the JSON, and the stored
    # (encoded) bytes as the part, with Content-Encoding (couch_httpd_multipart).
    rev = _attach_all(client, db, "d")
    answer = client("GET", f'{db}/d?open_revs=["{rev}"]', headers={"Accept": "multipart/mixed"})
    inner = email.parser.BytesParser().parsebytes(
        b"Content-Type: " + answer.headers["Content-Type"].encode() + b"\r\n\r\n" + answer.raw
    )
    (related,) = inner.get_payload()
    doc_part, *att_parts = related.get_payload()
    doc = json.loads(doc_part.get_payload(decode=True))
    _check_encoding_info(doc["_attachments"])
    assert all(att["follows"] for att in doc["_attachments"].values())
    sent = {p.get_filename(): p for p in att_parts}
    assert sent["lorem.txt"]["Content-Encoding"] == "gzip"
    assert gzip.decompress(sent["lorem.txt"].get_payload(decode=True)) == _LOREM
    assert sent["data.bin"]["Content-Encoding"] is None
    assert sent["data.bin"].get_payload(decode=True) == _LOREM
