#!/usr/bin/env python3
"""Run PouchDB's own node integration suite against ``settee serve`` and report.

This is an opt-in compatibility check, not part of settee's test suite. It runs
the ``http`` / ``local-http`` variants of 16 PouchDB integration test files
(basics, get, bulk_docs, ... sync, design_docs) with mocha, pointing PouchDB's
``COUCH_HOST`` at a ``settee serve`` process, and prints a markdown table of
passes / failures / pending per file. Every failure (file, full title, first
line of the error) and every server-side exception found in settee's log are
written to a JSON file.

Each file gets a fresh ``settee serve`` on a fresh temporary ``--dir`` (so the
files are independent; ``--shared-server`` keeps one). PouchDB's global
``afterEach`` hook fails on any unhandled promise rejection, and mocha then skips
the rest of that suite; so after such an abort the file is run again (same
server) with a ``--grep`` that leaves out the tests already reported, until every
test has run or a run makes no progress (``--max-runs``). Failing hooks are
listed as failures in the JSON (``"hook": true``) but are not counted as tests
in the table, whose ``total`` is the number of tests that ran (PouchDB plans 955
for these 16 files at commit c135c4ce).

Needs:
  * a PouchDB source tree (default /tmp/pouchdb), e.g. exported from git::

        git --git-dir=<pouchdb.git> archive HEAD | tar -x -C /tmp/pouchdb

  * node (20 works) and npm on PATH. If ``node_modules`` or the node build is
    missing, the script runs ``npm ci --ignore-scripts`` and
    ``BUILD_NODE=1 npm run build-modules`` in the checkout (needs the npm
    registry; ``--no-install`` refuses instead).
  * the project's venv with settee's ``serve`` extra (run the script with the
    venv's python), and TCP port 3010 free for PouchDB's "down server" (used
    by the retry tests; an already-running one on 3010 is reused).

By default the script first copies the working tree's settee sources (impl/,
spec/, reference/, uncommitted edits included) to a temporary directory and
runs every server from that copy via PYTHONPATH, so a whole run tests one
version even while someone edits the tree; the report records the git HEAD and
the modified files. ``--no-snapshot`` runs the live tree instead, ``--settee
EXE`` a given executable.

Run (from the repository root)::

    .venv/bin/python scripts/pouchdb_suite.py --output /tmp/pouchdb_suite.json

Useful options: ``--pouchdb DIR``, ``--files get,changes`` (a subset),
``--port N`` (default: a free port), ``--shared-server`` (one settee for all
files instead of a fresh server and data directory per file),
``--file-timeout SECONDS`` (default 900), ``--commit SHA`` (recorded in the
report when the checkout is not a git work tree). Per-file logs (mocha output,
the event stream, settee's output) go to ``--log-dir`` (default: next to the
output file). settee always runs with fsync on. A whole run took about 2-3
minutes on 2 cores (the per-file timeout only matters if something hangs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TEST_FILES: tuple[str, ...] = (
    "basics",
    "get",
    "bulk_docs",
    "bulk_get",
    "all_docs",
    "changes",
    "revs_diff",
    "conflicts",
    "local_docs",
    "compaction",
    "replication",
    "replication_events",
    "retry",
    "slash_id",
    "sync",
    "design_docs",
)
GREP = "js-(http|local-http)"
DOWN_SERVER_PORT = 3010
MOCHA_TEST_TIMEOUT_MS = 5000

#: A mocha reporter that appends one JSON line per event to $SETTEE_EVENTS, so
#: results survive a hung or killed run (mocha's json reporter only writes at
#: the end). It also keeps an error's HTTP status and name, which PouchDB sets.
REPORTER_JS = r"""
'use strict';
const fs = require('fs');
module.exports = function SetteeReporter(runner) {
  const out = process.env.SETTEE_EVENTS;
  const emit = (ev) => fs.appendFileSync(out, JSON.stringify(ev) + '\n');
  const title = (t) => (typeof t.fullTitle === 'function' ? t.fullTitle() : t.title);
  runner.once('start', () => emit({event: 'start', total: runner.total}));
  runner.on('pass', (t) => emit({event: 'pass', title: title(t)}));
  runner.on('pending', (t) => emit({event: 'pending', title: title(t)}));
  runner.on('fail', (t, err) => {
    err = err || {};
    let message = err.message;
    if (message === undefined || message === '') message = String(err);
    emit({event: 'fail', title: title(t), hook: t.type === 'hook',
          message: String(message), status: err.status, name: err.name,
          stack: err.stack ? String(err.stack) : null});
  });
  runner.once('end', () => emit({event: 'end'}));
};
"""


@dataclass
class Failure:
    file: str
    title: str
    error: str
    status: int | None = None
    hook: bool = False


@dataclass
class FileResult:
    file: str
    passed: int = 0
    failed: int = 0
    pending: int = 0
    planned: int | None = None
    finished: bool = False
    timed_out: bool = False
    exit_code: int | None = None
    seconds: float = 0.0
    rounds: int = 0
    failures: list[Failure] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)  # every test reported, in order

    @property
    def total(self) -> int:
        """Tests that ran (or were skipped); failing hooks are not tests."""
        return self.passed + self.failed + self.pending

    @property
    def hook_failures(self) -> int:
        return sum(1 for f in self.failures if f.hook)

    def notes(self) -> str:
        parts = []
        if self.timed_out:
            parts.append("timed out")
        elif not self.finished:
            parts.append(
                "not run"
                if self.exit_code is None
                else f"mocha exited {self.exit_code} before the end"
            )
        if self.hook_failures:
            parts.append(f"{self.hook_failures} failing hook(s), not counted as tests")
        if self.rounds > 1:
            parts.append(f"{self.rounds} mocha runs (resumed after aborted suites)")
        if self.planned is not None and self.planned > self.total:
            parts.append(f"{self.planned - self.total} of {self.planned} tests not run")
        return "; ".join(parts)


@dataclass
class ServerError:
    file: str
    context: str
    exception: str


# --------------------------------------------------------------------------- setup


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--pouchdb",
        type=Path,
        default=Path("/tmp/pouchdb"),
        help="PouchDB source checkout (default: /tmp/pouchdb)",
    )
    p.add_argument(
        "--output",
        type=Path,
        default=Path("pouchdb_suite.json"),
        help="JSON report to write (default: ./pouchdb_suite.json)",
    )
    p.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="per-file logs (default: <output without .json>_logs)",
    )
    p.add_argument(
        "--files", default=",".join(TEST_FILES), help="comma-separated test files (default: all 16)"
    )
    p.add_argument("--port", type=int, default=0, help="settee's port (default: a free one)")
    p.add_argument(
        "--settee",
        default=None,
        help="settee executable to run instead of this interpreter + snapshot",
    )
    p.add_argument(
        "--no-snapshot",
        action="store_true",
        help="run the live source tree instead of a copy taken at start",
    )
    p.add_argument(
        "--shared-server",
        action="store_true",
        help="one settee server/data dir for all files (default: fresh per file)",
    )
    p.add_argument(
        "--file-timeout",
        type=float,
        default=900.0,
        help="seconds one test file may take before it is killed (default 900)",
    )
    p.add_argument(
        "--max-runs",
        type=int,
        default=10,
        help="mocha runs per file: a failing hook aborts the rest of its suite, so the "
        "file is run again without the tests already reported (default 10; 1: never)",
    )
    p.add_argument("--seed", default=None, help="SEED for PouchDB's seeded Math.random")
    p.add_argument("--commit", default=None, help="PouchDB commit to record in the report")
    p.add_argument(
        "--no-install",
        action="store_true",
        help="fail instead of running npm ci / build-modules when missing",
    )
    return p.parse_args(argv)


REPO = Path(__file__).resolve().parents[1]
#: Where each settee package lives in the repository (pyproject's package-dir).
PACKAGE_DIRS: tuple[tuple[str, str], ...] = (
    ("impl", "settee"),
    ("spec", "settee/spec"),
    ("reference", "settee/reference"),
)
RUN_SETTEE = "import sys; from settee.cli import main; sys.argv[0] = 'settee'; sys.exit(main())"


@dataclass
class SetteeLauncher:
    """How to start settee: a command prefix plus extra environment."""

    command: list[str]
    env: dict[str, str]
    snapshot: Path | None = None


def snapshot_sources(dest: Path) -> None:
    """Copy settee's packages to ``dest`` in their installed layout."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for source, target in PACKAGE_DIRS:
        shutil.copytree(REPO / source, dest / target, ignore=skip, dirs_exist_ok=True)


def settee_launcher(args: argparse.Namespace) -> SetteeLauncher:
    if args.settee:
        return SetteeLauncher([args.settee], {})
    if args.no_snapshot:
        return SetteeLauncher([sys.executable, "-c", RUN_SETTEE], {})
    snap = Path(tempfile.mkdtemp(prefix="settee-snapshot-"))
    snapshot_sources(snap)
    pythonpath = os.pathsep.join(filter(None, [str(snap), os.environ.get("PYTHONPATH")]))
    check = subprocess.run(
        [sys.executable, "-c", "import settee.serve.server, settee; print(settee.__file__)"],
        env={**os.environ, "PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
    )
    if check.returncode != 0 or not check.stdout.startswith(str(snap)):
        shutil.rmtree(snap, ignore_errors=True)
        sys.exit(f"the settee snapshot does not import:\n{check.stderr or check.stdout}")
    return SetteeLauncher([sys.executable, "-c", RUN_SETTEE], {"PYTHONPATH": pythonpath}, snap)


def repo_state() -> dict[str, Any]:
    def git(*cmd: str) -> str:
        out = subprocess.run(["git", "-C", str(REPO), *cmd], capture_output=True, text=True)
        return out.stdout.strip()

    return {
        "head": git("rev-parse", "HEAD"),
        "modified": git("status", "--short", "--", *(d for d, _ in PACKAGE_DIRS)).splitlines(),
    }


def ensure_built(checkout: Path, allow_install: bool) -> None:
    """Run npm ci / build-modules when the checkout lacks them."""
    steps: list[tuple[list[str], dict[str, str]]] = []
    if not (checkout / "node_modules" / ".bin" / "mocha").exists():
        steps.append((["npm", "ci", "--ignore-scripts"], {}))
    if not (checkout / "packages/node_modules/pouchdb/lib/index.js").exists() or steps:
        steps.append((["npm", "run", "build-modules"], {"BUILD_NODE": "1"}))
    if not steps:
        return
    if not allow_install:
        sys.exit(f"{checkout} is not installed/built and --no-install was given")
    for cmd, extra in steps:
        print(f"$ {' '.join(cmd)}  (in {checkout})", flush=True)
        subprocess.run(cmd, cwd=checkout, env={**os.environ, **extra}, check=True)


def pouchdb_commit(checkout: Path, given: str | None) -> str:
    if given:
        return given
    try:
        out = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (pass --commit)"


def pouchdb_version(checkout: Path) -> str:
    try:
        return str(json.loads((checkout / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return "unknown"


# --------------------------------------------------------------------------- processes


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def stop_process(proc: subprocess.Popen[Any] | None, grace: float = 20.0) -> None:
    """SIGTERM the process group we started, then SIGKILL it after ``grace`` s."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


class Settee:
    """One ``settee serve`` process on a fresh temporary data directory."""

    def __init__(self, launcher: SetteeLauncher, port: int, log_path: Path) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="settee-pouchdb-"))
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 (closed in stop())
        cmd = [*launcher.command, "serve", "--dir", str(self.data_dir), "--port", str(port)]
        self._log.write(f"$ {' '.join(cmd)}\n".encode())
        self._log.flush()
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **launcher.env, "PYTHONUNBUFFERED": "1"},
        )
        self.url = self._wait_for_url()

    def _wait_for_url(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        pattern = re.compile(rb"settee serve: (http://\S+?)/? serving")
        start = self._log.tell()
        while time.monotonic() < deadline:
            match = pattern.search(self.log_path.read_bytes()[start:])
            if match:
                url = match.group(1).decode()
                urllib.request.urlopen(url + "/", timeout=10).read()
                return url
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"settee serve did not start; see {self.log_path}")

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None
        self._log.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_down_server(checkout: Path, log_path: Path) -> subprocess.Popen[bytes] | None:
    """Start PouchDB's always-500 server on 3010 unless something already listens."""
    if port_open(DOWN_SERVER_PORT):
        print(f"port {DOWN_SERVER_PORT} in use: reusing it as the down server", flush=True)
        return None
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["node", "bin/down-server.js", str(DOWN_SERVER_PORT)],
            cwd=checkout,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    for _ in range(100):
        if port_open(DOWN_SERVER_PORT):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    stop_process(proc)
    raise RuntimeError(f"down server did not start; see {log_path}")


# --------------------------------------------------------------------------- one file


def mocha_command(name: str, reporter: Path, grep: str) -> list[str]:
    return [
        "./node_modules/.bin/mocha",
        "--exit",
        "--timeout",
        str(MOCHA_TEST_TIMEOUT_MS),
        "--require=./tests/integration/node.setup.js",
        "--grep",
        grep,
        "--reporter",
        str(reporter),
        "tests/integration/test.setup_global_hooks.js",
        f"tests/integration/test.{name}.js",
    ]


def run_mocha(
    name: str,
    checkout: Path,
    couch: str,
    reporter: Path,
    log_dir: Path,
    timeout: float,
    seed: str | None,
    grep: str,
    round_no: int,
) -> tuple[Path, int | None, bool]:
    """Run one test file; return (events file, exit code or None, timed out)."""
    events = log_dir / f"{name}.{round_no}.events.jsonl"
    events.unlink(missing_ok=True)
    env = {**os.environ, "COUCH_HOST": couch, "SETTEE_EVENTS": str(events)}
    if seed is not None:
        env["SEED"] = seed
    with open(log_dir / f"{name}.mocha.log", "wb" if round_no == 1 else "ab") as log:
        log.write(f"===== mocha run {round_no}, --grep {grep[:200]}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            mocha_command(name, reporter, grep),
            cwd=checkout,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return events, proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            stop_process(proc, grace=5)
            return events, None, True
        finally:
            stop_process(proc, grace=5)


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return text.strip()


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    for line in path.read_text(errors="replace").splitlines():
        try:
            yield json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill


def summarize(name: str, events: Path) -> FileResult:
    result = FileResult(name)
    for ev in read_events(events):
        kind = ev.get("event")
        if kind == "start":
            result.planned = ev.get("total")
        elif kind == "pass":
            result.passed += 1
            result.titles.append(ev.get("title", "?"))
        elif kind == "pending":
            result.pending += 1
            result.titles.append(ev.get("title", "?"))
        elif kind == "end":
            result.finished = True
        elif kind == "fail":
            hook = bool(ev.get("hook"))
            if not hook:
                result.failed += 1
                result.titles.append(ev.get("title", "?"))
            status = ev.get("status") if isinstance(ev.get("status"), int) else None
            if status is None:  # e.g. "done() invoked with non-Error: {...,"status":500}"
                found = re.search(r'"status":\s*(\d{3})', ev.get("message") or "")
                status = int(found.group(1)) if found else None
            result.failures.append(
                Failure(
                    name,
                    ev.get("title", "?"),
                    first_line(ev.get("message") or ""),
                    status,
                    hook,
                )
            )
    return result


def js_escape(text: str) -> str:
    return re.sub(r"[\\^$.*+?()[\]{}|/]", lambda m: "\\" + m.group(0), text)


def resume_grep(done: list[str]) -> str:
    """GREP, minus the tests whose full titles are in ``done``."""
    if not done:
        return GREP
    skip = "|".join(js_escape(t) for t in sorted(set(done)))
    return f"^(?!(?:{skip})$).*{GREP}"


def merge(total: FileResult, part: FileResult) -> None:
    total.passed += part.passed
    total.failed += part.failed
    total.pending += part.pending
    total.failures += part.failures
    total.titles += part.titles
    total.finished, total.exit_code = part.finished, part.exit_code
    if total.planned is None:
        total.planned = part.planned


def run_file(
    name: str, checkout: Path, couch: str, reporter: Path, log_dir: Path, args: argparse.Namespace
) -> FileResult:
    """Run one test file; while a failing hook aborted some suites, run the rest again."""
    started = time.monotonic()
    result = FileResult(name)
    while result.rounds < args.max_runs:
        left = args.file_timeout - (time.monotonic() - started)
        grep = resume_grep(result.titles)
        result.rounds += 1
        events, code, timed_out = run_mocha(
            name, checkout, couch, reporter, log_dir, left, args.seed, grep, result.rounds
        )
        part = summarize(name, events)
        part.exit_code = code
        merge(result, part)
        if timed_out:
            result.timed_out = True
            result.failures.append(
                Failure(name, "<whole file>", f"killed after {args.file_timeout:.0f}s timeout")
            )
        elif not part.finished:
            result.failures.append(
                Failure(name, "<whole file>", f"mocha exited {code} without finishing; see log")
            )
        if timed_out or not part.finished or not part.titles or not part.hook_failures:
            break
        if result.planned is None or len(set(result.titles)) >= result.planned:
            break
    result.seconds = round(time.monotonic() - started, 1)
    return result


# --------------------------------------------------------------------------- settee log


def server_errors(name: str, log_path: Path) -> list[ServerError]:
    """Tracebacks in settee's output, each with the line logged before it."""
    if not log_path.exists():
        return []
    lines = log_path.read_text(errors="replace").splitlines()
    found: list[ServerError] = []
    for i, line in enumerate(lines):
        if line.strip() != "Traceback (most recent call last):":
            continue
        context = lines[i - 1].strip() if i else ""
        if context.startswith(("During handling", "The above exception")):
            continue  # a chained traceback: reported with its first part
        exception = ""
        for later in lines[i + 1 :]:
            if later and not later.startswith((" ", "\t", "Traceback")):
                exception = later.strip()
                if not later.startswith(("During handling", "The above exception")):
                    break
        found.append(ServerError(name, context, exception))
    for line in lines:  # errors logged without a traceback
        if re.search(r"failed: |stopped on an error", line) and "Traceback" not in line:
            found.append(ServerError(name, line.strip(), ""))
    return found


# --------------------------------------------------------------------------- report


def markdown_table(results: list[FileResult]) -> str:
    rows = ["| file | passed | failed | pending | total | notes |", "|---|---:|---:|---:|---:|---|"]
    for r in results:
        rows.append(
            f"| {r.file} | {r.passed} | {r.failed} | {r.pending} | {r.total} | {r.notes()} |"
        )
    t = [sum(getattr(r, k) for r in results) for k in ("passed", "failed", "pending")]
    rows.append(f"| **total** | **{t[0]}** | **{t[1]}** | **{t[2]}** | **{sum(t)}** | |")
    return "\n".join(rows)


def write_report(
    path: Path, meta: dict[str, Any], results: list[FileResult], errors: list[ServerError]
) -> None:
    files = {
        r.file: {k: v for k, v in asdict(r).items() if k not in ("failures", "titles")}
        | {"total": r.total, "hook_failures": r.hook_failures, "notes": r.notes()}
        for r in results
    }
    totals = {k: sum(getattr(r, k) for r in results) for k in ("passed", "failed", "pending")}
    totals["total"] = sum(totals.values())
    report = {
        **meta,
        "files": files,
        "totals": totals,
        "failures": [asdict(f) for r in results for f in r.failures],
        "server_errors": [asdict(e) for e in errors],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


# --------------------------------------------------------------------------- main


def raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def start_settee(launcher: SetteeLauncher, port: int, log_path: Path) -> Settee | None:
    """Start settee, once more after 5 s if it fails; None if it never comes up."""
    for attempt in (1, 2):
        try:
            return Settee(launcher, port, log_path)
        except (RuntimeError, OSError) as exc:
            print(f"   attempt {attempt}: {exc}", flush=True)
            time.sleep(5)
    return None


def run_all(
    args: argparse.Namespace,
    names: list[str],
    log_dir: Path,
    reporter: Path,
    launcher: SetteeLauncher,
) -> tuple[list[FileResult], list[ServerError]]:
    checkout = args.pouchdb.resolve()
    results: list[FileResult] = []
    errors: list[ServerError] = []
    down = start_down_server(checkout, log_dir / "down-server.log")
    server: Settee | None = None
    name = "?"
    try:
        for name in names:
            log_path = log_dir / ("settee.log" if args.shared_server else f"{name}.settee.log")
            if server is None:
                log_path.unlink(missing_ok=True)
                server = start_settee(launcher, args.port, log_path)
            if server is None:
                results.append(
                    FileResult(
                        name,
                        failures=[
                            Failure(
                                name, "<whole file>", f"settee serve did not start; see {log_path}"
                            )
                        ],
                    )
                )
                errors += server_errors(name, log_path)
                continue
            print(f"== {name}  (settee at {server.url})", flush=True)
            result = run_file(name, checkout, server.url, reporter, log_dir, args)
            results.append(result)
            print(
                f"   {result.passed} passed, {result.failed} failed, {result.pending} "
                f"pending in {result.seconds}s {result.notes()}",
                flush=True,
            )
            if not args.shared_server:
                server.stop()
                errors += server_errors(name, server.log_path)
                server = None
    except KeyboardInterrupt:
        print("interrupted: stopping the servers, reporting the files finished so far")
    finally:
        if server is not None:
            server.stop()
            errors += server_errors("(all)" if args.shared_server else name, server.log_path)
        stop_process(down, grace=5)
    return results, errors


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.files.split(",") if n.strip()]
    unknown = [n for n in names if not (args.pouchdb / f"tests/integration/test.{n}.js").exists()]
    if unknown:
        sys.exit(f"no such PouchDB test file(s) in {args.pouchdb}: {', '.join(unknown)}")
    ensure_built(args.pouchdb, not args.no_install)
    output = args.output.resolve()
    log_dir = (args.log_dir or output.with_name(output.stem + "_logs")).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    reporter = log_dir / "settee_reporter.js"
    reporter.write_text(REPORTER_JS)
    signal.signal(signal.SIGTERM, raise_interrupt)
    started = time.monotonic()
    state = repo_state()
    launcher = settee_launcher(args)
    try:
        results, errors = run_all(args, names, log_dir, reporter, launcher)
    finally:
        if launcher.snapshot is not None:
            shutil.rmtree(launcher.snapshot, ignore_errors=True)
    wall = round(time.monotonic() - started, 1)
    meta = {
        "pouchdb_commit": pouchdb_commit(args.pouchdb, args.commit),
        "pouchdb_version": pouchdb_version(args.pouchdb),
        "settee_repo": state
        | {
            "snapshot": launcher.snapshot is not None,
            "command": args.settee or "python -c (settee.cli)",
        },
        "settee_server": "shared" if args.shared_server else "fresh server and --dir per file",
        "grep": GREP,
        "wall_seconds": wall,
        "log_dir": str(log_dir),
        "complete": len(results) == len(names),
    }
    write_report(output, meta, results, errors)
    print()
    print(markdown_table(results))
    http500 = sum(1 for r in results for f in r.failures if f.status == 500)
    print(
        f"\nwall time: {wall}s; {len(errors)} server-side error(s) in settee's log; "
        f"{http500} failure(s) carry HTTP status 500"
    )
    if len(results) < len(names):
        print(f"INCOMPLETE: {len(results)} of {len(names)} files ran")
    print(f"report: {output}\nlogs: {log_dir}")
    return 0 if all(r.failed == 0 and r.finished for r in results) and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
