"""How much memory ``settee serve`` takes to move one large attachment.

Opt-in measurement for issue 15 ("attachment bytes ... streamed in chunks, never
one huge buffer"; "the server's RSS stays bounded"). Run from the checkout:

    .venv/bin/python scripts/attachment_memory.py [--mb 100]

It starts ``settee serve`` (temp --dir, free port, fsync on, every other option
default) and, one request at a time, sends an attachment of --mb MiB of random
bytes as a standalone ``PUT /db/doc/att`` and as a ``multipart/related`` document
PUT (each body streamed by the client, a MiB at a time), reads each back with
``GET /db/doc/att``, and compacts the database. After each step it prints the
server's peak resident memory so far (``VmHWM`` in /proc/PID/status) and
checks the bytes that came back (sha256). Linux only; Python stdlib only.
Exit status 0 when every step answered as expected, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIECE = 1 << 20


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status")


def _pieces(mb: int, seed: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    for _ in range(mb):
        yield rng.randbytes(PIECE)


def _request(
    port: int, method: str, path: str, body: Iterator[bytes] | bytes | None, headers: dict[str, str]
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _get_digest(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        digest = hashlib.sha256()
        while piece := response.read(PIECE):
            digest.update(piece)
        return response.status, digest.hexdigest()
    finally:
        conn.close()


def _related(mb: int, seed: int, boundary: str) -> Iterator[bytes]:
    doc = {
        "_id": "related",
        "_attachments": {
            "big.bin": {
                "follows": True,
                "content_type": "application/octet-stream",
                "length": mb * PIECE,
            }
        },
    }
    yield f"--{boundary}\r\nContent-Type: application/json\r\n\r\n".encode()
    yield json.dumps(doc).encode()
    yield f"\r\n--{boundary}\r\nContent-Disposition: attachment; filename=big.bin\r\n\r\n".encode()
    yield from _pieces(mb, seed)
    yield f"\r\n--{boundary}--".encode()


def _compact(port: int) -> bool:
    """Compact ``db`` and wait until ``compact_running`` says it is done."""
    headers = {"Content-Type": "application/json"}
    if _request(port, "POST", "/db/_compact", b"", headers)[0] != 202:
        return False
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status, body = _request(port, "GET", "/db", None, {})
        if status == 200 and not json.loads(body).get("compact_running"):
            return True
        time.sleep(0.2)
    return False


def _wait_up(port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError("settee serve exited")
        try:
            if _request(port, "GET", "/", None, {})[0] == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("settee serve did not answer within 30 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100, help="attachment size in MiB (100)")
    parser.add_argument("--settee", default=str(ROOT / ".venv" / "bin" / "settee"))
    args = parser.parse_args()
    size = args.mb * PIECE
    expected = hashlib.sha256(b"".join(_pieces(args.mb, 1))).hexdigest()
    port = _free_port()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [args.settee, "serve", "--dir", tmp, "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_up(port, server)
            print(f"settee serve, one {args.mb} MiB attachment; peak RSS of the server after:")
            print(f"  {'started':45} {_peak_rss_mb(server.pid):8.1f} MB")
            steps = [
                ("PUT /db", lambda: _request(port, "PUT", "/db", None, {})[0] == 201),
                (
                    f"PUT /db/doc/big.bin ({args.mb} MiB, streamed)",
                    lambda: (
                        _request(
                            port,
                            "PUT",
                            "/db/doc/big.bin",
                            _pieces(args.mb, 1),
                            {
                                "Content-Type": "application/octet-stream",
                                "Content-Length": str(size),
                            },
                        )[0]
                        == 201
                    ),
                ),
                (
                    "GET /db/doc/big.bin (sha256 checked)",
                    lambda: _get_digest(port, "/db/doc/big.bin") == (200, expected),
                ),
                (
                    f"PUT /db/related multipart/related ({args.mb} MiB)",
                    lambda: (
                        _request(
                            port,
                            "PUT",
                            "/db/related",
                            _related(args.mb, 1, "settee-boundary"),
                            {"Content-Type": 'multipart/related; boundary="settee-boundary"'},
                        )[0]
                        == 201
                    ),
                ),
                (
                    "GET /db/related/big.bin (sha256 checked)",
                    lambda: _get_digest(port, "/db/related/big.bin") == (200, expected),
                ),
                (
                    "POST /db/_compact (waited for), then GET",
                    lambda: (
                        _compact(port) and _get_digest(port, "/db/doc/big.bin") == (200, expected)
                    ),
                ),
            ]
            for name, step in steps:
                passed = step()
                ok &= passed
                mark = "" if passed else "  FAILED"
                print(f"  {name:45} {_peak_rss_mb(server.pid):8.1f} MB{mark}")
        finally:
            server.terminate()
            server.wait(30)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
