"""Attachment replication round trip: settee -> PouchDB -> pouchdb-server -> settee.

Opt-in check for issue 15's acceptance item: "A replication round trip with
attachments (>= 200 docs carrying binary attachments up to 5 MB) settee ->
PouchDB -> pouchdb-server -> settee comes back byte-identical."

Run from the checkout (one command; under a minute, about 1 GB of memory):

    .venv/bin/python scripts/attachment_roundtrip.py

Options: --docs N (240), --seed S (15), --max-size BYTES (5 MiB = 5242880),
--batch-size N (PouchDB's replication batch_size; default PouchDB's own, 100),
--no-headerless-parts (send no multipart part without part headers),
--node-dir DIR (/tmp/rt/node), --settee PATH (.venv/bin/settee),
--keep (leave the temp dir: logs, node-result.json), --timeout SECONDS (1800).

Needs: node >= 18 with npm, and in --node-dir the npm packages pouchdb@9.0.0,
pouchdb-adapter-memory@9.0.0 and pouchdb-server@4.2.0 (installed there with
npm when missing); settee from this checkout's venv. Python stdlib only. It
starts its own ``settee serve`` (temp --dir, free port, fsync on, every other
option default) and its own ``pouchdb-server --in-memory``, and stops both.

What it does:
1. writes database ``src`` on settee through its HTTP API, from a seeded RNG:
   --docs documents with 1-3 attachments of random bytes (sizes mostly under
   16 KiB, some to 512 KiB, a few to --max-size, some exactly --max-size, a few
   empty; text/plain ones hold CRLF CRLF), by every write path: ``_bulk_docs``
   and ``PUT /db/doc`` with inline base64, ``PUT /db/doc/att``, multipart/related
   ``PUT`` (parts with and without part headers, with and without ``length``);
   later revisions that change the body (stubs) and add, replace and delete
   attachments; deleted documents; conflicts (``new_edits=false`` branches, one
   through ``PUT ?new_edits=false``, some deleted, three documents that only
   ever came that way); then checks ``src`` against what was written: every
   leaf, its deletion, each attachment's sha256, content type, length, revpos;
2. runs scripts/attachment_roundtrip.js: settee/src -> PouchDB (memory adapter)
   -> pouchdb-server/mid -> settee/back, one-shot replications, and leg 3 once
   more (it must write nothing); every HTTP request is logged;
3. compares src and back on settee: db info counts, ``_all_docs``, the leaves of
   ``_changes?style=all_docs``, each winner (``revs``, ``conflicts``,
   ``deleted_conflicts``; as stubs and with ``attachments=true``), every leaf
   (``open_revs=all&revs=true&attachments=true``) and ``_bulk_get?attachments=true``,
   attachment data as sha256, everything else exactly, except attachment
   ``revpos``, which PouchDB resets (see ``pouchdb_revpos``); and src against
   PouchDB's and pouchdb-server's copies (winners and leaves: bodies, revs,
   conflicts, attachment digest, content type, revpos, sha256);
4. prints PASS/FAIL with counts, times and every difference, and every 4xx/5xx
   settee answered (other than a replicator's expected 404s for checkpoints and
   for a database before it creates it); any of them fails the check. Settee's
   handling of ``attachments=true&atts_since=`` (CouchDB stubs the older
   attachments, settee sends them whole) is printed but not counted.

Exit status: 0 PASS, 1 FAIL (differences or settee errors), 2 the check could not run.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NODE_PACKAGES = ("pouchdb@9.0.0", "pouchdb-adapter-memory@9.0.0", "pouchdb-server@4.2.0")
MIB = 1024 * 1024
BULK_BUDGET = 24 * MIB  # base64 bytes per _bulk_docs written by this script
CONTENT_TYPES = (
    "application/octet-stream",
    "image/png",
    "image/jpeg",
    "application/pdf",
    "text/plain",
)
ODD_NAMES = ("sub/dir/file.bin", "space name.bin", "ünïcödé.bin", "a+b=c&d.bin", "x%2Fy.bin")


# ---------------------------------------------------------------------------
# HTTP


@dataclasses.dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Client:
    """One keep-alive connection to one server; records every unexpected answer."""

    def __init__(self, base: str, name: str, problems: list[str] | None) -> None:
        parsed = urllib.parse.urlsplit(base)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 80
        self.name = name
        self.problems = problems
        self.conn: http.client.HTTPConnection | None = None
        self.requests = 0

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        ok: tuple[int, ...] = (200, 201, 202),
    ) -> Reply:
        """Send one request; an answer outside ``ok`` is recorded as a problem."""
        reply = self._send(method, path, body, headers or {})
        if reply.status not in ok and self.problems is not None:
            sent = f"{len(body)} body bytes" if body is not None else "no body"
            self.problems.append(
                f"{self.name}: {method} {path} ({sent}, {headers or {}}) -> "
                f"{reply.status} {reply.body[:500]!r}"
            )
        return reply

    def _send(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Reply:
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
            try:
                self.conn.request(method, path, body=body, headers=headers)
                resp = self.conn.getresponse()
                data = resp.read()
                self.requests += 1
                if resp.getheader("Connection", "").lower() == "close":
                    self.close()
                return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # a keep-alive connection the server closed while idle: retry once, fresh
                self.close()
                if attempt == 2:
                    raise
            except (OSError, http.client.HTTPException):
                self.close()
                raise
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, doc: Any = None, **kw: Any) -> Reply:
        body = None if doc is None else json.dumps(doc).encode()
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        return self.request(method, path, body, headers, **kw)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def q(part: str) -> str:
    """A path segment: a document id or attachment name, every reserved byte escaped."""
    return urllib.parse.quote(part, safe="")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------------------
# servers


@dataclasses.dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # our own child, by pid
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def wait_up(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    client = Client(url, "probe", None)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"server {url} exited ({proc.returncode}): {log.read_text()[-2000:]}"
            )
        try:
            if client.request("GET", "/").status == 200:
                client.close()
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server {url} did not answer within {timeout}s")


def started(server: Server) -> None:
    """Wait until the server answers; stop it if it never does."""
    try:
        wait_up(server.url, server.proc, server.log)
    except BaseException:
        server.stop()
        raise


def start_settee(settee: str, work: Path) -> Server:
    """``settee serve`` on a fresh --dir and a free port, every option default (fsync on)."""
    data = work / "settee-data"
    log = work / "settee.log"
    port = free_port()
    cmd = [settee, "serve", "--dir", str(data), "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = Server("settee", proc, f"http://127.0.0.1:{port}", log)
    started(server)
    return server


def start_pouchdb_server(node_dir: Path, work: Path) -> Server:
    """pouchdb-server, in memory, on a free port, its config and log in a temp dir."""
    home = work / "pouchdb-server"
    home.mkdir()
    log = work / "pouchdb-server.log"
    port = free_port()
    binary = node_dir / "node_modules" / "pouchdb-server" / "bin" / "pouchdb-server"
    cmd = ["node", str(binary), "--in-memory", "--port", str(port), "--dir", str(home)]
    cmd += ["--config", str(home / "config.json")]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=home, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    server = Server("pouchdb-server", proc, f"http://127.0.0.1:{port}", log)
    started(server)
    return server


def ensure_node_packages(node_dir: Path) -> None:
    have = all((node_dir / "node_modules" / p.rsplit("@", 1)[0]).is_dir() for p in NODE_PACKAGES)
    if have:
        return
    print(f"installing {' '.join(NODE_PACKAGES)} into {node_dir} with npm ...", flush=True)
    node_dir.mkdir(parents=True, exist_ok=True)
    if not (node_dir / "package.json").exists():
        (node_dir / "package.json").write_text('{"name": "settee-rt", "private": true}\n')
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", *NODE_PACKAGES], cwd=node_dir, check=True
    )


def node_package_version(node_dir: Path, package: str) -> str:
    meta = node_dir / "node_modules" / package / "package.json"
    return str(json.loads(meta.read_text()).get("version", "?"))


# ---------------------------------------------------------------------------
# the source database: what is written, and what every revision must hold


@dataclasses.dataclass
class Att:
    content_type: str
    data: bytes
    revpos: int = 0  # 0 until a revision stores it; then that revision's position

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def inline(self) -> dict[str, Any]:
        return {"content_type": self.content_type, "data": base64.b64encode(self.data).decode()}


@dataclasses.dataclass
class Rev:
    parent: str | None
    atts: dict[str, tuple[str, str, int, int]]  # name -> (sha256, content_type, length, revpos)
    deleted: bool = False


@dataclasses.dataclass
class DocState:
    doc_id: str
    rev: str = ""
    body: dict[str, Any] = dataclasses.field(default_factory=dict)
    atts: dict[str, Att] = dataclasses.field(default_factory=dict)
    revs: dict[str, Rev] = dataclasses.field(default_factory=dict)
    first_rev: str = ""

    def record(
        self, rev: str, parent: str | None, atts: dict[str, Att], deleted: bool = False
    ) -> None:
        pos = int(rev.split("-")[0])
        for a in atts.values():
            if not a.revpos:  # stored by this revision (SEMANTICS.md §18: its position)
                a.revpos = pos
        self.revs[rev] = Rev(
            parent,
            {n: (a.sha, a.content_type, len(a.data), a.revpos) for n, a in atts.items()},
            deleted,
        )

    def advance(self, rev: str, deleted: bool = False) -> None:
        self.record(rev, self.rev or None, self.atts, deleted)
        if not self.first_rev:
            self.first_rev = rev
        self.rev = rev

    def leaves(self) -> set[str]:
        parents = {r.parent for r in self.revs.values()}
        return {rev for rev in self.revs if rev not in parents}


@dataclasses.dataclass
class Stats:
    writes: int = 0  # revisions written
    att_uploads: int = 0  # attachment bodies sent
    att_bytes: int = 0
    largest: int = 0
    # write path -> [sent, accepted]
    paths: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    def tried(self, path: str, ok: bool) -> bool:
        counts = self.paths.setdefault(path, [0, 0])
        counts[0] += 1
        counts[1] += ok
        return ok

    def uploaded(self, att: Att) -> None:
        self.att_uploads += 1
        self.att_bytes += len(att.data)
        self.largest = max(self.largest, len(att.data))


class Writer:
    """Builds ``src`` on settee with a seeded RNG and remembers every revision."""

    def __init__(
        self, client: Client, db: str, rng: random.Random, max_size: int, headerless: bool
    ) -> None:
        self.c = client
        self.db = db
        self.rng = rng
        self.max_size = max_size
        self.headerless = headerless  # send some multipart parts without part headers
        self.docs: dict[str, DocState] = {}
        self.stats = Stats()
        self.att_counter = 0

    # -- random material

    def size(self, doc_index: int, k: int) -> int:
        if k == 0 and doc_index % 40 == 17:
            return self.max_size  # some attachments at exactly the maximum
        if k == 1 and doc_index % 60 == 29:
            return 0  # and a few empty ones
        r = self.rng.random()
        small, medium = min(16 * 1024, self.max_size), min(512 * 1024, self.max_size)
        if r < 0.80:
            return self.rng.randint(1, small)
        if r < 0.96:
            return self.rng.randint(small, medium)
        return self.rng.randint(medium, self.max_size)

    def att(self, doc_index: int, k: int) -> Att:
        content_type = self.rng.choice(CONTENT_TYPES)
        data = bytearray(self.rng.randbytes(self.size(doc_index, k)))
        if content_type == "text/plain" and len(data) >= 8:
            # text as files hold it: CRLF line ends and blank lines, some first
            at = 0 if self.rng.random() < 0.25 else self.rng.randrange(len(data) - 4)
            data[at : at + 4] = b"\r\n\r\n"
        return Att(content_type, bytes(data))

    def att_name(self) -> str:
        self.att_counter += 1
        if self.att_counter % 29 == 0:
            return ODD_NAMES[(self.att_counter // 29) % len(ODD_NAMES)]
        return f"att-{self.att_counter:05d}.{self.rng.choice(('bin', 'png', 'dat'))}"

    def body(self, i: int) -> dict[str, Any]:
        rng = self.rng
        return {
            "type": "roundtrip",
            "n": i,
            "title": "".join(rng.choice('abcdé€😀 "\\/\n') for _ in range(rng.randint(0, 24))),
            "score": rng.random(),
            "tags": [rng.choice(["x", "y", "z", ""]) for _ in range(rng.randint(0, 4))],
            "nested": {"ok": rng.random() < 0.5, "none": None, "list": [1, -2, 3.5, "s"]},
        }

    def rev_hash(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    @staticmethod
    def doc_id(i: int) -> str:
        if i % 50 == 25:
            return f"odd/id {i:04d}+é"
        return f"doc-{i:04d}"

    # -- writes

    def path(self, doc_id: str, att: str | None = None) -> str:
        base = f"/{self.db}/{q(doc_id)}"
        return base if att is None else f"{base}/{q(att)}"

    def full_doc(self, st: DocState, stubs: set[str], inline: set[str]) -> dict[str, Any]:
        doc: dict[str, Any] = {"_id": st.doc_id, **st.body}
        if st.rev:
            doc["_rev"] = st.rev
        # in the document's order (set order varies between runs, and revision ids
        # digest the attachments in order): reproducible from the seed
        atts: dict[str, Any] = {}
        for n in st.atts:
            if n in stubs:
                atts[n] = {"stub": True}
            elif n in inline:
                atts[n] = st.atts[n].inline()
        if atts:
            doc["_attachments"] = atts
        return doc

    def _ok_rev(self, reply: Reply) -> str | None:
        if reply.status in (200, 201, 202):
            return str(reply.json()["rev"])
        return None

    def put_json(self, st: DocState, stubs: set[str], inline: set[str]) -> bool:
        reply = self.c.json("PUT", self.path(st.doc_id), self.full_doc(st, stubs, inline))
        rev = self._ok_rev(reply)
        if not self.stats.tried("PUT /db/doc (JSON, inline base64 and stubs)", rev is not None):
            return False
        assert rev is not None
        for n in inline:
            self.stats.uploaded(st.atts[n])
        self.stats.writes += 1
        st.advance(rev)
        return True

    def multipart_shape(self) -> tuple[bool, bool]:
        """(part headers?, ``length`` in the JSON?): CouchDB 2+ sends part headers
        (Content-Disposition, Content-Type, Content-Length), CouchDB 1.x none; both
        send ``length``; couchdb-python and hand-made bodies may leave it out."""
        headers = not self.headerless or self.rng.random() < 0.5
        return headers, self.rng.random() < 0.75

    def put_multipart(self, st: DocState, stubs: set[str], follows: list[str]) -> bool:
        """``PUT /db/doc`` as multipart/related: the JSON, then each attachment's bytes."""
        part_headers, with_length = self.multipart_shape()
        boundary = f"rt-{self.rng.getrandbits(64):016x}"
        doc: dict[str, Any] = {"_id": st.doc_id, **st.body}
        if st.rev:
            doc["_rev"] = st.rev
        atts: dict[str, Any] = {}
        for n in st.atts:
            a = st.atts[n]
            if n in follows:
                atts[n] = {"follows": True, "content_type": a.content_type}
                if with_length:
                    atts[n]["length"] = len(a.data)
            elif n in stubs:
                atts[n] = {"stub": True}
        follows = [n for n in st.atts if n in follows]  # the parts go in the document's order
        doc["_attachments"] = atts
        parts = [b"Content-Type: application/json\r\n\r\n" + json.dumps(doc).encode()]
        for n in follows:
            a = st.atts[n]
            head = b""
            if part_headers:
                head = (
                    f'Content-Disposition: attachment; filename="{n}"\r\n'
                    f"Content-Type: {a.content_type}\r\nContent-Length: {len(a.data)}\r\n"
                ).encode()
            parts.append(head + b"\r\n" + a.data)
        body = b"".join(b"--" + boundary.encode() + b"\r\n" + p + b"\r\n" for p in parts)
        body += b"--" + boundary.encode() + b"--"
        headers = {
            "Content-Type": f'multipart/related; boundary="{boundary}"',
            "Accept": "application/json",
        }
        reply = self.c.request("PUT", self.path(st.doc_id), body, headers)
        rev = self._ok_rev(reply)
        shape = "part headers" if part_headers else "headerless parts"
        shape += ", length" if with_length else ", no length"
        if not self.stats.tried(f"PUT multipart/related ({shape})", rev is not None):
            return False
        assert rev is not None
        for n in follows:
            self.stats.uploaded(st.atts[n])
        self.stats.writes += 1
        st.advance(rev)
        return True

    def put_att(self, st: DocState, name: str) -> bool:
        a = st.atts[name]
        path = self.path(st.doc_id, name)
        if st.rev:
            path += "?rev=" + st.rev
        reply = self.c.request(
            "PUT", path, a.data, {"Content-Type": a.content_type, "Accept": "application/json"}
        )
        rev = self._ok_rev(reply)
        if not self.stats.tried("PUT /db/doc/att", rev is not None):
            return False
        assert rev is not None
        self.stats.uploaded(a)
        self.stats.writes += 1
        st.advance(rev)
        return True

    def delete_att(self, st: DocState, name: str) -> bool:
        path = self.path(st.doc_id, name) + "?rev=" + st.rev
        reply = self.c.request("DELETE", path, None, {"Accept": "application/json"})
        rev = self._ok_rev(reply)
        if not self.stats.tried("DELETE /db/doc/att", rev is not None):
            return False
        assert rev is not None
        del st.atts[name]
        self.stats.writes += 1
        st.advance(rev)
        return True

    def delete_doc(self, st: DocState) -> bool:
        if not st.rev:  # never written (recorded)
            return False
        reply = self.c.json("DELETE", self.path(st.doc_id) + "?rev=" + st.rev)
        rev = self._ok_rev(reply)
        if not self.stats.tried("DELETE /db/doc", rev is not None):
            return False
        assert rev is not None
        st.atts = {}
        self.stats.writes += 1
        st.advance(rev, deleted=True)
        return True

    def flush_bulk(self, batch: list[DocState]) -> None:
        if not batch:
            return
        docs = [self.full_doc(st, set(), set(st.atts)) for st in batch]
        reply = self.c.json("POST", f"/{self.db}/_bulk_docs", {"docs": docs})
        label = "POST /db/_bulk_docs (inline base64)"
        if reply.status != 201:
            for _ in batch:
                self.stats.tried(label, False)
            return
        for st, result in zip(batch, reply.json(), strict=True):
            if not self.stats.tried(label, "rev" in result and result.get("id") == st.doc_id):
                self.problem(f"settee: _bulk_docs answered {result} for {st.doc_id!r}")
                continue
            for a in st.atts.values():
                self.stats.uploaded(a)
            self.stats.writes += 1
            st.advance(str(result["rev"]))

    def create(self, n: int) -> None:
        """Every document's first revision(s), by four write paths."""
        batch: list[DocState] = []
        budget = 0
        for i in range(n):
            st = DocState(self.doc_id(i), body=self.body(i))
            self.docs[st.doc_id] = st
            for k in range(self.rng.randint(1, 3)):
                st.atts[self.att_name()] = self.att(i, k)
            path = i % 10
            if path == 3:  # PUT /db/doc/att, one attachment at a time, then the body
                body, st.body = st.body, {}
                names = list(st.atts)
                pending = dict(st.atts)
                st.atts = {}
                for name in names:
                    st.atts[name] = pending[name]
                    self.put_att(st, name)
                st.body = body
                self.put_json(st, set(st.atts), set())
            elif path == 5:  # PUT /db/doc, JSON with inline base64
                self.put_json(st, set(), set(st.atts))
            elif path == 7:  # PUT /db/doc, multipart/related
                self.put_multipart(st, set(), list(st.atts))
            else:  # POST /db/_bulk_docs, inline base64
                size = sum(len(a.data) for a in st.atts.values()) * 4 // 3
                if batch and (budget + size > BULK_BUDGET or len(batch) >= 40):
                    self.flush_bulk(batch)
                    batch, budget = [], 0
                batch.append(st)
                budget += size
        self.flush_bulk(batch)

    def update(self, st: DocState, i: int, rounds: int) -> None:
        """Later revisions: body (stubs), add, replace and delete attachments."""
        for _ in range(rounds):
            if not st.rev:
                return
            ops = ["body", "add", "replace"] + (["delete_att"] if len(st.atts) > 1 else [])
            op = self.rng.choice(ops)
            how = self.rng.choice(["inline", "endpoint", "multipart"])
            if op == "body":
                got = self.c.json("GET", self.path(st.doc_id))  # stubs as settee gives them
                if got.status != 200:
                    return
                doc = got.json()
                doc["edits"] = doc.get("edits", 0) + 1
                st.body = {k: v for k, v in doc.items() if not k.startswith("_")}
                reply = self.c.json("PUT", self.path(st.doc_id), doc)
                rev = self._ok_rev(reply)
                if not self.stats.tried("PUT /db/doc (JSON, stubs as GET gave them)", bool(rev)):
                    return
                assert rev is not None
                self.stats.writes += 1
                st.advance(rev)
                continue
            before = dict(st.atts)
            if op == "delete_att":
                name = self.rng.choice(sorted(st.atts))
                if how == "endpoint":
                    ok = self.delete_att(st, name)
                else:
                    del st.atts[name]
                    ok = self.put_json(st, set(st.atts), set())
            else:
                name = self.att_name() if op == "add" else self.rng.choice(sorted(st.atts))
                st.atts[name] = self.att(i, 1 if op == "add" else 2)
                if how == "endpoint":
                    ok = self.put_att(st, name)
                elif how == "multipart":
                    ok = self.put_multipart(st, set(st.atts) - {name}, [name])
                else:
                    ok = self.put_json(st, set(st.atts) - {name}, {name})
            if not ok:  # settee refused it (recorded): the document stays as it was
                st.atts = before
                return

    def branch_doc(
        self, st: DocState, depth: int, deleted: bool, i: int
    ) -> tuple[dict[str, Any], list[str], dict[str, Att]]:
        """A ``new_edits=false`` branch of ``depth`` revisions grown from the first
        revision: the document, its new revisions oldest first, its attachments."""
        pos, root_hash = st.first_rev.split("-", 1)
        hashes = [self.rev_hash() for _ in range(depth)]  # oldest first
        chain = [f"{int(pos) + k + 1}-{h}" for k, h in enumerate(hashes)]
        doc: dict[str, Any] = {
            "_id": st.doc_id,
            "_rev": chain[-1],
            "_revisions": {"start": int(pos) + depth, "ids": [*hashes[::-1], root_hash]},
            "branch": chain[-1],
        }
        atts: dict[str, Att] = {}
        if deleted:
            doc["_deleted"] = True
        else:
            doc.update(self.body(i))
            names = list(st.atts)[:1] + [self.att_name() for _ in range(self.rng.randint(0, 2))]
            if not names:
                names = [self.att_name()]
            for k, name in enumerate(names):
                atts[name] = self.att(i, k + 1)
            doc["_attachments"] = {n: a.inline() for n, a in atts.items()}
        return doc, chain, atts

    def conflicts(self, targets: list[tuple[int, DocState]], branches: int | None = None) -> None:
        """Conflicting branches from each target's first revision, with new_edits=false:
        the first through ``PUT /db/doc?new_edits=false``, the rest in one ``_bulk_docs``."""
        made: list[tuple[DocState, dict[str, Any], list[str], dict[str, Att], bool]] = []
        for i, st in targets:
            if not st.first_rev:  # its first write failed (recorded)
                continue
            for b in range(branches or self.rng.randint(1, 2)):
                deleted = b == 1 and i % 2 == 0
                doc, chain, atts = self.branch_doc(st, self.rng.randint(1, 3), deleted, i)
                made.append((st, doc, chain, atts, deleted))
        if not made:
            return
        reply = self.c.json("PUT", self.path(made[0][1]["_id"]) + "?new_edits=false", made[0][1])
        results_ok = [reply.status in (200, 201, 202)]
        docs = [m[1] for m in made[1:]]
        reply = self.c.json("POST", f"/{self.db}/_bulk_docs", {"docs": docs, "new_edits": False})
        answers = reply.json() if reply.status == 201 else []
        bad = {(r.get("id"), r.get("rev")) for r in answers if "error" in r}
        if bad:
            self.problem(f"settee: _bulk_docs new_edits=false answered errors {answers}")
        results_ok += [reply.status == 201 and (d["_id"], d["_rev"]) not in bad for d in docs]
        self.stats.tried("PUT /db/doc?new_edits=false (inline base64)", results_ok[0])
        for ok in results_ok[1:]:
            self.stats.tried("POST /db/_bulk_docs new_edits=false (inline base64)", ok)
        for (st, _doc, chain, atts, deleted), ok in zip(made, results_ok, strict=True):
            if not ok:
                continue
            self.stats.writes += 1
            for a in atts.values():
                self.stats.uploaded(a)
            parent = st.first_rev
            for rev in chain[:-1]:  # revisions without bodies: ids in the tree only
                st.revs.setdefault(rev, Rev(parent, {}, False))
                parent = rev
            st.record(chain[-1], parent, atts, deleted)  # no revpos sent: the leaf's position

    def problem(self, line: str) -> None:
        if self.c.problems is not None:
            self.c.problems.append(line)

    def replicated_only(self, count: int, first: int) -> None:
        """Documents that only ever came with new_edits=false: two branches over a
        shared root revision whose body was never sent."""
        targets = []
        for j in range(count):
            st = DocState(f"repl-{j:03d}")
            self.docs[st.doc_id] = st
            st.first_rev = f"1-{self.rev_hash()}"
            st.revs[st.first_rev] = Rev(None, {}, False)
            targets.append((first + j, st))
        self.conflicts(targets, branches=2)


# ---------------------------------------------------------------------------
# reading and normalizing


def strict_norm(doc: Any) -> Any:
    """The document as settee answered, each attachment's data replaced by its sha256."""
    if isinstance(doc, list):
        return [strict_norm(d) for d in doc]
    if not isinstance(doc, dict):
        return doc
    out = {k: (strict_norm(v) if k == "ok" else v) for k, v in doc.items()}
    atts = out.get("_attachments")
    if isinstance(atts, dict):
        new = {}
        for name, att in atts.items():
            att = dict(att)
            if "data" in att:
                raw = base64.b64decode(att.pop("data"))
                att["data_sha256"] = hashlib.sha256(raw).hexdigest()
                att["data_bytes"] = len(raw)
            new[name] = att
        out["_attachments"] = new
    return out


def canon(doc: Any) -> Any:
    """A document reduced to what any CouchDB-like store must agree on (for
    settee vs PouchDB / pouchdb-server, whose answers differ in form)."""
    if not isinstance(doc, dict):
        return doc
    # _deleted_conflicts is left out: PouchDB has no such option (it never answers one)
    out = {
        k: v
        for k, v in doc.items()
        if k not in ("_attachments", "_conflicts", "_deleted_conflicts")
    }
    if doc.get("_conflicts"):
        out["_conflicts"] = sorted(doc["_conflicts"])
    atts = doc.get("_attachments")
    if atts:
        out["_attachments"] = {
            name: {
                "content_type": att.get("content_type"),
                "digest": att.get("digest"),
                "revpos": att.get("revpos"),
                "sha256": att.get("sha256", att.get("data_sha256")),
                "bytes": att.get("bytes", att.get("data_bytes")),
            }
            for name, att in atts.items()
        }
    return out


def pouchdb_revpos(doc: Any) -> tuple[Any, int]:
    """The document as PouchDB stores it: every attachment's ``revpos`` set to the
    revision's own position. PouchDB's leveldb-core adapter (the memory adapter
    too) does that to every attachment it is given with data (saveAttachment:
    ``att.revpos = parseInt(rev, 10)``), replicated writes included, so no copy
    that passed through PouchDB keeps CouchDB's revpos. Returns the document and
    how many revpos values changed."""
    if isinstance(doc, list):  # a winner answer: [status, document]
        fixed, n = pouchdb_revpos(doc[1]) if len(doc) == 2 else (doc[1:], 0)
        return [doc[0], fixed], n
    if not isinstance(doc, dict) or "_rev" not in doc or not doc.get("_attachments"):
        return doc, 0
    pos = int(str(doc["_rev"]).split("-")[0])
    changed = 0
    atts = {}
    for name, att in doc["_attachments"].items():
        if att.get("revpos") != pos:
            changed += 1
            att = {**att, "revpos": pos}
        atts[name] = att
    return {**doc, "_attachments": atts}, changed


def leaves_by_rev(answer: Any) -> dict[str, Any]:
    """``open_revs=all`` as {rev: document or {missing}}."""
    out: dict[str, Any] = {}
    if not isinstance(answer, list):
        return {"<not a list>": answer}
    for item in answer:
        if "ok" in item:
            out[item["ok"]["_rev"]] = item["ok"]
        else:
            out[str(item.get("missing"))] = item
    return out


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, as readable paths (at most a few per value)."""
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return [f"{path or '.'}: {short(a)} != {short(b)}"]
    if isinstance(a, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            if key not in a:
                out.append(f"{path}.{key}: missing on the left, right has {short(b[key])}")
            elif key not in b:
                out.append(f"{path}.{key}: left has {short(a[key])}, missing on the right")
            else:
                out += diff(a[key], b[key], f"{path}.{key}")
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [
                f"{path or '.'}: list of {len(a)} != list of {len(b)}: {short(a)} != {short(b)}"
            ]
        out = []
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            out += diff(x, y, f"{path}[{k}]")
        return out
    return [] if a == b else [f"{path or '.'}: {short(a)} != {short(b)}"]


def short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "..."


class Reader:
    """Reads one database on one server the same way for every comparison."""

    def __init__(self, client: Client, db: str) -> None:
        self.c = client
        self.db = db

    def get(self, path: str, ok: tuple[int, ...] = (200,)) -> Reply:
        return self.c.request(
            "GET", f"/{self.db}{path}", None, {"Accept": "application/json"}, ok=ok
        )

    def info(self) -> dict[str, Any]:
        reply = self.c.request("GET", f"/{self.db}", None, {"Accept": "application/json"})
        return reply.json() if reply.status == 200 else {"status": reply.status}

    def all_docs(self) -> Any:
        reply = self.get("/_all_docs")
        if reply.status != 200:
            return {"status": reply.status}
        body = reply.json()
        return {"total_rows": body.get("total_rows"), "rows": body.get("rows")}

    def leaves_feed(self) -> dict[str, Any]:
        reply = self.get("/_changes?style=all_docs")
        out = {}
        for row in reply.json().get("results", []) if reply.status == 200 else []:
            out[row["id"]] = {
                "revs": sorted(c["rev"] for c in row["changes"]),
                "deleted": bool(row.get("deleted")),
            }
        return out

    def winner(self, doc_id: str, attachments: bool) -> tuple[int, Any]:
        query = "?revs=true&conflicts=true&deleted_conflicts=true"
        if attachments:
            query += "&attachments=true"
        reply = self.get(f"/{q(doc_id)}{query}", ok=(200, 404))
        return reply.status, strict_norm(reply.json())

    def bulk_get(self, pairs: list[tuple[str, str]]) -> dict[str, Any]:
        """``POST _bulk_get?revs=true&attachments=true`` as {"id rev": document or error}."""
        body = json.dumps({"docs": [{"id": i, "rev": r} for i, r in pairs]}).encode()
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        reply = self.c.request(
            "POST", f"/{self.db}/_bulk_get?revs=true&attachments=true", body, headers
        )
        if reply.status != 200:
            return {"status": reply.status}
        out = {}
        for result in reply.json().get("results", []):
            for item in result.get("docs", []):
                if "ok" in item:
                    out[f"{result['id']} {item['ok'].get('_rev')}"] = strict_norm(item["ok"])
                else:
                    out[f"{result['id']} {item.get('error', {}).get('rev')}"] = item
        return out

    def leaves(self, doc_id: str) -> Any:
        reply = self.get(f"/{q(doc_id)}?open_revs=all&revs=true&attachments=true")
        return (
            leaves_by_rev(strict_norm(reply.json()))
            if reply.status == 200
            else {"status": reply.status}
        )


# ---------------------------------------------------------------------------
# checks


def check_source(writer: Writer, src: Reader) -> list[str]:
    """Does settee hold what was written? Every leaf, its deletion and attachments."""
    out = []
    for doc_id, st in writer.docs.items():
        if not st.revs:  # its first write failed: that answer is listed already
            continue
        leaves = src.leaves(doc_id)
        want = st.leaves()
        if set(leaves) != want:
            out.append(f"src {doc_id!r}: leaves {sorted(leaves)} != written {sorted(want)}")
        for rev in sorted(want & set(leaves)):
            doc = leaves[rev]
            expect = st.revs[rev]
            if bool(doc.get("_deleted")) != expect.deleted:
                out.append(
                    f"src {doc_id!r} {rev}: _deleted {doc.get('_deleted')} != {expect.deleted}"
                )
            got = {
                n: (
                    a.get("data_sha256"),
                    a.get("content_type"),
                    a.get("data_bytes"),
                    a.get("revpos"),
                )
                for n, a in (doc.get("_attachments") or {}).items()
            }
            if got != expect.atts:
                fields = ("sha256", "content_type", "length", "revpos")
                for line in diff(
                    {n: dict(zip(fields, v, strict=True)) for n, v in got.items()},
                    {n: dict(zip(fields, v, strict=True)) for n, v in expect.atts.items()},
                ):
                    out.append(f"src {doc_id!r} {rev}: attachments (settee vs written) {line}")
    return out


@dataclasses.dataclass
class Restamped:
    """Attachment revpos values PouchDB rewrote, per kind of read (not failures)."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    docs: set[str] = dataclasses.field(default_factory=set)

    def add(self, label: str, doc_id: str, n: int) -> None:
        if n:
            self.counts[label] = self.counts.get(label, 0) + n
            self.docs.add(doc_id)


def compare_settee(src: Reader, back: Reader, ids: list[str], restamped: Restamped) -> list[str]:
    """src and back on settee must answer identically (attachment data as sha256),
    except for the attachment revpos values PouchDB sets (``pouchdb_revpos``)."""
    out = []
    a_info, b_info = src.info(), back.info()
    for key in ("doc_count", "doc_del_count"):
        if a_info.get(key) != b_info.get(key):
            out.append(f"db info {key}: src {a_info.get(key)} != back {b_info.get(key)}")
    out += [f"_all_docs {line}" for line in diff(src.all_docs(), back.all_docs())]
    out += [f"_changes leaves {line}" for line in diff(src.leaves_feed(), back.leaves_feed())]
    for doc_id in ids:
        for attachments in (False, True):
            label = "winner+attachments" if attachments else "winner(stubs)"
            mine, n = pouchdb_revpos(list(src.winner(doc_id, attachments)))
            restamped.add(label, doc_id, n)
            theirs = list(back.winner(doc_id, attachments))
            out += [f"{doc_id!r} {label} {line}" for line in diff(mine, theirs)]
        leaves = {}
        for rev, leaf in src.leaves(doc_id).items():
            leaves[rev], n = pouchdb_revpos(leaf)
            restamped.add("open_revs=all", doc_id, n)
        out += [f"{doc_id!r} open_revs=all {line}" for line in diff(leaves, back.leaves(doc_id))]
    return out


def compare_bulk_get(src: Reader, back: Reader, restamped: Restamped, chunk: int = 20) -> list[str]:
    """``_bulk_get?attachments=true`` (PouchDB 9 does not use it: it fetches each
    attachment alone): src's answer must equal src's open_revs reads, and back's
    must equal src's (revpos as PouchDB sets it)."""
    out = []
    feed = src.leaves_feed()
    pairs = [(doc_id, rev) for doc_id in sorted(feed) for rev in feed[doc_id]["revs"]]
    for k in range(0, len(pairs), chunk):
        part = pairs[k : k + chunk]
        got_src = src.bulk_get(part)
        opened: dict[str, Any] = {}
        for doc_id in sorted({i for i, _ in part}):
            for rev, leaf in src.leaves(doc_id).items():
                if (doc_id, rev) in part:
                    opened[f"{doc_id} {rev}"] = leaf
        out += [f"src _bulk_get vs open_revs {line}" for line in diff(got_src, opened)]
        mine = {}
        for key, doc in got_src.items():
            mine[key], n = pouchdb_revpos(doc)
            restamped.add("_bulk_get", key.rsplit(" ", 1)[0], n)
        out += [f"_bulk_get src vs back {line}" for line in diff(mine, back.bulk_get(part))]
    return out


def check_atts_since(reader: Reader, doc_id: str, since: str, with_attachments: bool) -> list[str]:
    """``GET /db/doc?atts_since=[since]`` (with or without ``attachments=true``):
    data exactly for the attachments whose revpos is above since's position,
    stubs for the others (SEMANTICS.md §18; CouchDB chttpd_db adds ``attachments``
    and ``{atts_since, ...}`` to the open options, and couch_db
    apply_open_options2 stubs the older ones, with or without attachments=true)."""
    query = f"atts_since={q(json.dumps([since]))}"
    if with_attachments:
        query = "attachments=true&" + query
    reply = reader.get(f"/{q(doc_id)}?{query}", ok=(200, 404))
    if reply.status != 200:
        return []
    pos = int(since.split("-")[0])
    out = []
    for name, att in (reply.json().get("_attachments") or {}).items():
        inline = "data" in att
        if inline != (att.get("revpos", 0) > pos):
            out.append(
                f"GET /{reader.db}/{q(doc_id)}?{query}: {name!r} revpos {att.get('revpos')} "
                f"came {'with data' if inline else 'as a stub'}"
            )
    return out


def compare_other(
    name: str, src: Reader, other: dict[str, dict[str, Any]], ids: list[str]
) -> list[str]:
    """src against another implementation's copy, in canonical form."""
    out = []
    for doc_id in ids:
        status, doc = src.winner(doc_id, True)
        entry = other.get(doc_id)
        if entry is None:
            out.append(f"{name}: {doc_id!r} missing")
            continue
        mine = canon(pouchdb_revpos(doc)[0]) if status == 200 else {"status": 404}
        theirs = (
            canon(entry["winner"])
            if "_id" in entry["winner"]
            else {"status": entry["winner"].get("status")}
        )
        out += [f"{name} {doc_id!r} winner {line}" for line in diff(mine, theirs)]
        src_leaves = {rev: canon(pouchdb_revpos(d)[0]) for rev, d in src.leaves(doc_id).items()}
        their_leaves = {rev: canon(d) for rev, d in entry["leaves"].items()}
        out += [f"{name} {doc_id!r} leaves {line}" for line in diff(src_leaves, their_leaves)]
    return out


def read_other_server(client: Client, db: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """pouchdb-server's copy: each winner and its leaves, attachment data as sha256."""
    reader = Reader(client, db)
    out = {}
    for doc_id in ids:
        status, winner = reader.winner(doc_id, True)
        if status != 200:
            winner = {"status": status}
        out[doc_id] = {"winner": winner, "leaves": reader.leaves(doc_id)}
    return out


def local_dump(dump: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The node side's dump of PouchDB's database, as read_other_server gives it."""
    out = {}
    for doc_id, entry in dump["docs"].items():
        leaves = {d["_rev"]: d for d in entry["leaves"] if "_rev" in d}
        out[doc_id] = {"winner": entry["winner"], "leaves": leaves}
    return out


# ---------------------------------------------------------------------------
# the run


@dataclasses.dataclass
class Options:
    docs: int
    seed: int
    max_size: int
    batch_size: int | None
    node_dir: Path
    settee: str
    keep: bool
    timeout: float
    headerless: bool


def parse_args(argv: list[str]) -> Options:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=240)
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--max-size", type=int, default=5 * MIB)
    p.add_argument("--batch-size", type=int, default=None, help="PouchDB replication batch_size")
    p.add_argument("--node-dir", default="/tmp/rt/node")
    p.add_argument("--settee", default=str(ROOT / ".venv" / "bin" / "settee"))
    p.add_argument("--keep", action="store_true", help="keep the temp dirs and logs")
    p.add_argument("--timeout", type=float, default=1800, help="seconds for the replication legs")
    p.add_argument(
        "--no-headerless-parts",
        action="store_true",
        help="send every multipart/related attachment part with part headers "
        "(CouchDB 2+'s shape), never CouchDB 1.x's headerless parts",
    )
    a = p.parse_args(argv)
    return Options(
        a.docs,
        a.seed,
        a.max_size,
        a.batch_size,
        Path(a.node_dir),
        a.settee,
        a.keep,
        a.timeout,
        not a.no_headerless_parts,
    )


def expected_node_status(entry: dict[str, Any]) -> bool:
    """The 4xx answers a replicator expects: a checkpoint or a database not there yet
    (``GET /db/_local/id`` or ``GET /db`` before ``PUT /db``, 404)."""
    path = urllib.parse.urlsplit(entry["url"]).path
    if entry["status"] != 404 or entry["method"] != "GET":
        return False
    return "/_local/" in path or path.rstrip("/").count("/") == 1


def summarize_requests(requests: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Requests per leg and server, by method and kind of path."""
    counts: dict[str, dict[str, int]] = {}
    for r in requests:
        key = f"{r['leg'].split(' ')[0]} {r['server']}"
        parts = urllib.parse.urlsplit(r["url"]).path.rstrip("/").split("/")[1:]
        if len(parts) > 1 and parts[1].startswith("_"):
            kind = parts[1]
        else:
            kind = {0: "/", 1: "db", 2: "doc"}.get(len(parts), "attachment")
        name = f"{r['method']} {kind}"
        counts.setdefault(key, {})
        counts[key][name] = counts[key].get(name, 0) + 1
    return counts


def write_source(client: Client, opts: Options) -> tuple[Writer, float]:
    """Database ``src``: documents, later revisions, conflicts, deletions."""
    client.json("PUT", "/src", ok=(201,))
    writer = Writer(client, "src", random.Random(opts.seed), opts.max_size, opts.headerless)
    t0 = time.monotonic()
    writer.create(opts.docs)
    for i in range(opts.docs):
        if i % 3 == 0 or i % 23 == 4:  # conflict targets need a second revision
            writer.update(writer.docs[writer.doc_id(i)], i, writer.rng.randint(1, 3))
    targets = [(i, writer.docs[writer.doc_id(i)]) for i in range(opts.docs) if i % 23 == 4]
    writer.conflicts(targets)
    writer.replicated_only(3, opts.docs)
    for i in range(opts.docs):
        if i % 37 == 11:
            writer.delete_doc(writer.docs[writer.doc_id(i)])
    return writer, time.monotonic() - t0


def run_legs(settee: Server, pserver: Server, opts: Options, work: Path) -> dict[str, Any]:
    """The replication legs, in node (scripts/attachment_roundtrip.js)."""
    config = {
        "settee": settee.url,
        "pserver": pserver.url,
        "src": "src",
        "mid": "mid",
        "back": "back",
        "batch_size": opts.batch_size,
        "result": str(work / "node-result.json"),
    }
    (work / "config.json").write_text(json.dumps(config))
    env = dict(os.environ, NODE_PATH=str(opts.node_dir / "node_modules"))
    script = str(HERE / "attachment_roundtrip.js")
    node = subprocess.Popen(["node", script, str(work / "config.json")], env=env)
    try:
        node.wait(opts.timeout)
    except subprocess.TimeoutExpired:
        node.kill()  # our own child
        node.wait()
        raise RuntimeError(
            f"the replication legs did not finish in {opts.timeout}s "
            "(the last leg and any slow request are printed above)"
        ) from None
    if node.returncode != 0:
        raise RuntimeError(f"attachment_roundtrip.js exited {node.returncode}")
    result: dict[str, Any] = json.loads((work / "node-result.json").read_text())
    return result


def check_legs(result: dict[str, Any], problems: list[str], diffs: list[str]) -> None:
    """Failed legs, write failures, a second leg 3 that wrote again, and every
    4xx/5xx a server answered (settee's go to ``problems``)."""
    for leg in result["legs"]:
        name, res = leg["name"], leg["result"] or {}
        if leg["error"]:
            diffs.append(f"leg {name} failed: {short(leg['error'], 2000)}")
        elif res.get("doc_write_failures") or res.get("errors"):
            diffs.append(f"leg {name}: {short(res, 2000)}")
        if name.startswith("3b") and res.get("docs_written"):
            diffs.append(f"leg {name} wrote {res['docs_written']} docs again")
    for r in result["requests"]:
        if r["status"] is None or (r["status"] >= 400 and not expected_node_status(r)):
            answer = r.get("response") or r.get("error", "")
            line = (
                f"{r['server']} during leg {r['leg']!r}: {r['method']} {r['url']} "
                f"({r['request_bytes']} body bytes) -> {r['status']} {answer}"
            )
            (problems if r["server"] == "settee" else diffs).append(line)


@dataclasses.dataclass
class Findings:
    source: list[str]
    settee: list[str]
    reads: list[str]
    pserver: list[str]
    local: list[str]
    divergences: list[str]  # from CouchDB, outside the round trip: not in the verdict
    restamped: Restamped
    ids: list[str]
    seconds: float

    def all(self) -> list[str]:
        return self.source + self.settee + self.reads + self.pserver + self.local


def compare_all(
    writer: Writer, src: Reader, back: Reader, pclient: Client, local: dict[str, Any]
) -> Findings:
    """Every comparison after the legs (src vs written was done before them)."""
    t0 = time.monotonic()
    ids = sorted(set(src.leaves_feed()) | set(back.leaves_feed()))
    restamped = Restamped()
    settee_diffs = [f"src vs back: {d}" for d in compare_settee(src, back, ids, restamped)]
    reads = compare_bulk_get(src, back, restamped)
    divergences: list[str] = []
    for doc_id, st in writer.docs.items():
        if st.first_rev and doc_id in ids:
            for reader in (src, back):
                reads += check_atts_since(reader, doc_id, st.first_rev, False)
                divergences += check_atts_since(reader, doc_id, st.first_rev, True)
    p_copy = read_other_server(pclient, "mid", ids)
    pserver = compare_other("src vs pouchdb-server/mid:", src, p_copy, ids)
    local_diffs = compare_other("src vs PouchDB(memory):", src, local_dump(local), ids)
    seconds = time.monotonic() - t0
    return Findings(
        [], settee_diffs, reads, pserver, local_diffs, divergences, restamped, ids, seconds
    )


@dataclasses.dataclass
class Counts:
    leaves: int = 0
    atts: int = 0
    att_bytes: int = 0
    conflicted: int = 0
    all_deleted: int = 0


def count_source(src: Reader, ids: list[str]) -> Counts:
    """What replicates, from src as settee holds it: leaves and their attachments."""
    c = Counts()
    for doc_id in ids:
        leaves = src.leaves(doc_id)
        c.leaves += len(leaves)
        live = [d for d in leaves.values() if not d.get("_deleted")]
        c.conflicted += len(live) > 1
        c.all_deleted += not live
        for d in leaves.values():
            for a in (d.get("_attachments") or {}).values():
                c.atts += 1
                c.att_bytes += a.get("data_bytes", 0)
    return c


def print_lines(title: str, lines: list[str], limit: int | None = None) -> None:
    if lines:
        print(f"\n{title}")
        for line in lines[:limit]:
            print("  " + line)


def print_summary(
    opts: Options,
    writer: Writer,
    t_write: float,
    result: dict[str, Any],
    found: Findings,
    counts: Counts,
    infos: dict[str, dict[str, Any]],
) -> None:
    v, st, rs = result["versions"], writer.stats, found.restamped
    pserver_version = node_package_version(opts.node_dir, "pouchdb-server")
    src_info = infos["src"]
    print("\n" + "=" * 78)
    print(
        f"settee -> PouchDB {v['pouchdb']} (memory adapter, node {v['node']}) -> "
        f"pouchdb-server {pserver_version} (--in-memory) -> settee"
    )
    defaults = "PouchDB defaults (batch_size 100, batches_limit 10)"
    print(f"replication options: {result['options'] or defaults}")
    print(
        f"documents: {len(found.ids)} ids ({src_info.get('doc_count')} live, "
        f"{src_info.get('doc_del_count')} deleted; {counts.conflicted} with conflicts, "
        f"{counts.all_deleted} whose every leaf is deleted)"
    )
    print(
        "  doc_count "
        + ", ".join(f"{k} {i.get('doc_count')}" for k, i in infos.items())
        + f", PouchDB(memory) {result['local']['info']['doc_count']}"
    )
    print(f"revisions written: {st.writes}; leaf revisions (what replicates): {counts.leaves}")
    for path, (sent, accepted) in sorted(st.paths.items()):
        print(f"  {path}: {accepted} of {sent} accepted")
    print(
        f"attachments written: {st.att_uploads} uploads, {st.att_bytes:,} bytes (largest "
        f"{st.largest:,}); on leaves: {counts.atts} attachments, {counts.att_bytes:,} bytes"
    )
    legs = "".join(f"; leg {g['name'].split(' ')[0]} {g['ms'] / 1000:.1f}s" for g in result["legs"])
    print(f"time: write src {t_write:.1f}s{legs}; compare {found.seconds:.1f}s")
    for leg in result["legs"]:
        r = leg["result"] or {}
        print(
            f"  leg {leg['name']}: docs_read {r.get('docs_read')} docs_written "
            f"{r.get('docs_written')} failures {r.get('doc_write_failures')}"
            f"{' ERROR' if leg['error'] else ''}"
        )
    big = max(
        (r["request_bytes"] for r in result["requests"] if r["server"] == "settee"), default=0
    )
    print(f"largest request body PouchDB sent to settee: {big:,} bytes")
    for key, by_kind in sorted(summarize_requests(result["requests"]).items()):
        print(f"  requests leg {key}: " + ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())))
    print(
        f"differences: src vs written {len(found.source)}, src vs back {len(found.settee)}, "
        f"src vs pouchdb-server {len(found.pserver)}, src vs PouchDB(memory) {len(found.local)}, "
        f"settee reads (_bulk_get?attachments=true, ?atts_since) {len(found.reads)}"
    )
    print(
        f"attachment revpos rewritten by PouchDB (leg 1; expected, not a difference): "
        f"{sum(rs.counts.values())} values in {len(rs.docs)} docs "
        f"({', '.join(f'{k} {n}' for k, n in sorted(rs.counts.items()))}); "
        "every other field, and every byte, compared exactly"
    )


def run(opts: Options) -> int:
    ensure_node_packages(opts.node_dir)
    work = Path(tempfile.mkdtemp(prefix="settee-att-rt-"))
    problems: list[str] = []  # settee's unexpected answers
    diffs: list[str] = []  # everything else that differs
    servers: list[Server] = []
    t_start = time.monotonic()
    try:
        settee = start_settee(opts.settee, work)
        servers.append(settee)
        pserver = start_pouchdb_server(opts.node_dir, work)
        servers.append(pserver)
        print(f"settee serve   {settee.url}  (--dir {work / 'settee-data'}; defaults, fsync on)")
        print(f"pouchdb-server {pserver.url}  (--in-memory)")

        client = Client(settee.url, "settee", problems)
        writer, t_write = write_source(client, opts)
        st = writer.stats
        print(
            f"wrote src: {len(writer.docs)} docs, {st.writes} revisions, {st.att_uploads} "
            f"attachment uploads, {st.att_bytes:,} bytes (largest {st.largest:,}) in {t_write:.1f}s"
        )
        src = Reader(client, "src")
        source_diffs = check_source(writer, src)
        print(f"src vs written: {len(source_diffs)} differences")

        result = run_legs(settee, pserver, opts, work)
        check_legs(result, problems, diffs)

        back = Reader(client, "back")
        pclient = Client(pserver.url, "pouchdb-server", diffs)
        found = compare_all(writer, src, back, pclient, result["local"])
        found.source = source_diffs
        counts = count_source(src, found.ids)
        infos = {
            "src": src.info(),
            "back": back.info(),
            "pouchdb-server": Reader(pclient, "mid").info(),
        }
        print_summary(opts, writer, t_write, result, found, counts, infos)

        log = settee.log.read_text(errors="replace").splitlines()
        problems += [
            f"settee log: {line}" for line in log if "Traceback" in line or " failed" in line
        ]
        diffs += found.all()
        print_lines(f"settee answered {len(problems)} unexpected error(s):", problems)
        print_lines(
            f"not counted in the verdict: settee ignores atts_since when attachments=true is also "
            f"given (CouchDB then stubs the older attachments): {len(found.divergences)} "
            "attachments sent whole, e.g.:",
            found.divergences,
            3,
        )
        print_lines(f"{len(diffs)} difference(s):", diffs)
        verdict = "PASS" if not diffs and not problems else "FAIL"
        print(
            f"\n{verdict}: round trip settee -> PouchDB -> pouchdb-server -> settee, "
            f"{len(found.ids)} docs, {counts.leaves} leaf revisions, {counts.atts} attachments, "
            f"{counts.att_bytes:,} bytes; {len(problems)} settee errors, {len(diffs)} differences; "
            f"wall time {time.monotonic() - t_start:.1f}s"
        )
        return 0 if verdict == "PASS" else 1
    finally:
        for server in servers:
            server.stop()
        if opts.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(opts)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        print(f"attachment_roundtrip: could not run: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
