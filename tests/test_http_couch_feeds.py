"""Replication-side requests as CouchDB 3.5 answers them, checked against its
source: ``_changes``' refusals (chttpd_db:handle_changes_req,
fabric_view_changes:validate_start_seq), ``_revs_diff``/``_missing_revs`` and
``_bulk_get``'s reading of revisions and flags (couch_doc:parse_rev,
chttpd_db:parse_doc_query, bulk_get_parse_arg), attachment headers
(chttpd_db:db_attachment_req) and ``_all_docs``' parameters
(couch_mrview_http:parse_param).
"""

from __future__ import annotations

import pytest

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


def test_descending_changes_ignore_since(client: Client, db: str) -> None:
    # fabric_view_changes:get_start_seq starts a descending feed at the update seq,
    # so since is never unpacked (nor refused).
    put(client, db, "a", {})
    answer = client("GET", f"{db}/_changes?descending=true&since=garbage")
    assert answer.status == 200
    assert [row["id"] for row in answer.json["results"]] == ["a"]


def test_changes_405_names_couchs_methods(client: Client, db: str) -> None:
    answer = client("PUT", f"{db}/_changes")
    assert answer.status == 405
    assert answer.json == {"error": "method_not_allowed", "reason": "Only GET,POST,HEAD allowed"}
