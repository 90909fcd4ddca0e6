"""Would storing ``_id`` and ``_rev`` in each body make a read with docs cheaper?

A read renders each live document as ``{"_id": id, "_rev": rev, **body}``: a
copy after msgpack's decode, 14% of a 100-row range with docs. Storing the
body's map with ``_id`` and ``_rev`` already in front (a format change) would
let the decoded map be the answer, but the decode then makes two more keys and
two more strings, and every body grows by about 58 bytes. ``python -m
bench.bodyhead`` times, in interleaved rounds, for the bench's document
(``bench.stores.make_doc``, six fields) and for documents of 20 and 50 int
fields, with a 34-character rev: the decode of the body as stored today, the
copy, and the decode of the body with its head stored in it. The change pays
only where the last is cheaper than the first two together. Two runs of the
session that measured it: not for the bench's document (-1% and +3%), by 7-11%
at 20 fields and 17-18% at 50, where the copy grows with the fields and the
head's cost does not. Not done: it would not move the bench's range with docs,
and it costs every body its bytes on disk and in the body cache.
"""

from __future__ import annotations

import statistics
import timeit

import msgpack

from bench.stores import doc_id, make_doc

__all__ = ["main"]

_ROUNDS = 7
_CALLS = 100_000


def _cases(body: dict[str, object]) -> dict[str, tuple[str, dict[str, object]]]:
    rev = "1-" + "0123456789abcdef" * 2
    stored = msgpack.packb(body)
    headed = msgpack.packb({"_id": doc_id(5), "_rev": rev, **body})
    decoded = msgpack.unpackb(stored)
    names = {"msgpack": msgpack, "stored": stored, "headed": headed, "decoded": decoded}
    names |= {"doc_id": doc_id(5), "rev": rev}
    return {
        _DECODE: ("msgpack.unpackb(stored)", names),
        _COPY: ('{"_id": doc_id, "_rev": rev, **decoded}', names),
        _HEADED: ("msgpack.unpackb(headed)", names),
    }


_DECODE = "decode the body as stored"
_COPY = "copy it behind _id and _rev"
_HEADED = "decode a body stored with its head"


def _medians_ns(cases: dict[str, tuple[str, dict[str, object]]]) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(_ROUNDS):  # interleaved, so drift hits every case alike
        for name, (stmt, names) in cases.items():
            times[name].append(timeit.timeit(stmt, globals=names, number=_CALLS) / _CALLS)
    return {name: statistics.median(t) * 1e9 for name, t in times.items()}


def main() -> None:
    bench_doc = {k: v for k, v in make_doc(doc_id(5), 5).items() if k != "_id"}
    bodies = {"the bench's document": bench_doc}
    bodies |= {f"{n} int fields": {f"field{i}": i for i in range(n)} for n in (20, 50)}
    for title, body in bodies.items():
        ns = _medians_ns(_cases(body))
        today, headed = ns[_DECODE] + ns[_COPY], ns[_HEADED]
        print(f"{title}: decode {ns[_DECODE]:.0f} + copy {ns[_COPY]:.0f} = {today:.0f} ns today,")
        print(f"  {headed:.0f} ns with the head stored ({headed / today - 1:+.0%})")


if __name__ == "__main__":
    main()
