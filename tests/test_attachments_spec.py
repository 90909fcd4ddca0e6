"""The attachment rules of SEMANTICS.md §18 (settee.spec.attachments), before storage.

Examples follow CouchDB (couch_att:from_json, couch_doc:merge_stubs,
couch_db:new_revid, chttpd's validate_attachment_name); the properties check
what every store will rely on: chunks rebuild the bytes, resolution keeps the
document's order and never invents a stub, digests are CouchDB's.
"""

from __future__ import annotations

import base64
import hashlib
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from settee.spec import attachments as atts
from settee.spec.errors import BadRequest
from settee.spec.revs import new_rev


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def test_digest_is_couchdbs_md5_base64() -> None:
    # CouchDB's docs show "md5-XUFAKrxLKna5cZ2REBfFkg==" for "hello".
    assert atts.digest_of(b"hello") == "md5-XUFAKrxLKna5cZ2REBfFkg=="
    assert atts.digest_of(b"") == "md5-" + b64(hashlib.md5(b"").digest())


def test_inline_and_stub_attachments_are_read_in_document_order() -> None:
    found = atts.validate_attachments(
        {
            "b.txt": {"content_type": "text/plain", "data": b64(b"hi"), "length": 99},
            "a.bin": {"stub": True, "revpos": 2, "digest": "ignored"},
            "c": {"data": ""},
            # Only an absent content_type defaults (couch_util:get_value with a
            # default): an empty one is kept (mutant: ``get(...) or DEFAULT`` passed).
            "d": {"data": "", "content_type": ""},
        }
    )
    assert found == (
        atts.Inline("b.txt", "text/plain", b"hi", None),
        atts.Stub("a.bin", 2),
        atts.Inline("c", atts.DEFAULT_CONTENT_TYPE, b"", None),
        atts.Inline("d", "", b"", None),
    )


class _NotReady:
    """A non-blocking file with nothing to read yet."""

    def read(self, size: int = -1) -> None:
        return None


class _Failing:
    def read(self, size: int = -1) -> bytes:
        raise OSError(5, "Input/output error")


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ([], "must be a dict"),
        ({"_x": {"data": ""}}, "prohibited character '_'"),
        ({"": {"data": ""}}, "non-empty"),
        ({"a\ud800": {"data": ""}}, "UTF-8"),
        ({"a": "data"}, "must be a dict"),
        ({"a": {}}, "has no data"),
        ({"a": {"data": "not base64!"}}, "^Invalid attachment data for a$"),
        ({"a": {"data": "aGk"}}, "Invalid attachment data"),  # padding missing
        # A vertical tab: not what Erlang skips.
        ({"a": {"data": "aGk=\x0b"}}, "Invalid attachment data"),
        ({"a": {"data": "é"}}, "Invalid attachment data"),
        # A stray '=' after whole groups: Python's decoder takes these, Erlang's (and so
        # CouchDB, attachments_test.exs "errors for bad attachment") refuses them.
        ({"foo.txt": {"data": "notBase64Encoded="}}, "Invalid attachment data for foo.txt"),
        ({"a": {"data": "YWJj="}}, "Invalid attachment data for a"),
        ({"a": {"data": "YWJj===="}}, "Invalid attachment data"),
        ({"a": {"data": "", "content_type": 5}}, "content_type"),
        ({"a": {"data": "", "content_type": None}}, "content_type"),  # not absent: not a str
        ({"a": {"data": "", "content_type": "text/plain\r\nX: y"}}, "control character"),
        ({"a": {"data": "", "content_type": "a\x00"}}, "control character"),
        # DEL is a control character too (RFC 5234 CTL; a Content-Type header cannot
        # hold it): a check of code points below 0x20 only passed every test.
        ({"a": {"data": "", "content_type": "text/plain\x7f"}}, "control character"),
        ({"a": {"data": "", "content_type": "a\ud800"}}, "not UTF-8"),
        ({"a": {"stub": True, "revpos": 0}}, "revpos"),
        ({"a": {"stub": True, "revpos": True}}, "revpos"),
        ({"a": {"follows": True}}, "multipart"),
        ({"a": {"data": io.StringIO("text")}}, "binary mode"),
        ({"a": {"data": _NotReady()}}, "non-blocking"),  # found in review: stored as b""
        ({"a": {"data": _Failing()}}, "failed"),
    ],
)
def test_bad_attachments_are_refused(value: object, match: str) -> None:
    with pytest.raises(BadRequest, match=match):
        atts.validate_attachments(value)


@pytest.mark.parametrize("text", ["aGk=\n", "aG\r\nk=", " a G k = ", "\taGk="])
def test_base64_whitespace_is_skipped_as_erlang_does(text: str) -> None:
    """CouchDB decodes inline data with base64:decode, which skips space, tab, CR
    and LF: line-wrapped base64 (Python's base64.encodebytes) is stored as its bytes."""
    [att] = atts.validate_attachments({"a": {"data": text}})
    assert isinstance(att, atts.Inline) and att.data == b"hi"


OLD = [
    atts.Stored("a", "text/plain", 2, atts.digest_of(b"hi"), 1, where="chunks-a"),
    atts.Stored("b", "image/png", 3, atts.digest_of(b"png"), 2, where="chunks-b"),
]


def test_stubs_take_the_previous_revisions_record_and_new_data_its_position() -> None:
    new = [atts.Stub("b"), atts.Inline("c", "text/plain", b"new", 7), atts.Stub("a", 1)]
    resolved = atts.resolve("doc", new, OLD, 3, new_edits=True)
    assert resolved == [OLD[1], atts.Inline("c", "text/plain", b"new", 3), OLD[0]]
    replicated = atts.resolve("doc", new, OLD, 3, new_edits=False)
    assert replicated[1] == atts.Inline("c", "text/plain", b"new", 7)  # the sender's revpos


@pytest.mark.parametrize(
    ("stub", "previous", "reason"),
    [
        (atts.Stub("a"), None, "Invalid attachment stub in doc for a"),  # as couch_db 3.5
        (atts.Stub("zz"), OLD, "Invalid attachment stub in doc for zz"),
        (atts.Stub("a", 5), OLD, "Invalid attachment stub in doc for a"),
    ],
)
def test_a_stub_that_finds_nothing_is_missing_stub(
    stub: atts.Stub, previous: list[atts.Stored] | None, reason: str
) -> None:
    with pytest.raises(atts.MissingStub) as raised:
        atts.resolve("doc", [stub], previous, 2, new_edits=True)
    assert raised.value.error == "missing_stub" and raised.value.reason == reason


def test_revision_ids_digest_attachments_and_stay_unchanged_without() -> None:
    body = {"x": 1}
    plain = new_rev(None, False, body)
    assert new_rev(None, False, body, ()) == plain
    with_att = new_rev(None, False, body, atts.rev_digests([OLD[0]]))
    assert with_att != plain and with_att.startswith("1-")
    inline = [atts.Inline("a", "text/plain", b"hi", 1)]
    assert new_rev(None, False, body, atts.rev_digests(inline)) == with_att
    other_type = [atts.Inline("a", "text/html", b"hi", 1)]
    assert new_rev(None, False, body, atts.rev_digests(other_type)) != with_att


def test_reads_render_stubs_or_data_in_couchdbs_key_order() -> None:
    stub = atts.render(OLD[0], None)
    assert list(stub) == ["content_type", "revpos", "digest", "length", "stub"]
    assert stub["length"] == 2 and stub["stub"] is True
    full = atts.render(OLD[0], b"hi")
    assert full == {
        "content_type": "text/plain",
        "revpos": 1,
        "digest": OLD[0].digest,
        "data": b64(b"hi"),
    }


def test_atts_since_counts_only_the_revisions_own_path() -> None:
    """couch_db's find_ancestor_rev_pos: the newest named revision among ``rev`` and
    its ancestors; descendants, other branches and unknown revisions count for nothing."""
    tree = {
        "1-a": [None, False],
        "2-b": ["1-a", False],
        "3-c": ["2-b", False],
        "2-x": ["1-a", False],  # another branch
    }
    assert atts.since_position(tree, "3-c", ["2-b", "9-zz", "nonsense"]) == 2
    assert atts.since_position(tree, "3-c", ["1-a", "3-c"]) == 3
    assert atts.since_position(tree, "3-c", []) == 0
    assert atts.since_position(tree, "2-x", ["2-b", "3-c"]) == 0
    assert atts.since_position(tree, "2-x", ["2-b", "1-a"]) == 1
    assert atts.since_position(tree, "1-a", ["3-c"]) == 0


@given(st.binary(max_size=3 * atts.CHUNK_SIZE + 5))
def test_chunks_rebuild_the_bytes_within_the_chunk_size(data: bytes) -> None:
    chunks = atts.chunked(data)
    assert b"".join(chunks) == data
    assert all(len(c) <= atts.CHUNK_SIZE for c in chunks)
    assert len(chunks) == max(1, -(-len(data) // atts.CHUNK_SIZE))


NAMES = st.sampled_from(["a", "b", "c", "d"])


@given(
    previous=st.lists(NAMES, unique=True),
    wanted=st.lists(st.tuples(NAMES, st.booleans()), unique_by=lambda t: t[0]),
)
def test_resolution_keeps_order_and_never_invents_a_stub(
    previous: list[str], wanted: list[tuple[str, bool]]
) -> None:
    old = [atts.Stored(n, "t", 1, atts.digest_of(n.encode()), 1) for n in previous]
    new: list[atts.Inline | atts.Stub] = [
        atts.Stub(n) if stub else atts.Inline(n, "t", n.encode()) for n, stub in wanted
    ]
    if any(stub and n not in previous for n, stub in wanted):
        with pytest.raises(atts.MissingStub):
            atts.resolve("d", new, old, 2, new_edits=True)
        return
    resolved = atts.resolve("d", new, old, 2, new_edits=True)
    assert [a.name for a in resolved] == [n for n, _ in wanted]
    for (_name, stub), att in zip(wanted, resolved, strict=True):
        assert isinstance(att, atts.Stored) == stub
        assert att.revpos == (1 if stub else 2)
