"""``changes`` tokens (impl/tokens.py): what ``decode_token`` accepts and refuses.

The proof treats tokens as opaque, so a decoder that accepts a token it should
refuse, or reads one back wrong where the machines' databases never reach, shows
only here (found by mutation testing).
"""

from __future__ import annotations

import base64
from typing import Any

import msgpack
import pytest

from settee.spec.errors import BadRequest
from settee.tokens import decode_token, encode_token


def _token(seqs: Any) -> str:
    payload = base64.urlsafe_b64encode(msgpack.packb(seqs)).rstrip(b"=").decode()
    return f"0-{payload}"


@pytest.mark.parametrize(
    "seqs", [[0], [7, 0, 3], [190], [254, 2**40], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]]
)
def test_a_token_reads_back_as_its_seqs_shard_by_shard(seqs: list[int]) -> None:
    token = encode_token(seqs)
    assert token.startswith(f"{sum(seqs)}-")
    assert decode_token(token, len(seqs), seqs) == seqs
    assert decode_token(token, len(seqs), [s + 1 for s in seqs]) == seqs


def test_zero_and_now_name_the_beginning_and_the_current_seqs() -> None:
    for zero in (0, "0"):
        assert decode_token(zero, 3, [4, 5, 6]) == [0, 0, 0]
    assert decode_token("now", 3, [4, 5, 6]) == [4, 5, 6]


@pytest.mark.parametrize(
    "token",
    [
        _token([-1]),  # a negative seq
        _token([True]),  # bool is no seq
        _token([1, 2]),  # another shard count
        _token([1.0]),
        _token({"a": 1}),
        "0-!!!",
        "nodash",
        "1",
        # Misspelt tokens of [0] (CouchDB splits a count of ASCII digits off the front,
        # ^([0-9]+-), and decodes the rest whole); the engine read the payload whatever
        # came before the dash, and base64 skipped stray characters in it.
        " " + _token([0]),
        "x" + _token([0])[1:],
        "\u0661" + _token([0])[1:],
        _token([0]) + "....",
        _token([0]) + "\n\n\n\n",
        _token([0])[:3] + ".." + _token([0])[3:] + "..",
        _token([0]) + "====",
    ],
)
def test_tokens_of_another_shape_are_refused(token: str) -> None:
    with pytest.raises(BadRequest, match="invalid since value"):
        decode_token(token, 1, [5])


def test_a_token_past_this_database_is_refused_unless_the_handle_may_lag() -> None:
    token = encode_token([3, 9])
    with pytest.raises(BadRequest, match="has not made"):
        decode_token(token, 2, [5, 8])
    # A readonly handle behind its writer answers from where it is (SEMANTICS.md §9).
    assert decode_token(token, 2, [5, 8], may_lag=True) == [3, 8]
