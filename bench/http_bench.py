"""settee serve over loopback: what the HTTP layer costs, in one standalone run.

    python bench/http_bench.py [--quick] [--seconds S] [--json OUT] [--workdir DIR]

Two groups, each side measured in the same run:

* ``large`` — one 40 MB document written by the engine's ``db.put`` and by
  ``PUT /db/doc`` over loopback (fsync on both sides), alternating, for two
  body shapes (one long string; many small objects). The issue's bar: HTTP
  within 2x of the direct put. This is where a pinned receive buffer (CouchDB
  issue #1409) would show; settee serve never sets one.
* ``seed001`` — the workloads of seed 001 over HTTP with 1..8 client threads
  on keep-alive connections: 100-doc ``_bulk_docs`` inserts, 100-key
  ``_all_docs`` multiget and 100-row range get, with and without
  ``include_docs``; docs/s against the seed's CouchDB numbers (6,000 inserts/s,
  1,500 multiget docs/s single-threaded).

* ``peer`` — the same seed-001 workloads against pouchdb-server (npm,
  ``--in-memory``) in the same run, when Node and npm are available (installed
  into bench/js/node_modules on first use; skipped with the reason otherwise).
  Its in-memory store does no fsync, so the insert comparison favours it.

Prints a table; ``--json`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script from a source checkout
    sys.path.insert(0, ROOT)

import settee  # noqa: E402
from settee.serve import start_server  # noqa: E402

MB = 1024 * 1024
SEED_INSERTS_PER_S = 6000
SEED_MULTIGET_DOCS_PER_S = 1500


def _request(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None) -> Any:
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status >= 300:
        raise RuntimeError(f"{method} {path}: {resp.status} {data[:200]!r}")
    return json.loads(data)


# -- large documents ------------------------------------------------------------------------------


def _large_bodies(size: int) -> dict[str, dict[str, Any]]:
    row = {"name": "settee", "n": 12345, "ok": True, "tags": ["a", "b"]}
    row_len = len(json.dumps(row)) + 2
    return {
        "one string": {"blob": "x" * size},
        "small objects": {"rows": [dict(row, n=i) for i in range(size // row_len)]},
    }


def bench_large(workdir: str, size: int, repeats: int) -> list[dict[str, Any]]:
    results = []
    for shape, body in _large_bodies(size).items():
        encoded = json.dumps(body).encode()
        direct: list[float] = []
        over_http: list[float] = []
        with (
            settee.open(os.path.join(workdir, f"direct-{len(direct)}-{shape[0]}")) as db,
            start_server(os.path.join(workdir, f"http-{shape[0]}"), "127.0.0.1", 0) as server,
        ):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
            _request(conn, "PUT", "/big", None)
            for i in range(repeats):
                order = [("direct", direct), ("http", over_http)]
                for side, samples in order if i % 2 == 0 else reversed(order):
                    t0 = time.perf_counter()
                    if side == "direct":
                        db.put({"_id": f"doc{i}", **body})
                    else:
                        _request(conn, "PUT", f"/big/doc{i}", encoded)
                    samples.append(time.perf_counter() - t0)
            conn.close()
        mb = len(encoded) / MB
        d, h = statistics.median(direct), statistics.median(over_http)
        results.append(
            {
                "shape": shape,
                "json_mb": round(mb, 1),
                "direct_s": round(d, 3),
                "http_s": round(h, 3),
                "direct_mb_s": round(mb / d, 1),
                "http_mb_s": round(mb / h, 1),
                "http_over_direct_time": round(h / d, 2),
            }
        )
    return results


# -- seed 001 workloads ----------------------------------------------------------------------------


def _run_clients(
    port: int, clients: int, seconds: float, op: Callable[[http.client.HTTPConnection, int], int]
) -> float:
    """Docs/s of ``clients`` threads each calling ``op(conn, i)`` (returning docs) for
    ``seconds``."""
    counts = [0] * clients
    barrier = threading.Barrier(clients + 1)
    stop = threading.Event()

    def worker(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        barrier.wait()
        i = 0
        while not stop.is_set():
            counts[k] += op(conn, k * 1_000_000 + i)
            i += 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def bench_seed001(workdir: str, seconds: float, client_counts: list[int]) -> list[dict[str, Any]]:
    with start_server(os.path.join(workdir, "seed001"), "127.0.0.1", 0) as server:
        return seed001_on(server.port, seconds, client_counts)


def seed001_on(port: int, seconds: float, client_counts: list[int]) -> list[dict[str, Any]]:
    """The seed-001 workloads against any CouchDB-compatible server on ``port``."""
    results = []
    conn = http.client.HTTPConnection("127.0.0.1", port)
    _request(conn, "PUT", "/reads", None)
    total = 20_000
    for start in range(0, total, 1000):
        docs = [
            {"_id": f"k{i:07d}", "i": i, "name": f"row {i}"} for i in range(start, start + 1000)
        ]
        _request(conn, "POST", "/reads/_bulk_docs", json.dumps({"docs": docs}).encode())

    def insert(c: http.client.HTTPConnection, i: int) -> int:
        docs = [{"_id": f"w{i:09d}-{j:03d}", "i": j, "name": "row"} for j in range(100)]
        _request(c, "POST", "/writes/_bulk_docs", json.dumps({"docs": docs}).encode())
        return 100

    def multiget(include: bool) -> Callable[[http.client.HTTPConnection, int], int]:
        def op(c: http.client.HTTPConnection, i: int) -> int:
            base = (i * 7919) % (total - 100)
            keys = [f"k{base + j:07d}" for j in range(0, 100)]
            body = json.dumps({"keys": keys}).encode()
            path = "/reads/_all_docs" + ("?include_docs=true" if include else "")
            return len(_request(c, "POST", path, body)["rows"])

        return op

    def rangeget(include: bool) -> Callable[[http.client.HTTPConnection, int], int]:
        def op(c: http.client.HTTPConnection, i: int) -> int:
            base = (i * 7919) % (total - 100)
            path = f'/reads/_all_docs?startkey="k{base:07d}"&limit=100'
            path += "&include_docs=true" if include else ""
            return len(_request(c, "GET", path, None)["rows"])

        return op

    workloads: list[tuple[str, Callable[[http.client.HTTPConnection, int], int]]] = [
        ("bulk_docs insert (100/req)", insert),
        ("all_docs multiget 100 keys", multiget(False)),
        ("all_docs multiget 100 keys, include_docs", multiget(True)),
        ("all_docs range 100 rows", rangeget(False)),
        ("all_docs range 100 rows, include_docs", rangeget(True)),
    ]
    for name, op in workloads:
        for clients in client_counts:
            if name.startswith("bulk_docs"):
                conn.request("DELETE", "/writes")
                conn.getresponse().read()
                _request(conn, "PUT", "/writes", None)
            rate = _run_clients(port, clients, seconds, op)
            floor = SEED_INSERTS_PER_S if "insert" in name else SEED_MULTIGET_DOCS_PER_S
            results.append(
                {
                    "workload": name,
                    "clients": clients,
                    "docs_per_s": round(rate),
                    "x_seed_couchdb": round(rate / floor, 1),
                }
            )
    conn.close()
    return results


JS_DIR = os.path.join(ROOT, "bench", "js")


def _pouchdb_server() -> tuple[str | None, str]:
    """The pouchdb-server executable (installing it on first use), or None and why."""
    import shutil
    import subprocess

    exe = os.path.join(JS_DIR, "node_modules", ".bin", "pouchdb-server")
    if os.path.exists(exe):
        return exe, ""
    if not (shutil.which("node") and shutil.which("npm")):
        return None, "node/npm not found"
    done = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts"],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0 or not os.path.exists(exe):
        return None, f"npm install failed: {done.stderr[-300:]}"
    return exe, ""


def bench_peer(seconds: float, client_counts: list[int]) -> tuple[list[dict[str, Any]], str]:
    """seed-001 workloads against pouchdb-server --in-memory; ([], why) when unavailable."""
    import socket
    import subprocess

    exe, why = _pouchdb_server()
    if exe is None:
        return [], why
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="settee-pouchdb-server-") as cwd:
        proc = subprocess.Popen(
            [exe, "--in-memory", "--host", "127.0.0.1", "--port", str(port)],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_for(port, timeout=30)
            return seed001_on(port, seconds, client_counts), ""
        finally:
            proc.terminate()
            proc.wait(10)


def _wait_for(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/")
            conn.getresponse().read()
            conn.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 MB documents, 1 s samples")
    parser.add_argument("--seconds", type=float, default=None, help="one sample's wall time")
    parser.add_argument("--size-mb", type=int, default=None, help="large document size")
    parser.add_argument("--repeats", type=int, default=None, help="large-document repeats")
    parser.add_argument("--clients", default="1,2,4,8", help="client thread counts")
    parser.add_argument("--json", default=None, help="also write the numbers here")
    parser.add_argument("--workdir", default=None, help="where the databases go")
    parser.add_argument("--no-peer", action="store_true", help="skip pouchdb-server")
    args = parser.parse_args(argv)
    size = (args.size_mb or (8 if args.quick else 40)) * MB
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    repeats = args.repeats or (3 if args.quick else 5)
    clients = [int(c) for c in args.clients.split(",")]
    with tempfile.TemporaryDirectory(prefix="settee-http-bench-", dir=args.workdir) as workdir:
        large = bench_large(workdir, size, repeats)
        seed = bench_seed001(workdir, seconds, clients)
        peer, peer_skipped = ([], "--no-peer") if args.no_peer else bench_peer(seconds, clients)
    print(f"large document PUT ({size // MB} MB body, median of {repeats}, fsync on)")
    for r in large:
        print(
            f"  {r['shape']:<14} json {r['json_mb']:>6} MB  direct {r['direct_s']:.3f} s "
            f"({r['direct_mb_s']} MB/s)  http {r['http_s']:.3f} s ({r['http_mb_s']} MB/s)  "
            f"http/direct time {r['http_over_direct_time']}"
        )
    print(f"seed 001 workloads over HTTP ({seconds:g} s per sample)")
    for r in seed:
        print(
            f"  {r['workload']:<42} clients {r['clients']}  {r['docs_per_s']:>8} docs/s  "
            f"{r['x_seed_couchdb']}x seed CouchDB"
        )
    if peer_skipped:
        print(f"pouchdb-server peer skipped: {peer_skipped}")
    else:
        print("the same workloads against pouchdb-server --in-memory (settee / pouchdb-server)")
        for mine, theirs in zip(seed, peer, strict=True):
            ratio = mine["docs_per_s"] / max(1, theirs["docs_per_s"])
            print(
                f"  {theirs['workload']:<42} clients {theirs['clients']}  "
                f"{theirs['docs_per_s']:>8} docs/s  settee x{ratio:.2f}"
            )
    if args.json:
        with open(args.json, "w") as f:
            doc = {"large": large, "seed001": seed, "pouchdb_server": peer}
            json.dump(doc | {"peer_skipped": peer_skipped}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
