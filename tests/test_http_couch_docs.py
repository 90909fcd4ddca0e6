"""Document requests as CouchDB 3 answers them, checked against its source:
COPY (chttpd_db:db_doc_req), ``batch=ok``, couch_doc:validate_docid's and
transfer_fields's reasons, "Invalid rev format" (couch_doc:parse_rev), GET with
``latest`` (as PouchDB's suite expects it), the ETag of answers with meta
information (chttpd_db:send_doc) and ``_local`` documents, whose revisions
CouchDB never checks (couch_db_updater).
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from tests import test_http
from tests.test_http import MISSING, Client, make_conflict, put

# tests/test_http.py's fixtures: one server for this module, a fresh database per test.
server, client, db = test_http.server, test_http.client, test_http.db

INVALID_REV = {"error": "bad_request", "reason": "Invalid rev format"}


def _copy(client: Client, path: str, destination: str | None, **headers: str) -> Any:
    given = headers | ({"Destination": destination} if destination is not None else {})
    return client("COPY", path, headers=given)


def _illegal(reason: str) -> dict[str, str]:
    return {"error": "illegal_docid", "reason": reason}


def _invalid(reason: str) -> dict[str, str]:
    return {"error": "doc_validation", "reason": reason}


# -- COPY ----------------------------------------------------------------------------------------


def test_copy_writes_the_source_with_its_attachments_under_the_destination(
    client: Client, db: str
) -> None:
    rev = put(client, db, "src", {"v": 1})
    attached = client(
        "PUT", f"{db}/src/note.txt?rev={rev}", raw=b"hello", headers={"Content-Type": "text/plain"}
    )
    assert attached.status == 201
    copied = _copy(client, f"{db}/src", "dst")
    assert copied.status == 201
    assert copied.json == {"ok": True, "id": "dst", "rev": copied.json["rev"]}
    assert copied.headers["ETag"] == f'"{copied.json["rev"]}"'
    assert copied.headers["Location"].endswith(f"{db}/dst")
    assert client("GET", f"{db}/dst").json["v"] == 1
    assert client("GET", f"{db}/dst/note.txt").raw == b"hello"


def test_copy_over_an_existing_destination_needs_its_rev(client: Client, db: str) -> None:
    put(client, db, "src", {"v": "new"})
    old = put(client, db, "dst", {"v": "old"})
    assert _copy(client, f"{db}/src", "dst").status == 409
    over = _copy(client, f"{db}/src", f"dst?rev={old}")
    assert over.status == 201 and over.json["rev"].startswith("2-")
    assert client("GET", f"{db}/dst").json["v"] == "new"
    assert _copy(client, f"{db}/src", "dst?rev=junk").json == INVALID_REV


def test_copy_of_a_named_revision_and_of_design_and_local_documents(
    client: Client, db: str
) -> None:
    first = put(client, db, "src", {"v": 1})
    put(client, db, "src", {"v": 2, "_rev": first})
    assert _copy(client, f"{db}/src?rev={first}", "old").status == 201
    assert client("GET", f"{db}/old").json["v"] == 1
    put(client, db, "_design/a", {"views": {}})
    assert _copy(client, f"{db}/_design/a", "_design/b").status == 201
    assert client("GET", f"{db}/_design/b").json["views"] == {}
    client("PUT", f"{db}/_local/x", {"seq": 7})
    local = _copy(client, f"{db}/_local/x", "_local/y")
    assert (local.status, local.json["rev"]) == (201, "0-1")
    assert client("GET", f"{db}/_local/y").json == {"_id": "_local/y", "_rev": "0-1", "seq": 7}


def test_copy_destination_is_unquoted_and_its_url_encoded(client: Client, db: str) -> None:
    put(client, db, "src", {"v": 1})
    copied = _copy(client, f"{db}/src", "a%2Fb+c")
    assert copied.json["id"] == "a/b c"
    assert copied.headers["Location"].endswith(f"{db}/a%2Fb%20c")


def test_copy_refuses_a_missing_or_absolute_destination(client: Client, db: str) -> None:
    put(client, db, "src", {"v": 1})
    missing = _copy(client, f"{db}/src", None)
    assert (missing.status, missing.json) == (
        400,
        {"error": "bad_request", "reason": "Destination header is mandatory for COPY."},
    )
    absolute = _copy(client, f"{db}/src", "http://elsewhere/db/dst")
    assert absolute.json == {"error": "bad_request", "reason": "Destination URL must be relative."}
    assert _copy(client, f"{db}/src", "_bad").json == _illegal(
        "Only reserved document ids may start with underscore."
    )
    assert _copy(client, f"{db}/nope", "dst").json == MISSING


def test_a_document_path_offers_copy_in_its_405(client: Client, db: str) -> None:
    """chttpd_db:db_doc_req's last clause: POST (a form upload) and COPY too."""
    answer = client("PATCH", f"{db}/doc", {})
    assert answer.status == 405
    assert answer.json["reason"] == "Only DELETE,GET,HEAD,POST,PUT,COPY allowed"
    assert answer.headers["Allow"] == "DELETE,GET,HEAD,POST,PUT,COPY"


# -- batch=ok ------------------------------------------------------------------------------------


def test_batch_put_with_identical_ids_is_accepted_twice(client: Client, db: str) -> None:
    """batch_save_test.exs: both are 202 with no rev; the second write conflicts
    and is logged, not answered (chttpd_db spawns it)."""
    for value in (1, 2):
        answer = client("PUT", f"{db}/same?batch=ok", {"v": value})
        assert (answer.status, answer.json) == (202, {"ok": True, "id": "same"})
    assert client("GET", f"{db}/same").json["v"] == 1


def test_batch_post_of_an_existing_id_is_accepted(client: Client, db: str) -> None:
    put(client, db, "there", {"v": 1})
    answer = client("POST", f"{db}?batch=ok", {"_id": "there", "v": 2})
    assert (answer.status, answer.json) == (202, {"ok": True, "id": "there"})
    assert client("GET", f"{db}/there").json["v"] == 1
    refused = client("PUT", f"{db}/x?batch=ok", {"_rev": "junk"})
    assert (refused.status, refused.json) == (400, INVALID_REV)


# -- document ids --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc_id", "reason"),
    [
        (5, "Document id must be a string"),
        (None, "Document id must be a string"),
        ("", "Document id must not be empty"),
        ("_design/", "Illegal document id `_design/`"),
        ("_local/", "Illegal document id `_local/`"),
        ("_nope", "Only reserved document ids may start with underscore."),
    ],
    ids=["int", "null", "empty", "design", "local", "underscore"],
)
def test_bad_ids_posted_or_bulk(client: Client, db: str, doc_id: Any, reason: str) -> None:
    posted = client("POST", db, {"_id": doc_id})
    assert (posted.status, posted.json) == (400, _illegal(reason))
    bulk = client("POST", f"{db}/_bulk_docs", {"docs": [{"_id": "fine"}, {"_id": doc_id}]})
    assert (bulk.status, bulk.json) == (400, _illegal(reason))
    assert client("GET", f"{db}/fine").status == 404


def test_a_delete_or_copy_of_an_id_no_write_accepts_is_missing(client: Client, db: str) -> None:
    """Found probing: these were 400 bad_request with the engine's own reason.
    chttpd_db's DELETE and COPY open the document first (fabric:open_doc checks no
    id), so an id no document can have is 404 missing; an attachment write naming
    a rev opens it by fabric:open_revs, 409 missing_rev."""
    for path in ("_nope", "_nope?rev=1-abc", "_design", "_design%2F", "_nope/att"):
        deleted = client("DELETE", f"{db}/{path}")
        assert (deleted.status, deleted.json) == (404, MISSING), path
    assert (_copy(client, f"{db}/_nope", "x").status, client("GET", f"{db}/x").status) == (404, 404)
    missing_rev = {"error": "not_found", "reason": "missing_rev"}
    for method in ("PUT", "DELETE"):
        att = client(method, f"{db}/_nope/att?rev=1-abc", raw=b"x")
        assert (att.status, att.json) == (409, missing_rev), method


def test_an_id_that_is_not_utf8_is_refused(client: Client, db: str) -> None:
    posted = client("POST", db, raw=b'{"_id": "a\\ud800"}')
    assert (posted.status, posted.json) == (400, _illegal("Document id must be valid UTF-8"))
    put_ = client("PUT", f"{db}/ok", raw=b'{"_id": "\\ud800"}')
    assert put_.json == _illegal("Document id must be valid UTF-8")


def test_an_absent_id_is_still_generated(client: Client, db: str) -> None:
    posted = client("POST", db, {"v": 1})
    assert posted.status == 201 and len(posted.json["id"]) == 32
    rows = client("POST", f"{db}/_bulk_docs", {"docs": [{"v": 1}]}).json
    assert len(rows[0]["id"]) == 32


def test_a_put_writes_the_urls_id_over_the_bodys(client: Client, db: str) -> None:
    """chttpd_db:couch_doc_from_req sets the document's id to the URL's, once the
    body's own ``_id`` has passed couch_doc's checks."""
    made = client("PUT", f"{db}/url", {"_id": "body", "v": 1})
    assert (made.status, made.json["id"]) == (201, "url")
    assert client("GET", f"{db}/url").json["v"] == 1
    assert client("GET", f"{db}/body").status == 404


def test_bulk_get_answers_a_bad_id_with_an_error_row(client: Client, db: str) -> None:
    asked = {"docs": [{"id": "_nope"}, {"id": 5}, {"id": ""}]}
    results = client("POST", f"{db}/_bulk_get", asked).json["results"]
    reasons = [
        "Only reserved document ids may start with underscore.",
        "Document id must be a string",
        "Document id must not be empty",
    ]
    for result, item, reason in zip(results, asked["docs"], reasons, strict=True):
        error = {"id": item["id"], "rev": None} | _illegal(reason)
        assert result == {"id": item["id"], "docs": [{"error": error}]}


def test_bulk_get_answers_a_bad_rev_with_couchs_reason(client: Client, db: str) -> None:
    """chttpd_db:bulk_get_parse_doc_query reads an item's rev with couch_doc:parse_rev:
    its error row says "Invalid rev format" and nothing more."""
    put(client, db, "d", {})
    results = client("POST", f"{db}/_bulk_get", {"docs": [{"id": "d", "rev": "x"}]}).json
    error = {"id": "d", "rev": "x"} | INVALID_REV
    assert results["results"] == [{"id": "d", "docs": [{"error": error}]}]


# -- revisions -----------------------------------------------------------------------------------


def test_a_malformed_rev_anywhere_is_invalid_rev_format(client: Client, db: str) -> None:
    put(client, db, "d", {"v": 1})
    bad = urllib.parse.quote(json.dumps(["junk"]))
    answers = [
        client("GET", f"{db}/d?rev=junk"),
        client("GET", f"{db}/d?rev=junk&latest=true"),
        client("GET", f"{db}/d?open_revs={bad}"),
        client("GET", f"{db}/d?atts_since={bad}&attachments=true"),
        client("PUT", f"{db}/d?rev=junk", {"v": 2}),
        client("PUT", f"{db}/d", {"v": 2}, headers={"If-Match": '"junk"'}),
        client("PUT", f"{db}/d", {"v": 2, "_rev": "junk"}),
        client("PUT", f"{db}/d", {"v": 2, "_rev": 5}),
        client("POST", db, {"_id": "e", "_rev": "one-1"}),
        client("DELETE", f"{db}/d?rev=junk"),
        client("DELETE", f"{db}/d", headers={"If-Match": "junk"}),
    ]
    assert [(a.status, a.json) for a in answers] == [(400, INVALID_REV)] * len(answers)
    not_a_list = client("GET", f"{db}/d?open_revs=%7B%7D")
    assert not_a_list.json == {"error": "bad_request", "reason": "Invalid list of revisions"}


@pytest.mark.parametrize(
    ("members", "reason"),
    [
        ({"_deleted": "yes"}, "Bad special document member: _deleted"),
        ({"_attachments": []}, "Bad special document member: _attachments"),
        ({"_revisions": []}, "Bad special document member: _revisions"),
        ({"_revisions": {"start": "1", "ids": []}}, "_revisions.start isn't an integer."),
        ({"_revisions": {"start": 1, "ids": "x"}}, "_revisions.ids isn't a array."),
        ({"_revisions": {"start": 1, "ids": [1]}}, "RevId isn't a string"),
        ({"_revisions": {"start": 1, "ids": ["z" * 32]}}, "RevId isn't a valid hexadecimal"),
    ],
    ids=["deleted", "attachments", "revisions", "start", "ids", "id-type", "id-hex"],
)
def test_malformed_special_members_are_doc_validation(
    client: Client, db: str, members: dict[str, Any], reason: str
) -> None:
    answer = client("PUT", f"{db}/d", {"v": 1, **members})
    assert (answer.status, answer.json) == (400, _invalid(reason))


def test_a_rev_after_revisions_is_not_read(client: Client, db: str) -> None:
    """couch_doc:transfer_fields skips a ``_rev`` that follows ``_revisions`` (the
    revision is known by then) without parsing it; one before it is still checked."""
    revisions = {"start": 1, "ids": ["a" * 32]}
    after = {"_id": "r", "_revisions": revisions, "_rev": "junk"}
    stored = client("POST", f"{db}/_bulk_docs", {"docs": [after], "new_edits": False})
    assert (stored.status, stored.json) == (201, [])
    assert client("GET", f"{db}/r").json["_rev"] == "1-" + "a" * 32
    before = {"_id": "s", "_rev": "junk", "_revisions": revisions}
    refused = client("POST", f"{db}/_bulk_docs", {"docs": [before], "new_edits": False})
    assert (refused.status, refused.json) == (400, INVALID_REV)


def test_get_with_latest_follows_the_revs_own_branch(client: Client, db: str) -> None:
    """PouchDB's suite (test.get.js 5857) expects ?rev=R&latest=true to answer the
    leaf of R's branch, a deleted one included, where CouchDB 3.2+ opens the winner:
    settee follows PouchDB, whose replication is what talks to it (README)."""
    first = put(client, db, "d", {"v": 1})
    gone = client("DELETE", f"{db}/d?rev={first}").json["rev"]
    tomb = client("GET", f"{db}/d?rev={first}&latest=true")
    assert (tomb.status, tomb.json["_rev"], tomb.json.get("_deleted")) == (200, gone, True)
    winner, loser = make_conflict(client, db, "c")
    assert client("GET", f"{db}/c?rev={loser}&latest=true").json["_rev"] == loser
    assert client("GET", f"{db}/c?rev={winner}&latest=true").json["_rev"] == winner


# -- ETag and meta information -------------------------------------------------------------------


def test_no_etag_on_a_get_with_meta_information(client: Client, db: str) -> None:
    rev = put(client, db, "d", {"v": 1})
    tag = f'"{rev}"'
    for query in ("meta=true", "revs_info=true", "local_seq=true"):
        answer = client("GET", f"{db}/d?{query}", headers={"If-None-Match": tag})
        assert answer.status == 200 and "ETag" not in answer.headers, query
    # Without conflicts there is no meta, and the ETag stays (doc_meta_info).
    for query in ("conflicts=true", "deleted_conflicts=true", "revs=true", f"rev={rev}"):
        assert client("GET", f"{db}/d?{query}").headers["ETag"] == tag, query
    make_conflict(client, db, "c")
    assert "ETag" not in client("GET", f"{db}/c?conflicts=true").headers


# -- _local documents ----------------------------------------------------------------------------


def test_local_writes_never_conflict(client: Client, db: str) -> None:
    """couch_db_updater:increment_local_doc_revs: no rev stores 0-1, 0-N stores
    0-N+1, whatever is stored (CouchDB 3 splits local docs off before any check)."""
    path = f"{db}/_local/cp"
    assert [client("PUT", path, {"n": n}).json["rev"] for n in (1, 2)] == ["0-1", "0-1"]
    assert client("PUT", path, {"n": 3, "_rev": "0-7"}).json["rev"] == "0-8"
    assert client("PUT", path, {"n": 4, "_rev": "0-1"}).json["rev"] == "0-2"
    assert client("GET", path).json == {"_id": "_local/cp", "_rev": "0-2", "n": 4}
    fresh = client("PUT", f"{db}/_local/fresh?rev=0-5", {"n": 5})
    assert (fresh.status, fresh.json["rev"]) == (201, "0-6")
    assert client("PUT", path, {"_rev": "1-abc"}).json == INVALID_REV
    assert client("PUT", path, {"_rev": "0-abc"}).json == INVALID_REV


def test_local_deletes_need_no_rev_but_an_existing_document(client: Client, db: str) -> None:
    client("PUT", f"{db}/_local/d", {"n": 1})
    gone = client("DELETE", f"{db}/_local/d")
    assert (gone.status, gone.json) == (200, {"ok": True, "id": "_local/d", "rev": "0-0"})
    assert client("GET", f"{db}/_local/d").json == MISSING
    assert client("DELETE", f"{db}/_local/d").status == 404
    client("PUT", f"{db}/_local/d", {"n": 1})
    assert client("DELETE", f"{db}/_local/d?rev=0-9").status == 200
    never = client("PUT", f"{db}/_local/never", {"_deleted": True})
    assert (never.status, never.json["rev"]) == (200, "0-0")


def test_local_etags_tell_two_bodies_of_one_rev_apart(client: Client, db: str) -> None:
    """couch_httpd:doc_etag hashes a local document's body with its rev: two writes
    without _rev both store 0-1."""
    first = client("PUT", f"{db}/_local/e", {"n": 1}).headers["ETag"]
    assert client("GET", f"{db}/_local/e").headers["ETag"] == first
    again = client("GET", f"{db}/_local/e", headers={"If-None-Match": first})
    assert again.status == 304
    second = client("PUT", f"{db}/_local/e", {"n": 2}).headers["ETag"]
    assert second != first
    assert client("GET", f"{db}/_local/e", headers={"If-None-Match": first}).status == 200


def _with_host(port: int, method: str, path: str, host: str, body: bytes, **headers: str) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True)
        for name, value in ({"Host": host, "Content-Length": str(len(body))} | headers).items():
            conn.putheader(name, value)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Location"), resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("host", ["x:abc", "x:99999999", "a@b:c"])
def test_bad_host_drops_location(server: Any, client: Client, db: str, host: str) -> None:
    """The Location of a write is built after the write: a Host header whose port is
    no number made it a 500 although the document was stored (found in review), so
    a client retried into a 409. Now the write answers 201 without Location."""
    rev = put(client, db, "src", {"v": 1})
    json_type = {"Content-Type": "application/json"}
    writes = [
        ("PUT", f"{db}/a", b"{}", json_type),
        ("POST", db, b'{"_id": "b"}', json_type),
        ("PUT", f"{db}/c/att", b"x", {"Content-Type": "text/plain"}),
        ("PUT", f"{db}/_local/l", b"{}", json_type),
        ("COPY", f"{db}/src", b"", {"Destination": "d"}),
        ("PUT", f"/hostdb{len(host)}{host[0]}", b"", {}),
    ]
    for method, path, body, headers in writes:
        status, location, raw = _with_host(server.port, method, path, host, body, **headers)
        assert (status, location) == (201, None), (method, path, raw)
    assert client("GET", f"{db}/a").status == 200 and client("GET", f"{db}/d").json["v"] == 1
    assert rev


def test_document_flags_are_on_for_true_alone(client: Client, db: str) -> None:
    """chttpd_db:parse_doc_query matches each flag's value "true" exactly and ignores
    any other: revs=TRUE, revs=yes and conflicts=1 are a plain GET, not a 400."""
    put(client, db, "a", {"v": 1})
    assert "_revisions" in client("GET", f"{db}/a?revs=true").json
    for query in ("revs=TRUE", "revs=yes", "conflicts=1", "meta=on", "latest=maybe"):
        r = client("GET", f"{db}/a?{query}")
        assert r.status == 200 and set(r.json) == {"_id", "_rev", "v"}, query
    r = client("PUT", f"{db}/b?new_edits=0", {"v": 2})  # only "false" turns edits off
    assert r.status == 201 and r.json["rev"].startswith("1-")


def test_local_documents_store_their_body_alone(client: Client, db: str) -> None:
    """couch_doc:transfer_fields takes _attachments and the read-only members out of
    a body, and a local document keeps its body alone; its rev comes from the body,
    ?rev= or If-Match, which must agree (couch_doc_from_req), and _revisions wins
    over _rev (found in review)."""
    body = {
        "_attachments": {"f": {"data": "YWJj", "content_type": "text/plain"}},
        "_conflicts": ["x"],
        "v": 1,
    }
    assert client("PUT", f"{db}/_local/att", body).status == 201
    assert client("GET", f"{db}/_local/att").json == {"_id": "_local/att", "_rev": "0-1", "v": 1}
    r = client("PUT", f"{db}/_local/r2?rev=0-3", {"_rev": "0-7"})
    assert (r.status, r.json["error"]) == (400, "bad_request")
    r = client("PUT", f"{db}/_local/r2", {"_rev": "0-7"}, headers={"If-Match": '"0-3"'})
    assert (r.status, r.json["error"]) == (400, "bad_request")
    assert client("PUT", f"{db}/_local/r2?rev=0-3", {}).json["rev"] == "0-4"
    r = client("PUT", f"{db}/_local/r", {"_revisions": {"start": 0, "ids": ["5"]}})
    assert (r.status, r.json["rev"]) == (201, "0-6")


def test_deleted_true_answers_a_tombstone_and_empty_open_revs_a_plain_read(
    client: Client, db: str
) -> None:
    """chttpd_db:parse_doc_query: deleted=true opens a deleted winner (200, the
    tombstone) where a plain GET is 404 deleted; open_revs=[] is no open_revs at all."""
    rev = put(client, db, "d", {"v": 1})
    assert client("GET", f"{db}/d?open_revs=[]").json == {"_id": "d", "_rev": rev, "v": 1}
    mixed = client("GET", f"{db}/d?open_revs=[]", headers={"Accept": "multipart/mixed"})
    assert mixed.status == 200 and mixed.json["_rev"] == rev
    # On a live document deleted=true changes nothing: its meta fields still come.
    live = client("GET", f"{db}/d?deleted=true&revs_info=true").json
    assert live["_revs_info"] == [{"rev": rev, "status": "available"}]
    gone = client("DELETE", f"{db}/d?rev={rev}").json["rev"]
    assert client("GET", f"{db}/d").status == 404
    tomb = client("GET", f"{db}/d?deleted=true")
    assert (tomb.status, tomb.json) == (200, {"_id": "d", "_rev": gone, "_deleted": True})
    assert client("GET", f"{db}/nope?deleted=true").status == 404


# -- "+" in the path -------------------------------------------------------------------------


def test_a_plus_in_the_path_is_a_space_and_percent_2b_is_a_plus(client: Client, db: str) -> None:
    """chttpd:unquote with decode_plus_to_space = true, CouchDB 3's default: the path's
    "+" decodes to a space in database, document and attachment names alike."""
    spaced = client("PUT", f"{db}/a+b", {"v": "space"})
    assert spaced.status == 201 and spaced.json["id"] == "a b"
    assert client("GET", f"{db}/a%2Bb").status == 404  # no document "a+b" yet
    plus = client("PUT", f"{db}/a%2Bb", {"v": "plus"})
    assert plus.status == 201 and plus.json["id"] == "a+b"
    assert client("GET", f"{db}/a%20b").json["v"] == "space"
    assert client("GET", f"{db}/a+b").json["v"] == "space"
    assert client("GET", f"{db}/a%2Bb").json["v"] == "plus"
    att = client(
        "PUT",
        f"{db}/a%2Bb/x+y.txt?rev={plus.json['rev']}",
        raw=b"hi",
        headers={"Content-Type": "text/plain"},
    )
    assert att.status == 201
    stubs = client("GET", f"{db}/a%2Bb").json["_attachments"]
    assert list(stubs) == ["x y.txt"]
    # A database name holds "+" only percent-encoded: "+" alone is a space, refused.
    assert client("PUT", "/plus+db").json["error"] == "illegal_database_name"
    assert client("PUT", "/plus%2Bdb").status == 201
    assert "plus+db" in client("GET", "/_all_dbs").json
    assert client("DELETE", "/plus%2Bdb").status == 200


def test_a_post_with_a_method_override_is_the_method_it_names(client: Client, db: str) -> None:
    """method_override_test.exs: X-HTTP-Method-Override on a POST makes it a PUT, a
    DELETE, a HEAD served as a GET; on any other method, or naming no method
    chttpd knows, it is ignored."""
    override = {"X-HTTP-Method-Override": "PUT"}
    r = client("POST", f"{db}/fnord", {"bob": "connie"}, headers=override)
    assert r.status == 201, r.raw
    assert client("GET", f"{db}/fnord").json["bob"] == "connie"
    r = client("POST", f"{db}/fnord", headers={"X-HTTP-Method-Override": "HEAD"})
    assert (r.status, r.json["bob"]) == (200, "connie"), r.raw
    rev = r.json["_rev"]
    r = client("POST", f"{db}/fnord?rev={rev}", headers={"X-HTTP-Method-Override": "DELETE"})
    assert r.status == 200, r.raw
    assert client("GET", f"{db}/fnord").status == 404
    assert client("GET", f"{db}/fnord2", {"bob": "c"}, headers=override).status == 404
    r = client("POST", f"{db}/fnord3", {"a": 1}, headers={"X-HTTP-Method-Override": "put"})
    assert r.status == 400, r.raw  # no method chttpd knows: a form POST, refused unsent


def test_location_follows_the_host_and_scheme_a_proxy_forwards(client: Client, db: str) -> None:
    """http_test.exs: a Location is on X-Forwarded-Host when a proxy sends one, and
    https when X-Forwarded-Ssl is on or X-Forwarded-Proto https (chttpd:absolute_uri);
    a forwarded host that names no host drops the header, the write stands."""
    r = client("PUT", f"{db}/test2", {}, headers={"X-Forwarded-Host": "mysite.com"})
    assert r.headers["Location"] == f"http://mysite.com{db}/test2"
    headers = {"X-Forwarded-Host": "mysite.com:8443", "X-Forwarded-Proto": "https"}
    r = client("PUT", f"{db}/test3", {}, headers=headers)
    assert r.headers["Location"] == f"https://mysite.com:8443{db}/test3"
    r = client("PUT", f"{db}/test4", {}, headers={"X-Forwarded-Ssl": "on"})
    assert r.headers["Location"].startswith("https://127.0.0.1:")
    r = client("PUT", f"{db}/test5", {}, headers={"X-Forwarded-Host": "a/b?c"})
    assert r.status == 201 and "Location" not in r.headers
    assert client("GET", f"{db}/test5").status == 200


def _form(fields: list[tuple[str, str | None, str, bytes]]) -> tuple[bytes, str]:
    """A multipart/form-data body of (name, filename or None, content type, data)."""
    boundary = "settee-form-boundary"
    parts = []
    for name, filename, content_type, data in fields:
        disposition = f'form-data; name="{name}"' + (
            f'; filename="{filename}"' if filename is not None else ""
        )
        head = f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
        head += f"Content-Type: {content_type}\r\n\r\n"
        parts.append(head.encode() + data + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def test_a_form_post_uploads_attachments_to_a_document(client: Client, db: str) -> None:
    """chttpd_db's POST to a document: a browser's form, from a page of this server
    (Referer), adds each file of its _attachments field under the file's name to
    the revision its _rev names, keeping the others; form_submit_test.exs: any
    other content type is 415 bad_content_type."""
    referer = {"Referer": f"http://127.0.0.1:{client.port}/_utils"}
    rev = put(
        client,
        db,
        "doc",
        {"a": 1, "_attachments": {"old.txt": {"content_type": "text/plain", "data": "b2xk"}}},
    )
    body, content_type = _form(
        [
            ("_rev", None, "text/plain", rev.encode()),
            ("_attachments", "new.bin", "application/octet-stream", b"\x00\x01\xff"),
        ]
    )
    r = client("POST", f"{db}/doc", raw=body, headers={**referer, "Content-Type": content_type})
    assert r.status == 201 and r.json["ok"] and r.json["rev"].startswith("2-"), r.raw
    assert r.headers["ETag"] == f'"{r.json["rev"]}"'
    doc = client("GET", f"{db}/doc").json
    assert doc["a"] == 1 and sorted(doc["_attachments"]) == ["new.bin", "old.txt"]
    assert client("GET", f"{db}/doc/new.bin").raw == b"\x00\x01\xff"
    assert client("GET", f"{db}/doc/old.txt").raw == b"old"
    body, content_type = _form([("_doc", None, "application/json", b'{"b": 2}')])
    r = client("POST", f"{db}/fresh", raw=body, headers={**referer, "Content-Type": content_type})
    assert r.status == 201, r.raw
    assert client("GET", f"{db}/fresh").json["b"] == 2
    form = {**referer, "Content-Type": "application/x-www-form-urlencoded"}
    r = client("POST", f"{db}/baz", raw=b"a=b", headers=form)
    assert (r.status, r.json) == (
        415,
        {"error": "bad_content_type", "reason": "Content-Type must be multipart/form-data"},
    )
    r = client("POST", f"{db}/doc", raw=body, headers={"Content-Type": content_type})
    assert (r.status, r.json["reason"]) == (400, "Referer header required."), r.raw
    elsewhere = {"Referer": "http://evil.example/", "Content-Type": content_type}
    r = client("POST", f"{db}/doc", raw=body, headers=elsewhere)
    assert (r.status, r.json["reason"]) == (400, "Referer header must match host."), r.raw
    body, content_type = _form([("_rev", None, "text/plain", b"1-" + b"0" * 32)])
    r = client("POST", f"{db}/doc", raw=body, headers={**referer, "Content-Type": content_type})
    assert r.status == 404, r.raw  # no such revision to start from
    assert client("GET", f"{db}/doc").json["_rev"].startswith("2-")


def test_a_document_past_max_document_size_is_413_naming_it(tmp_path: Any) -> None:
    """couch_doc:from_json_obj_validate throws request_entity_too_large with the
    document's id, which chttpd answers 413 document_too_large, for a PUT, a POST
    and a _bulk_docs (which then stores none). It was 400 bad_request."""
    from settee.serve import start_server

    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False, max_document_size=1000)
    try:
        small = Client(handle.port)
        assert small("PUT", "/big").status == 201
        too_large = {"x": "a" * 2000}
        for method, path, body in [
            ("PUT", "/big/doc", too_large),
            ("PUT", "/big/doc?new_edits=false", {**too_large, "_rev": "1-abc"}),
            ("POST", "/big", {**too_large, "_id": "doc"}),
            ("POST", "/big/_bulk_docs", {"docs": [{"_id": "fine"}, {**too_large, "_id": "doc"}]}),
        ]:
            r = small(method, path, body)
            assert (r.status, r.json) == (413, {"error": "document_too_large", "reason": "doc"})
        assert small("GET", "/big/fine").status == 404
    finally:
        handle.stop()
