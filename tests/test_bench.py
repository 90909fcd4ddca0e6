"""The benchmark harness runs end to end and writes a well-formed report.

This checks the harness, never the speed: ``settee bench --smoke`` runs every
scenario at minimal sizes into a temporary directory, and the tests read what
it wrote. No assertion here looks at a measured number beyond its type.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from settee.cli import load_bench
from settee.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
# bench/ is not an installed package; `settee bench` loads it from the checkout the same way.
assert load_bench() is not None, "tests/ run from a source checkout"
from bench import runner  # noqa: E402

SIDE_KEYS = {"label", "median", "min", "max", "spread_pct", "samples"}
PAIR_KEYS = {
    "id",
    "group",
    "title",
    "unit",
    "higher_is_better",
    "params",
    "a",
    "b",
    "ratio",
    "within_noise",
    "verdict",
    "meaning",
    "target",
    "profile",
}
#: Every scenario group's pair ids start with one of these.
EXPECTED_PREFIXES = [
    "readmode.os.seq.",
    "readmode.os.concurrent.",
    "readmode.os.mixed.",
    "readmode.os.paced.",
    "readmode.latency.seq.",
    "readmode.latency.concurrent.",
    "readmode.latency.mixed.",
    "readmode.latency.paced.",
    "peers.insert.",
    "peers.get.",
    "peers.multiget.",
    "peers.multiget_docs.",
    "peers.range.",
    "peers.range_docs.",
    "shards.",
    "large.put.",
    "large.get.",
    "reopen",
    "scaling.",
    "bursts.get",
    "conflicts.reference",
    "conflicts.growth",
    "processes.get",
]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench-out")
    # A --workdir that does not exist yet is made (it was a raw FileNotFoundError).
    work = tmp_path_factory.mktemp("bench-work") / "not" / "yet"
    # Through the console script's entry point, as the README documents it.
    status = cli_main(
        ["bench", "--smoke", "--out", str(out), "--workdir", str(work), "--no-progress"]
    )
    assert status == 0
    doc = json.loads((out / "latest.json").read_text(encoding="utf-8"))
    return out, doc


def test_json_has_the_documented_top_level_fields(smoke_run: tuple[Path, dict]) -> None:
    _, doc = smoke_run
    assert doc["schema"] == "settee-bench/1"
    assert doc["mode"] == "smoke"
    for key in ("command", "started", "duration_s", "machine", "config", "pairs", "curves"):
        assert key in doc, key
    machine = doc["machine"]
    for key in ("nproc", "python", "platform", "settee", "sqlite", "loadavg_start"):
        assert key in machine, key


def test_every_pair_has_both_sides_and_a_ratio(smoke_run: tuple[Path, dict]) -> None:
    _, doc = smoke_run
    assert doc["pairs"], "the smoke run measured nothing"
    ids = [p["id"] for p in doc["pairs"]]
    assert len(ids) == len(set(ids)), "pair ids must be unique"
    for pair in doc["pairs"]:
        assert pair.keys() >= PAIR_KEYS, pair["id"]
        for side in ("a", "b"):
            assert pair[side].keys() >= SIDE_KEYS, (pair["id"], side)
            assert pair[side]["samples"], pair["id"]
            assert len(pair[side]["samples"]) == doc["config"]["repeats"], pair["id"]
            assert all(isinstance(x, float | int) for x in pair[side]["samples"])
        assert pair["a"]["label"] != pair["b"]["label"], pair["id"]
        assert isinstance(pair["ratio"], float) and math.isfinite(pair["ratio"]), pair["id"]
        assert pair["meaning"], pair["id"]


def test_every_scenario_ran(smoke_run: tuple[Path, dict]) -> None:
    _, doc = smoke_run
    ids = [p["id"] for p in doc["pairs"]]
    skipped = [s["id"] for s in doc["skipped"]]
    for prefix in EXPECTED_PREFIXES:
        ran = any(i.startswith(prefix) for i in ids)
        if prefix.startswith("peers.") and not ran:
            continue  # checked per peer below
        assert ran, f"no pair for {prefix}"
    for peer in ("sqlite3", "lmdb", "reference"):
        ran = any(i.startswith("peers.") and i.endswith("." + peer) for i in ids)
        assert ran or any(peer in s for s in skipped), f"peer {peer} neither ran nor was skipped"


def test_markdown_lists_every_pair(smoke_run: tuple[Path, dict]) -> None:
    out, doc = smoke_run
    text = (out / "latest.md").read_text(encoding="utf-8")
    for pair in doc["pairs"]:
        assert f"`{pair['id']}`" in text, pair["id"]
    for skipped in doc["skipped"]:
        assert skipped["id"] in text
    assert "GIL" in text
    assert "| id | scenario |" in text
    assert (out / "performance.md").read_text(encoding="utf-8").startswith("## Performance")


def test_plots_are_written_when_matplotlib_is_there(smoke_run: tuple[Path, dict]) -> None:
    out, doc = smoke_run
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert any(s["id"] == "plots" for s in doc["skipped"])
        return
    assert doc["plots"]
    for name in doc["plots"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_python_dash_m_bench_prints_its_usage() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout and "--out" in done.stdout


def test_settee_bench_passes_its_options_to_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: `settee bench --quick`, the README's command, failed with
    "unrecognized arguments: --quick" (argparse took it as an option of `settee`)."""
    seen: list[list[str]] = []
    monkeypatch.setattr(runner, "main", lambda args: seen.append(list(args)) or 0)
    assert cli_main(["bench", "--quick", "--no-plots"]) == 0
    assert seen == [["--quick", "--no-plots"]]


def test_unknown_group_is_refused() -> None:
    with pytest.raises(SystemExit, match="unknown group"):
        runner.main(["--smoke", "--only", "nope"])


def _synthetic(a_samples: list[float], b_samples: list[float], a_lats: list[float]) -> Any:
    from bench.harness import PairResult

    return PairResult(
        samples={"A": a_samples, "B": b_samples},
        latencies_ms={"A": a_lats, "B": []},
        extra={"A": {}, "B": {}},
    )


@pytest.mark.parametrize(
    ("target", "a_samples", "a_lats", "met"),
    [
        (("max_ratio", 1.3), [12.0, 13.0, 12.5], [], True),  # 12.5 / 10 = 1.25
        (("max_ratio", 1.3), [14.0, 13.5, 14.5], [], False),  # 1.4
        (("p999_below", 50.0), [1.0, 1.0, 1.0], [0.1] * 999 + [49.0], True),
        (("p999_below", 50.0), [1.0, 1.0, 1.0], [0.1] * 998 + [51.0, 51.0], False),
        (("p999_below", 50.0), [1.0, 1.0, 1.0], [], False),  # nothing measured: not met
    ],
)
def test_issue_16_targets_are_judged_from_the_samples(
    tmp_path: Path,
    target: tuple[str, float],
    a_samples: list[float],
    a_lats: list[float],
    met: bool,
) -> None:
    from bench.harness import Progress
    from bench.suite import MODES, Run, Target

    run = Run(MODES["smoke"], str(tmp_path), Progress(0, enabled=False))
    entry = run.record(
        "x",
        _synthetic(a_samples, [10.0, 10.0, 10.0], a_lats),
        "A",
        "B",
        group="g",
        title="t",
        unit="µs/op",
        meaning="m",
        higher_is_better=False,
        target=Target(*target),
    )
    assert entry["target"]["met"] is met


def test_scaling_measures_the_peers_growth_in_the_same_run(smoke_run: tuple[Path, dict]) -> None:
    """Issue 16's growth bound means more beside what sqlite3 (and LMDB) do on the
    same sizes: their get and multiget pairs come from settee's own round-robin."""
    out, doc = smoke_run
    pairs = {p["id"]: p for p in doc["pairs"]}
    for op in ("get", "multiget"):
        ours, theirs = pairs[f"scaling.{op}"], pairs[f"scaling.{op}.sqlite3"]
        assert theirs["params"]["store"] == "sqlite3"
        assert (theirs["params"]["small"], theirs["params"]["large"]) == (
            ours["params"]["small"],
            ours["params"]["large"],
        )
        assert "target" not in theirs or not theirs["target"]
    summary = (out / "performance.md").read_text(encoding="utf-8")
    assert "on the same sizes in the same run:" in summary and "sqlite3 get ×" in summary


def test_instruction_counts_take_the_options_of_the_pairs_they_explain() -> None:
    """``bench.instructions``' flags become ``settee.open`` options (the read-mode
    pair's comment cites a count taken with them); an unknown one stops the run
    instead of counting a store that is not the one asked for."""
    from bench import instructions

    options = instructions._options(["--shards=1", "--body-cache=0", "--read-mode=serialized"])
    assert options == {"shards": 1, "body_cache_bytes": 0, "read_mode": "serialized"}
    with pytest.raises(SystemExit, match="unknown option '--shard=1'"):
        instructions._options(["--shard=1"])
