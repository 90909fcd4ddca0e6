"""A real ``kill -9`` of a writing process: every acknowledged write survives.

SIGKILL keeps the page cache (it is a process crash, not a power loss), so
this checks the engine's own ordering and recovery on real files; the
simulated file system covers lost page caches.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import settee
from settee.proof.crash.corruption import open_quietly, run_with_watchdog

WRITER = Path(__file__).with_name("kill_writer.py")


def _kill_after(path: str, run: int, rng: random.Random) -> list[str]:
    """Start a writer, let it acknowledge a random amount, SIGKILL it; its complete lines."""
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), path, str(run)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    target = rng.randint(1, 80)
    try:
        while len(lines) < target:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        time.sleep(rng.random() * 0.05)  # land the kill anywhere in the next commit
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    lines += proc.stdout.readlines()
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, f"writer exited by itself: {lines[-3:]}"
    return [line for line in lines if line.endswith("\n")]


def _check(path: str, lines: list[str], acked: set[str], counter: str | None) -> str | None:
    for line in lines:
        kind, *rest = line.split()
        if kind == "ids":
            acked.update(rest)
        elif kind == "counter":
            counter = rest[0]

    def verify() -> None:
        with open_quietly(path) as db:
            missing = [i for i in sorted(acked) if _missing(db, i)]
            assert not missing, f"acknowledged ids lost after kill -9: {missing[:5]}"
            if counter is not None:
                got = db.get("counter")["_rev"]
                assert int(got.split("-")[0]) >= int(counter.split("-")[0]), (got, counter)
                assert not db.revs_diff({"counter": [counter]}), f"counter rev {counter} lost"

    run_with_watchdog(verify)
    return counter


def _missing(db: Any, doc_id: str) -> bool:
    try:
        db.get(doc_id)
    except settee.NotFound:
        return True
    return False


def _campaign(tmp_path: Path, kills: int, seed: int) -> int:
    path = str(tmp_path / "db")
    rng = random.Random(seed)
    acked: set[str] = set()
    counter = None
    for run in range(kills):
        lines = _kill_after(path, run, rng)
        counter = _check(path, lines, acked, counter)
    return len(acked)


def test_kill_9_keeps_every_acknowledged_write(tmp_path: Path, record_property: Any) -> None:
    kills = 6
    acked = _campaign(tmp_path, kills, seed=1)
    record_property("kills", kills)
    print(f"{kills} kill -9 runs, {acked} acknowledged documents checked")
    assert acked > 0


@pytest.mark.slow
def test_kill_9_many_times(tmp_path: Path, record_property: Any) -> None:
    _campaign(tmp_path, 60, seed=2)
    record_property("kills", 60)
