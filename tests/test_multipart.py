"""impl/serve/multipart.py: a multipart/related body parsed as it arrives.

However the body is cut into chunks on the way (a delimiter, a CRLF or a gzip
member split across two reads), the document and every attachment's bytes come
out exactly as a parse of the whole body gives them.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from settee.serve.multipart import read_related
from settee.serve.protocol import HTTPError
from settee.spec.attachments import digest_of

BOUNDARY = "abc123"
CONTENT_TYPE = f'multipart/related; boundary="{BOUNDARY}"'

#: Part contents that look like the framing: CRLFs, near-delimiters, blank lines.
TRICKY = st.lists(
    st.sampled_from([b"\r\n", b"--", b"--abc12", b"\r\n--abc12", b"\r\n\r\n", b"x", b"\x00", b"-"]),
    max_size=12,
).map(b"".join)


def _body(doc: dict[str, Any], parts: list[tuple[bytes, bool]]) -> bytes:
    body = f"--{BOUNDARY}\r\nContent-Type: application/json\r\n\r\n".encode()
    body += json.dumps(doc).encode()
    for data, with_headers in parts:
        body += f"\r\n--{BOUNDARY}\r\n".encode()
        body += b"Content-Type: application/x\r\n\r\n" if with_headers else b"\r\n"
        body += data
    return body + f"\r\n--{BOUNDARY}--\r\n".encode()


async def _chunks(body: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    start = 0
    for cut in sorted(set(cuts)):
        yield body[start:cut]
        start = cut
    yield body[start:]


async def _inline(fn: Any, *args: Any) -> Any:
    return fn(*args)


def _parse(body: bytes, cuts: list[int], limit: int = 1 << 30) -> dict[str, Any]:
    return asyncio.run(read_related(_chunks(body, cuts), CONTENT_TYPE, _inline, limit))


@settings(max_examples=150)
@given(
    contents=st.lists(st.tuples(TRICKY | st.binary(max_size=300), st.booleans()), max_size=3),
    gzipped=st.lists(st.booleans(), min_size=3, max_size=3),
    cuts=st.lists(st.integers(0, 2000), max_size=12),
)
def test_any_chunking_gives_the_same_document_and_bytes(
    contents: list[tuple[bytes, bool]], gzipped: list[bool], cuts: list[int]
) -> None:
    atts = {}
    sent = []
    for i, (data, with_headers) in enumerate(contents):
        att: dict[str, Any] = {
            "follows": True,
            "content_type": "application/x",
            "length": len(data),
        }
        if gzipped[i]:
            att["encoding"] = "gzip"
        atts[f"f{i}"] = att
        sent.append((gzip.compress(data) if gzipped[i] else data, with_headers))
    doc = {"_id": "d", "v": 1, "_attachments": atts}
    parsed = _parse(_body(doc, sent), cuts)
    assert parsed["v"] == 1
    for i, (data, _) in enumerate(contents):
        got = parsed["_attachments"][f"f{i}"]["data"]
        assert got.read() == data and got.length == len(data) and got.digest == digest_of(data)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"--abc123\r\nContent-Type: application/json\r\n\r\n{}", "not closed"),
        (b"--abc123--", "no parts"),
        (b"--abc123\r\n\r\n{}\r\n--abc123\r\n\r\nextra\r\n--abc123--", "0 attachments"),
        (b"--abc123\r\n\r\n{}\r\n--abc123X\r\n", "line break"),
        (b"--abc123\r\nContent-Type: x", "not closed"),
    ],
)
def test_malformed_bodies_are_400(body: bytes, reason: str) -> None:
    for cuts in ([], list(range(len(body)))):
        with pytest.raises(HTTPError, match=reason) as caught:
            _parse(body, cuts)
        assert caught.value.status == 400


def test_a_part_past_the_limit_is_413_even_when_gzip_makes_it_small() -> None:
    bomb = gzip.compress(bytes(10_000_000))
    doc = {"_id": "d", "_attachments": {"z": {"follows": True, "encoding": "gzip"}}}
    with pytest.raises(HTTPError) as caught:
        _parse(_body(doc, [(bomb, True)]), [], limit=1_000_000)
    assert caught.value.status == 413
    assert len(bomb) < 1_000_000  # the limit was met by decoding, not by the body


def test_a_gzip_part_may_carry_the_digest_of_its_bytes_as_sent() -> None:
    """CouchDB digests a gzip-encoded attachment as it was sent (found in review:
    such parts from a replicator were refused); the digest of the decoded bytes
    is accepted too, anything else is not."""
    sent = gzip.compress(b"hello hello hello")
    for digest in (digest_of(sent), digest_of(b"hello hello hello")):
        att = {"follows": True, "encoding": "gzip", "digest": digest}
        parsed = _parse(_body({"_id": "d", "_attachments": {"a": att}}, [(sent, True)]), [])
        assert parsed["_attachments"]["a"]["data"].read() == b"hello hello hello"
    att = {"follows": True, "encoding": "gzip", "digest": digest_of(b"other")}
    with pytest.raises(HTTPError, match="digest"):
        _parse(_body({"_id": "d", "_attachments": {"a": att}}, [(sent, True)]), [])


def test_length_and_digest_must_match_the_part() -> None:
    doc = {"_id": "d", "_attachments": {"a": {"follows": True, "length": 3}}}
    with pytest.raises(HTTPError, match="length says 3"):
        _parse(_body(doc, [(b"four", True)]), [])
    for length in (True, "1", 1.0):  # found by an adversarial client: True counted as 1
        doc = {"_id": "d", "_attachments": {"a": {"follows": True, "length": length}}}
        with pytest.raises(HTTPError, match="length says"):
            _parse(_body(doc, [(b"x", True)]), [])
    doc = {"_id": "d", "_attachments": {"a": {"follows": True, "digest": digest_of(b"x")}}}
    with pytest.raises(HTTPError, match="digest"):
        _parse(_body(doc, [(b"y", False)]), [])
