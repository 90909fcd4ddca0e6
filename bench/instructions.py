"""Instructions per call of a seed workload, counted by valgrind's cachegrind.

``python -m bench.instructions WORKLOAD [CALLS]`` loads 20,000 documents into
settee (4 shards, fsync off), then runs the workload twice under
``valgrind --tool=cachegrind``, once with no measured calls and once with
``CALLS`` (default 300), each after the same warm-up (every document read once,
then 300 calls; 3 of all_docs and changes; inserts: 20 batches), and prints the difference per call.
Workloads: get, multiget, multiget_docs, range, range_docs (reads of 100 ids or
rows, as the seed workloads), all_docs and changes (every row) and insert
(100-document batches). Options: ``--shards=N`` (default 4), ``--read-mode=serialized``,
``--body-cache=BYTES``; ``python -m bench.instructions all_docs 20 --shards=1
--body-cache=0 --read-mode=serialized`` against the same without the read mode
is the bench's sequential all_docs pair (and changes its changes pair).

Why: on this machine wall-clock timings vary about ±10% from one run to the
next, so a change worth a few percent cannot be told apart by timing it. An
instruction count does not depend on the load or the clock: the same code and
seed count the same within a fraction of a percent. It is not a time (a cache
miss costs more than an add), so a change kept for speed is also timed
(``bench.micro``, ``settee bench``); counts only rank small changes. Needs
valgrind (Debian: ``apt install valgrind``); each run takes 10-30 s.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import settee
from bench.stores import doc_id, load_settee, make_doc

__all__ = ["main"]

_DOCS = 20_000
_WORKLOADS = (
    "get",
    "multiget",
    "multiget_docs",
    "range",
    "range_docs",
    "all_docs",
    "changes",
    "insert",
    "put",
)
_WHOLE = ("all_docs", "changes")  # workloads whose call reads every row
_OPTIONS = {"--shards": "shards", "--read-mode": "read_mode", "--body-cache": "body_cache_bytes"}
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _step(name: str, db: Any, rng: random.Random, next_id: list[int]) -> Callable[[], object]:
    if name == "get":
        return lambda: db.get(doc_id(rng.randrange(_DOCS)))
    if name.startswith("multiget"):
        docs_too = name.endswith("_docs")
        return lambda: db.all_docs(
            keys=[doc_id(rng.randrange(_DOCS)) for _ in range(100)], include_docs=docs_too
        )
    if name == "all_docs":
        return lambda: db.all_docs()
    if name == "changes":
        return lambda: db.changes()
    if name.startswith("range"):
        docs_too = name.endswith("_docs")
        return lambda: db.all_docs(
            startkey=doc_id(rng.randrange(_DOCS - 100)), limit=100, include_docs=docs_too
        )

    def insert() -> None:
        first = next_id[0]
        next_id[0] += 100
        db.bulk_docs([make_doc(doc_id(n), n) for n in range(first, first + 100)])

    def put() -> None:
        next_id[0] += 1
        db.put(make_doc(doc_id(next_id[0]), next_id[0]))

    return put if name == "put" else insert


def _child(source: str, name: str, calls: int, options: dict[str, Any]) -> None:
    """Open a copy of ``source``, warm up, then make ``calls`` measured calls."""
    path = tempfile.mkdtemp(prefix="settee-instructions-")
    try:
        shutil.copytree(source, os.path.join(path, "db"))
        with settee.open(os.path.join(path, "db"), fsync=False, **options) as db:
            step = _step(name, db, random.Random(1), [_DOCS])
            if name in ("insert", "put"):
                warm = 20
            elif name in _WHOLE:
                warm = 3  # each call reads every row: a few make the caches warm
            else:
                db.all_docs(include_docs=True)
                warm = 300
            for _ in range(warm + calls):
                step()
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _count(source: str, name: str, calls: int, flags: list[str]) -> int:
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no"]
    command += ["--cachegrind-out-file=/dev/null", sys.executable, "-m", "bench.instructions"]
    command += ["--child", source, name, str(calls), *flags]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    run = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    found = _REFS.search(run.stderr)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"valgrind run failed ({run.returncode}):\n{run.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def _options(flags: list[str]) -> dict[str, Any]:
    """``settee.open`` options of ``--name=value`` flags (``_OPTIONS``)."""
    options: dict[str, Any] = {}
    for flag in flags:
        name, _, value = flag.partition("=")
        if name not in _OPTIONS:
            raise SystemExit(f"unknown option {flag!r}; known: {', '.join(_OPTIONS)}")
        options[_OPTIONS[name]] = value if name == "--read-mode" else int(value)
    return options


def main(argv: list[str]) -> int:
    flags = [a for a in argv if a.startswith("--") and a != "--child"]
    argv = [a for a in argv if a not in flags]
    options = _options(flags)
    shards = options.pop("shards", 4)
    if argv[:1] == ["--child"]:
        _child(argv[1], argv[2], int(argv[3]), options)
        return 0
    if not argv or argv[0] not in _WORKLOADS:
        print(__doc__)
        return 2
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt install valgrind)", file=sys.stderr)
        return 1
    name = argv[0]
    calls = int(argv[1]) if len(argv) > 1 else 300
    work = tempfile.mkdtemp(prefix="settee-instructions-")
    try:
        source = os.path.join(work, "db")
        with settee.open(source, shards=shards, fsync=False) as db:
            load_settee(db, 0, _DOCS)
        child_flags = [f for f in flags if not f.startswith("--shards")]
        base = _count(source, name, 0, child_flags)
        measured = _count(source, name, calls, child_flags)
        print(f"{name:14s} {(measured - base) / calls:12,.0f} instructions per call")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
