"""Damage every file settee writes, systematically, and check what it does.

``python scripts/fault_sweep.py embedded [--stride N]`` builds a small database
through the embedded API (conflicts, an attachment, a deletion, a compaction,
then more commits), records what every document read as after each commit, and
for each file of the directory (``settee.meta``, the shard files, ``HEADS``,
``LOCK``) applies one fault at a time: a single-bit flip at every byte (the bit
is the offset modulo 8; ``--stride`` samples the shard files), a truncation to
every length, an empty file, a directory in its place, no read permission, the
file missing. After each it opens the database (readonly, then as the writer),
reads everything, writes to every shard, closes and opens it again, and
reports any of the promises broken:

* an exception that is not a ``SetteeError`` (a raw ``OSError``, ``KeyError``...);
* a hang (each case runs under a watchdog);
* a read that returns data no commit of that shard ever held (wrong data), or an
  older commit without a ``TornTailWarning``/``LostCommitWarning`` saying so;
* a file open removed, or a shard that refuses a write (other than with
  ``CorruptionError`` for damage the write had to read) after opening.

``python scripts/fault_sweep.py http`` does the same for ``settee serve``'s side
files (``_settings``, ``_local`` documents, ``_security``, ``_purged_infos``, the
view and Mango index databases under ``_views``) and its database files, through
HTTP: every answer must be a CouchDB JSON body, 2xx with the data as written, or
an error; a 500 whose exception was not an ``HTTPError``/``SetteeError`` (a
traceback in the log) or a hang is reported.

``python scripts/fault_sweep.py kill-serve [--kills N]`` runs ``settee serve``
with fsync on under a client doing ``_bulk_docs``, ``_local`` and ``_security``
writes and view queries, kills it with SIGKILL at many points, restarts it and
checks every acknowledged write and that every shard still takes a write.

``python scripts/fault_sweep.py kill-embedded [--kills N]`` does the same to an
embedded writer process (bulk writes, attachments, replicated conflicts, purges,
compactions): every acknowledged write is there after each kill, nothing purged
comes back, and both shards take a write.

The test suite runs a deterministic sample of each (``tests/test_fault_sweep.py``);
this script is the full sweep. Exit status 1 when anything was reported.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import functools
import http.client
import json
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import settee
from settee.file import TornTailWarning
from settee.spec.routing import shard_of

WATCHDOG = 30.0

# -- faults ------------------------------------------------------------------------------------


def faults(size: int, stride: int = 1, bits: bool = False) -> Iterator[tuple[str, Any]]:
    """Every fault of a file of ``size`` bytes: ``(kind, argument)``; a flip's argument
    is ``(offset, bit)``, every bit of the byte when ``bits``, else bit offset % 8."""
    for offset in range(0, size, stride):
        for bit in range(8) if bits else (offset % 8,):
            yield "flip", (offset, bit)
    for length in range(0, size, stride):
        yield "truncate", length
    for kind in ("empty", "directory", "unreadable", "missing"):
        yield kind, None


def apply_fault(path: Path, kind: str, arg: Any) -> None:
    """Apply one fault to the file at ``path``."""
    if kind == "flip":
        offset, bit = arg
        data = bytearray(path.read_bytes())
        data[offset] ^= 1 << bit
        path.write_bytes(bytes(data))
    elif kind == "truncate":
        os.truncate(path, arg)
    elif kind == "empty":
        os.truncate(path, 0)
    elif kind == "directory":
        path.unlink()
        path.mkdir()
    elif kind == "unreadable":
        path.chmod(0)
    elif kind == "missing":
        path.unlink()
    else:
        raise ValueError(kind)


def restore_permissions(root: Path) -> None:
    for p in [root, *root.rglob("*")]:
        with contextlib.suppress(OSError):
            p.chmod(p.stat().st_mode | stat.S_IRUSR | stat.S_IWUSR | stat.S_IXUSR)


def watchdog(fn: Callable[[], Any], seconds: float = WATCHDOG) -> Any:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(fn).result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        raise AssertionError(f"hang: no answer in {seconds} s") from None
    finally:
        pool.shutdown(wait=False)


# -- embedded ----------------------------------------------------------------------------------

SHARDS = 2


def _read_all(db: Any) -> dict[str, Any]:
    """Every document (winner with conflicts, attachments inline, every leaf) by id."""
    out: dict[str, Any] = {}
    rows = db.all_docs()["rows"]
    for row in rows:
        doc_id = row["id"]
        doc = db.get(doc_id, conflicts=True, revs=True, attachments=True)
        leaves = sorted([doc["_rev"], *doc.get("_conflicts", [])])
        out[doc_id] = [doc, [db.get(doc_id, rev=r) for r in leaves]]
    for change in db.changes(include_docs=True)["results"]:
        out.setdefault("changes:" + change["id"], change.get("deleted", False))
    return out


def _by_shard(state: dict[str, Any]) -> list[dict[str, Any]]:
    shards: list[dict[str, Any]] = [{} for _ in range(SHARDS)]
    for key, value in state.items():
        doc_id = key.split(":", 1)[1] if key.startswith("changes:") else key
        shards[shard_of(doc_id, SHARDS)][key] = value
    return shards


def build_embedded(path: Path) -> list[list[dict[str, Any]]]:
    """The sweep's database; each shard's states after every commit (oldest first)."""
    history: list[dict[str, Any]] = [{}]
    with settee.open(str(path), shards=SHARDS, fsync=True) as db:

        def step(fn: Callable[[], Any]) -> Any:
            result = fn()
            history.append(_read_all(db))
            return result

        revs = {}
        for i in range(6):
            revs[f"d{i}"] = step(lambda i=i: db.put({"_id": f"d{i}", "v": i}))["rev"]
        att = {"a.txt": {"content_type": "text/plain", "data": "aGVsbG8gd29ybGQ="}}
        step(lambda: db.put({"_id": "d0", "_rev": revs["d0"], "_attachments": att}))
        step(
            lambda: db.bulk_docs(
                [{"_id": "d1", "_rev": "2-" + "b" * 32, "w": 1}],
                new_edits=False,
            )
        )
        step(lambda: db.delete("d2", revs["d2"]))
        db.compact()
        history.append(_read_all(db))
        for i in range(6, 10):
            step(lambda i=i: db.put({"_id": f"d{i}", "v": i, "pad": "p" * 300}))
    return [_by_shard(state) for state in history]


def _writes_after(db: Any, tag: str) -> list[str]:
    """Write one new document to every shard; the ids written."""
    ids = []
    for shard in range(SHARDS):
        n = 0
        while shard_of(f"{tag}-{n}", SHARDS) != shard:
            n += 1
        ids.append(f"{tag}-{n}")
    for doc_id in ids:
        db.put({"_id": doc_id, "after": True})
    return ids


def check_embedded_case(
    pristine: Path, work: Path, name: str, kind: str, arg: Any, history: list[list[Any]]
) -> str | None:
    """One fault of one file; a description of the broken promise, or None."""
    if work.exists():
        restore_permissions(work)
        shutil.rmtree(work)
    shutil.copytree(pristine, work)
    target = work / name
    apply_fault(target, kind, arg)
    before = {p.name for p in work.iterdir()}

    def run() -> str | None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outcome = _open_and_read(work, history, readonly=True, caught=caught)
            if outcome:
                return "readonly: " + outcome
            caught.clear()
            outcome = _open_and_read(work, history, readonly=False, caught=caught)
            return outcome

    try:
        problem = watchdog(run)
    except AssertionError as exc:
        problem = str(exc)
    finally:
        restore_permissions(work)
    after = {p.name for p in work.iterdir()}
    if before - after:
        problem = (problem or "") + f" open removed {sorted(before - after)}"
    return problem


def _open_and_read(
    path: Path, history: list[list[Any]], *, readonly: bool, caught: list[Any]
) -> str | None:
    try:
        db = settee.open(str(path), readonly=readonly)
    except settee.SetteeError:
        return None
    except Exception as exc:  # the finding
        return f"open raised {type(exc).__name__}: {exc}"
    try:
        try:
            state = _read_all(db)
        except settee.SetteeError:
            state = None
        except Exception as exc:
            return f"read raised {type(exc).__name__}: {exc}"
        if state is not None:
            warned = any(issubclass(w.category, TornTailWarning) for w in caught)
            for shard, view in enumerate(_by_shard(state)):
                states = [h[shard] for h in history]
                if view not in states:
                    return f"shard {shard} read as no commit held it: {sorted(view)}"
                if view != states[-1] and not warned:
                    return f"shard {shard} silently at an older commit"
        if readonly:
            return None
        try:
            ids = _writes_after(db, "after")
        except settee.CorruptionError:
            return None  # the write had to read damaged bytes
        except settee.SetteeError as exc:
            return f"a shard refused a write after open: {exc}"
        except Exception as exc:
            return f"write raised {type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(settee.SetteeError):
            db.close()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with settee.open(str(path)) as again:
                for doc_id in ids:
                    again.get(doc_id)
    except settee.NotFound:
        return f"a write acknowledged after open was lost: {ids}"
    except settee.SetteeError:
        pass  # the damage is still there, and said so
    except Exception as exc:
        return f"reopen raised {type(exc).__name__}: {exc}"
    return None


def sweep_embedded(stride: int, only: str | None = None) -> list[str]:
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        pristine = Path(tmp) / "db"
        history = build_embedded(pristine)
        names = sorted(p.name for p in pristine.iterdir())
        for name in names:
            if only and name != only:
                continue
            size = (pristine / name).stat().st_size
            step = 1 if size <= 512 else stride
            count = 0
            for kind, arg in faults(size, step, bits=size <= 512):
                problem = check_embedded_case(
                    pristine, Path(tmp) / "work", name, kind, arg, history
                )
                count += 1
                if problem:
                    found.append(f"{name} {kind} {arg}: {problem}")
                    print(found[-1], flush=True)
            print(f"{name}: {size} bytes, {count} faults", flush=True)
    return found


# -- http --------------------------------------------------------------------------------------


class Client:
    def __init__(self, port: int) -> None:
        self.port = port

    def __call__(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None
    ) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WATCHDOG)
        try:
            data = raw if raw is not None else None if body is None else json.dumps(body)
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            try:
                payload = resp.read()
            except http.client.IncompleteRead:
                # Cut short after its status (a damaged chunk past the first): the
                # client sees the answer fail, which is not silent.
                return resp.status, {"cut short": True}
        finally:
            conn.close()
        try:
            return resp.status, json.loads(payload)
        except ValueError:
            return resp.status, payload


def _serve_workload(c: Client) -> None:
    assert c("PUT", "/db?q=2")[0] == 201
    docs = [{"_id": f"d{i}", "v": i, "name": f"n{i % 3}"} for i in range(12)]
    assert c("POST", "/db/_bulk_docs", {"docs": docs})[0] == 201
    assert c("PUT", "/db/_local/ck", {"seq": 5})[0] == 201
    view = "function(doc){ if (doc.v !== undefined) emit(doc.v, 1); }"
    ddoc = {"views": {"byv": {"map": view, "reduce": "_count"}}}
    assert c("PUT", "/db/_design/v", ddoc)[0] == 201
    assert c("GET", "/db/_design/v/_view/byv?reduce=false")[0] == 200
    idx = {"index": {"fields": ["name"]}, "name": "byname", "ddoc": "m"}
    assert c("POST", "/db/_index", idx)[0] == 200
    assert c("POST", "/db/_find", {"selector": {"name": "n1"}, "use_index": "m"})[0] == 200
    _, doc = c("GET", "/db/d5")
    att = f"/db/d5/att?rev={doc['_rev']}"
    assert c("PUT", att, raw=bytes(range(256)) * 300)[0] == 201
    other = {"_id": "d6", "_rev": "2-" + "c" * 32, "v": "other"}
    assert c("POST", "/db/_bulk_docs", {"docs": [other], "new_edits": False})[0] == 201
    _, doc = c("GET", "/db/d3")
    assert c("POST", "/db/_purge", {"d3": [doc["_rev"]]})[0] == 201
    assert c("PUT", "/db/_security", {"admins": {"names": ["bob"]}, "members": {}})[0] == 200
    assert c("PUT", "/db/_revs_limit", raw=b"7")[0] == 200
    assert c("PUT", "/db/_purged_infos_limit", raw=b"50")[0] == 200


#: The requests made after each fault: every one reads or writes a side file.
SERVE_REQUESTS: tuple[tuple[str, str, Any], ...] = (
    ("GET", "/db", None),
    ("GET", "/db/_all_docs?include_docs=true", None),
    ("GET", "/db/_changes", None),
    ("GET", "/db/d5/att", None),
    ("GET", "/db/d6?conflicts=true&revs=true", None),
    ("GET", "/db/_local/ck", None),
    ("GET", "/db/_local_docs", None),
    ("GET", "/db/_security", None),
    ("GET", "/db/_revs_limit", None),
    ("GET", "/db/_purged_infos_limit", None),
    ("GET", "/db/_purged_infos", None),
    ("GET", "/db/_design/v/_view/byv?reduce=false", None),
    ("GET", "/db/_design/v/_view/byv", None),
    ("POST", "/db/_find", {"selector": {"name": "n1"}, "use_index": "m"}),
    ("GET", "/db/_index", None),
    ("PUT", "/db/_local/ck2", {"seq": 6}),
    ("PUT", "/db/_security", {"admins": {"names": ["eve"]}, "members": {}}),
    ("PUT", "/db/_revs_limit", 9),
    ("POST", "/db/_bulk_docs", {"docs": [{"_id": f"after{i}"} for i in range(6)]}),
    ("POST", "/db/_purge", {"d4": ["1-" + "0" * 32]}),
    ("GET", "/db/_design/v/_view/byv?reduce=false", None),
    ("GET", "/_all_dbs", None),
    ("PUT", "/other", None),
)


class _Tracebacks(logging.Handler):
    """Collects the server's logged exceptions (an error a handler did not expect)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            self.found.append(f"{type(exc).__name__}: {exc}"[:300])


def _serve_answers(root: Path) -> tuple[list[tuple[int, Any]], list[str]]:
    from settee.serve import start_server

    handler = _Tracebacks()
    logger = logging.getLogger("settee")
    logger.addHandler(handler)
    answers: list[tuple[int, Any]] = []
    try:
        handle = start_server(str(root), "127.0.0.1", 0, fsync=False)
        try:
            c = Client(handle.port)
            for method, path, body in SERVE_REQUESTS:
                raw = json.dumps(body).encode() if body is not None else None
                answers.append(c(method, path, raw=raw))
        finally:
            handle.stop()
    finally:
        logger.removeHandler(handler)
    return answers, handler.found


def _normal(answer: tuple[int, Any]) -> tuple[int, Any]:
    status, body = answer
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in ("instance_start_time", "sizes")}
    return status, body


def check_http_case(
    pristine: Path, work: Path, rel: str, kind: str, arg: Any, expected: list[Any]
) -> str | None:
    if work.exists():
        restore_permissions(work)
        shutil.rmtree(work)
    shutil.copytree(pristine, work, symlinks=True)
    apply_fault(work / rel, kind, arg)
    try:
        answers, tracebacks = watchdog(lambda: _serve_answers(work), seconds=120)
    except AssertionError as exc:
        return str(exc)
    finally:
        restore_permissions(work)
    problems = [f"logged {t}" for t in tracebacks]
    for (method, path, _), got, want in zip(SERVE_REQUESTS, answers, expected, strict=True):
        status, body = got
        if "/att" in path and status == 200:
            if got != want and body != {"cut short": True}:
                problems.append(f"{method} {path}: 200 but not the bytes written")
        elif isinstance(body, bytes):
            problems.append(f"{method} {path}: {status} not JSON: {body[:100]!r}")
        elif status >= 500 and status != 507 and "unknown_error" in json.dumps(body):
            problems.append(f"{method} {path}: {status} {json.dumps(body)[:200]}")
        elif status < 300 and method == "GET" and _normal(got) != _normal(want):
            problems.append(f"{method} {path}: 200 but not as written: {json.dumps(body)[:200]}")
    return "; ".join(problems) or None


def _side_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def sweep_http(stride: int, only: str | None = None) -> list[str]:
    from settee.serve import start_server

    found = []
    with tempfile.TemporaryDirectory() as tmp:
        pristine = Path(tmp) / "root"
        handle = start_server(str(pristine), "127.0.0.1", 0, fsync=True)
        try:
            _serve_workload(Client(handle.port))
        finally:
            handle.stop()
        base = Path(tmp) / "base"
        shutil.copytree(pristine, base)
        expected, tracebacks = _serve_answers(base)
        assert not tracebacks, tracebacks
        for rel in _side_files(pristine):
            if only and only not in rel:
                continue
            size = (pristine / rel).stat().st_size
            step = 1 if size <= 512 else stride
            count = 0
            for kind, arg in faults(size, step, bits=size <= 512):
                problem = check_http_case(pristine, Path(tmp) / "work", rel, kind, arg, expected)
                count += 1
                if problem:
                    found.append(f"{rel} {kind} {arg}: {problem}")
                    print(found[-1], flush=True)
            print(f"{rel}: {size} bytes, {count} faults", flush=True)
    return found


# -- kill -9 of settee serve -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_serve_process(root: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "settee", "serve", "--dir", str(root), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + WATCHDOG
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited: {proc.stderr.read()!r}") from None
            time.sleep(0.02)
    proc.kill()
    raise AssertionError("serve did not start")


def kill_serve_round(root: Path, run: int, writes: int, acked: dict[str, Any]) -> None:
    """Start serve, acknowledge ``writes`` requests (recorded in ``acked``), then
    SIGKILL it in the middle of the next ones."""
    proc, port = start_serve_process(root)
    c = Client(port)
    try:
        if run == 0:
            assert c("PUT", "/k?q=4")[0] in (201, 412)
            view = "function(doc){ emit(doc.n, null); }"
            assert c("PUT", "/k/_design/v", {"views": {"n": {"map": view}}})[0] in (201, 409)
        for n in range(writes):
            docs = [{"_id": f"{run}-{n}-{k}", "n": n} for k in range(5)]
            status, body = c("POST", "/k/_bulk_docs", {"docs": docs})
            assert status == 201 and all("ok" in r for r in body), body
            acked.setdefault("docs", set()).update(d["_id"] for d in docs)
            status, body = c("PUT", f"/k/_local/ck{run % 3}", {"n": n, "run": run})
            assert status == 201, body
            acked[f"_local/ck{run % 3}"] = {"n": n, "run": run}
            if n % 4 == 0:
                sec = {"admins": {"names": [f"a{run}-{n}"]}, "members": {}}
                status, body = c("PUT", "/k/_security", sec)
                assert status == 200, body
                acked["_security"] = sec
            if n % 5 == 1:
                assert c("GET", "/k/_design/v/_view/n?limit=1")[0] == 200
            if n % 3 == 2:
                victim = f"{run}-{n}-0"
                status, body = c("GET", f"/k/{victim}")
                status, body = c("POST", "/k/_purge", {victim: [body["_rev"]]})
                assert status == 201, body
                acked["docs"].discard(victim)
                acked.setdefault("purged", set()).add(victim)
                status, body = c("PUT", "/k/_revs_limit", raw=str(10 + n).encode())
                assert status == 200, body
                acked["_revs_limit"] = 10 + n
        if run % 2:
            assert c("POST", "/k/_compact")[0] == 202
        # Requests in flight when the kill lands: sent, answers never read.
        conns = []
        for n in range(4):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WATCHDOG)
            docs = [{"_id": f"{run}-x{n}-{k}"} for k in range(50)]
            conn.request(
                "POST",
                "/k/_bulk_docs",
                json.dumps({"docs": docs}),
                {"Content-Type": "application/json"},
            )
            conns.append(conn)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WATCHDOG)
        conn.request("GET", "/k/_design/v/_view/n?limit=1")
        conns.append(conn)
        time.sleep((run % 7) * 0.003)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def verify_after_kill(root: Path, acked: dict[str, Any], run: int) -> list[str]:
    proc, port = start_serve_process(root)
    c = Client(port)
    problems = []
    try:
        ids = sorted(acked.get("docs", ()))
        status, body = c("POST", "/k/_all_docs", {"keys": ids})
        if status != 200:
            return [f"run {run}: _all_docs {status} {body}"]
        lost = [r["key"] for r in body["rows"] if "error" in r or r["value"].get("deleted")]
        if lost:
            problems.append(f"run {run}: acknowledged documents lost: {lost[:5]}")
        purged = sorted(acked.get("purged", ()))
        status, body = c("POST", "/k/_all_docs", {"keys": purged})
        back = [r["key"] for r in body["rows"] if "error" not in r]
        if status != 200 or back:
            problems.append(f"run {run}: purged documents back: {status} {back[:5]}")
        if "_revs_limit" in acked and c("GET", "/k/_revs_limit")[1] != acked["_revs_limit"]:
            problems.append(f"run {run}: _revs_limit is not the acknowledged one")
        status, body = c("GET", "/k/_design/v/_view/n")
        rows = {r["id"] for r in body.get("rows", [])}
        if status != 200 or not set(ids) <= rows or rows & set(purged):
            problems.append(f"run {run}: the view is {status}, missing or keeping purged rows")
        for key, want in acked.items():
            if key.startswith("_local/") or key == "_security":
                status, body = c("GET", f"/k/{key}")
                got = {k: v for k, v in body.items() if not k.startswith("_")}
                if status != 200 or got != want:
                    problems.append(f"run {run}: {key} is {status} {body}, acknowledged {want}")
        status, body = c("GET", "/k/_design/v/_view/n?limit=1")
        if status != 200:
            problems.append(f"run {run}: view {status} {body}")
        status, body = c(
            "POST", "/k/_bulk_docs", {"docs": [{"_id": f"w{run}-{i}"} for i in range(16)]}
        )
        if status != 201 or not all("ok" in r for r in body):
            problems.append(f"run {run}: a shard refused a write after the kill: {body}")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    return problems


def sweep_kill_serve(kills: int) -> list[str]:
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        acked: dict[str, Any] = {}
        for run in range(kills):
            kill_serve_round(root, run, writes=1 + run % 6, acked=acked)
            problems = verify_after_kill(root, acked, run)
            for p in problems:
                print(p, flush=True)
            found += problems
        print(f"{kills} kills, {len(acked.get('docs', ()))} acknowledged documents", flush=True)
    return found


# -- kill -9 of an embedded writer ---------------------------------------------------------------

ATT = bytes(range(256)) * 40


def embedded_writer(path: str, run: int) -> None:
    """The child of ``kill-embedded``: writes forever (fsync on, 2 shards), printing
    each acknowledgement as one JSON line after the call returns."""
    db = settee.open(path, shards=2, fsync=True)
    n = 0
    while True:
        ids = [f"{run}-{n}-{k}" for k in range(4)]
        db.bulk_docs([{"_id": i, "n": n} for i in ids])
        print(json.dumps({"docs": ids}), flush=True)
        rev = db.get(ids[0])["_rev"]
        att = {"a": {"content_type": "x/y", "data": base64.b64encode(ATT).decode()}}
        rev = db.put({"_id": ids[0], "_rev": rev, "_attachments": att})["rev"]
        print(json.dumps({"att": ids[0]}), flush=True)
        other = {"_id": ids[1], "_rev": "2-" + "e" * 32, "x": 1}
        db.bulk_docs([other], new_edits=False)
        print(json.dumps({"conflict": ids[1]}), flush=True)
        print(json.dumps({"purging": ids[2]}), flush=True)  # gone or not after a kill
        db.purge({ids[2]: [db.get(ids[2])["_rev"]]})
        print(json.dumps({"purged": ids[2]}), flush=True)
        if n % 7 == 6:
            db.compact()
        n += 1


def sweep_kill_embedded(kills: int) -> list[str]:
    found = []
    kinds = ("docs", "att", "conflict", "purging", "purged")
    acked: dict[str, set[str]] = {kind: set() for kind in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "db")
        for run in range(kills):
            proc = subprocess.Popen(
                [sys.executable, __file__, "embedded-writer", path, str(run)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert proc.stdout is not None
            for _ in range(1 + run * 7 % 61):  # up to twelve rounds: compactions too
                line = proc.stdout.readline()
                if not line:
                    break
                for key, value in json.loads(line).items():
                    acked[key].update(value if isinstance(value, list) else [value])
            time.sleep((run % 5) * 0.004)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            # Whole lines only: what was acknowledged before the kill (a cut one was not).
            for line in proc.stdout.read().split("\n")[:-1]:
                for key, value in json.loads(line).items():
                    acked[key].update(value if isinstance(value, list) else [value])
            proc.stdout.close()
            problems = watchdog(functools.partial(_check_embedded_kill, path, acked, run))
            for p in problems:
                print(p, flush=True)
            found += problems
    print(f"{kills} kills, {len(acked['docs'])} acknowledged documents", flush=True)
    return found


def _check_embedded_kill(path: str, acked: dict[str, set[str]], run: int) -> list[str]:
    problems = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a torn tail after the kill is expected
        db = settee.open(path)
    with db:
        for doc_id in sorted(acked["docs"] - acked["purging"]):
            try:
                doc = db.get(doc_id, conflicts=True)
            except settee.NotFound:
                problems.append(f"run {run}: acknowledged {doc_id} lost")
                continue
            if doc_id in acked["att"]:
                _, chunks = db.attachment_chunks(doc_id, "a")
                if b"".join(chunks) != ATT:
                    problems.append(f"run {run}: {doc_id}'s attachment differs")
            if doc_id in acked["conflict"] and "_conflicts" not in doc and doc.get("x") != 1:
                problems.append(f"run {run}: {doc_id}'s replicated revision lost")
        for doc_id in sorted(acked["purged"]):
            with contextlib.suppress(settee.NotFound):
                db.get(doc_id)
                problems.append(f"run {run}: purged {doc_id} is back")
        ids = _writes_after(db, f"w{run}")
        for doc_id in ids:
            db.get(doc_id)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    if argv is None and sys.argv[1:2] == ["embedded-writer"]:
        embedded_writer(sys.argv[2], int(sys.argv[3]))
        return 0
    parser.add_argument("what", choices=("embedded", "http", "kill-serve", "kill-embedded"))
    parser.add_argument(
        "--stride", type=int, default=7, help="offsets between faults in large files"
    )
    parser.add_argument("--only", help="only the file of this name (or path part)")
    parser.add_argument("--kills", type=int, default=40)
    args = parser.parse_args(argv)
    if args.what == "embedded":
        found = sweep_embedded(args.stride, args.only)
    elif args.what == "http":
        found = sweep_http(args.stride, args.only)
    elif args.what == "kill-serve":
        found = sweep_kill_serve(args.kills)
    else:
        found = sweep_kill_embedded(args.kills)
    print(f"{len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
