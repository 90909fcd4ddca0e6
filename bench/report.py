"""Writing a run down: ``latest.json``, ``latest.md``, ``performance.md`` and PNG plots.

Nothing here measures; every number printed comes from the run's JSON
document, which ``build_document`` assembles and ``write_all`` saves first.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["SCHEMA", "markdown", "performance_section", "plot_all", "write_all"]

SCHEMA = "settee-bench/1"

_GROUP_TITLES = [
    ("readmode.os.sequential", "Parallel preads vs serialized: sequential, one client"),
    ("readmode.os.concurrent", "Parallel preads vs serialized: concurrent random reads"),
    ("readmode.os.mixed", "Parallel preads vs serialized: reads under batched writes"),
    ("readmode.latency.sequential", "The same on the latency file system: sequential"),
    ("readmode.latency.concurrent", "The same on the latency file system: concurrent reads"),
    ("readmode.latency.mixed", "The same on the latency file system: batched writes + reads"),
    ("peers.sqlite3", "Seed workloads: settee vs sqlite3"),
    ("peers.lmdb", "Seed workloads: settee vs LMDB"),
    ("peers.reference", "Seed workloads: settee vs the reference store"),
    ("shards", "Seed workloads: shard sweep"),
    ("large", "Large documents vs the raw disk"),
    ("reopen", "Reopen time"),
    ("scaling", "Scaling"),
    ("bursts", "Read latency around write bursts"),
    ("conflicts", "Replicated conflicts of one document"),
    ("processes", "Readers in other processes"),
]


def fmt(value: float) -> str:
    """A number for a table: thousands separators when large, 3 digits when small."""
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def write_all(doc: dict[str, Any], out_dir: str, *, plots: bool) -> list[str]:
    """Write every output file of a run into ``out_dir``; return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    written = []
    path = os.path.join(out_dir, "latest.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    written.append(path)
    if plots:
        doc["plots"] = plot_all(doc, out_dir)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
            f.write("\n")
        written.extend(os.path.join(out_dir, p) for p in doc["plots"])
    for name, text in (("latest.md", markdown(doc)), ("performance.md", performance_section(doc))):
        path = os.path.join(out_dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        written.append(path)
    return written


# -- Markdown -------------------------------------------------------------------------------------


def markdown(doc: dict[str, Any]) -> str:
    """The full report: how to read it, targets, one table per group, notes."""
    lines = [f"# settee benchmark: --{doc['mode']} run", ""]
    lines += _header(doc)
    lines += _how_to_read(doc)
    lines += _targets(doc["pairs"])
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pair in doc["pairs"]:
        by_group[pair["group"]].append(pair)
    known = [g for g, _ in _GROUP_TITLES]
    titles = dict(_GROUP_TITLES)
    for group in known + sorted(set(by_group) - set(known)):
        if group not in by_group:
            continue
        lines += [f"## {titles.get(group, group)}", ""]
        lines += _pair_table(by_group[group])
        if group.endswith(".mixed") or group.endswith(".concurrent"):
            lines += _latency_table(by_group[group])
    lines += _peer_matrix(doc["pairs"])
    lines += _scaling_table(doc.get("curves", {}).get("scaling", []))
    if doc.get("skipped"):
        lines += ["## Skipped", ""]
        lines += [f"- `{s['id']}`: {s['reason']}" for s in doc["skipped"]]
        lines.append("")
    if doc.get("notes"):
        lines += ["## Notes", ""]
        lines += [f"- {n}" for n in doc["notes"]]
        lines.append("")
    lines += _profiles(doc["pairs"])
    if doc.get("plots"):
        lines += ["## Plots", ""]
        lines += [f"![{p}]({p})" for p in doc["plots"]]
        lines.append("")
    return "\n".join(lines)


def _header(doc: dict[str, Any]) -> list[str]:
    m = doc["machine"]
    cfg = doc["config"]
    load = m.get("loadavg_start"), m.get("loadavg_end")
    lines = [
        f"- command: `{doc['command']}`",
        f"- started {doc['started']}, took {doc['duration_s']:.0f} s",
        f"- machine: {m['nproc']} CPUs ({m.get('cpu_model') or 'unknown model'}), "
        f"{m.get('mem_gib', '?')} GiB RAM, {m['platform']}",
        f"- Python {m['python']} ({m['implementation']}), settee {m['settee']}, "
        f"sqlite {m['sqlite']}, lmdb {m.get('lmdb') or 'not installed'}",
        f"- databases in `{m['workdir_fs']}` (the same disk for settee, peers and raw I/O)",
        f"- load average (1 min) at start {fmt(load[0])}, at end {fmt(load[1])}"
        + (
            ": other processes were competing for the CPUs, so spreads are wider"
            if max(load) > 0.5 * m["nproc"]
            else ""
        ),
        f"- {cfg['repeats']} samples per side of {cfg['seconds']} s "
        f"({cfg['mixed_seconds']} s with batched writes), {cfg['docs']:,} preloaded documents",
        "",
    ]
    return lines


def _how_to_read(doc: dict[str, Any]) -> list[str]:
    cfg = doc["config"]
    return [
        "## How to read this",
        "",
        "- Every row is an A/B pair measured in this one run, the two sides alternating "
        "(A B, B A, ...) so drift in the machine falls on both. Cells show the median "
        "and, in brackets, the smallest and largest sample.",
        "- **A/B** is the ratio of the medians in the row's unit. For throughput "
        "(…/s, MB/s) above 1 means A is faster; for times (s, µs/op) below 1 means A "
        "is faster. The verdict says it in words; **within noise** means the ranges of "
        "A and B overlap and this run cannot tell them apart.",
        "- Python threads share one GIL. `os.pread`, `fsync`, `time.sleep` (the latency "
        "file system), sqlite3 queries and LMDB's C calls release it; settee's B+tree "
        "walks, msgpack and revision logic do not. On this "
        f"{doc['machine']['nproc']}-CPU machine concurrent clients therefore measure how "
        "well work interleaves around waits, not parallel CPU use; the peers do their "
        "work in C and keep more of it outside the GIL.",
        f"- The latency file system adds {cfg['latency_fsync_ms']} ms to every fsync and "
        f"{cfg['latency_read_ms']} ms to every pread that reaches the file system "
        "(settee's node cache sits above it), as a network-attached volume with no "
        "page cache would.",
        "- Under batched writes, *back to back* lets each side's writer commit as fast as "
        "it can (CouchDB's setup), so a side whose readers wait lets its writer write "
        "more: compare the writer docs/s column. *Paced* holds both writers to the same "
        "rate, so reader throughput is compared at equal write work. Latency "
        "percentiles count calls: a reader stalled behind a commit makes one slow call, "
        "so stalls show in p99.9 and max more than in p50.",
        "- Peers keep no revisions and check no conflicts; settee rows carry a revision "
        "and every write is checked against the revision tree.",
        "",
    ]


def _targets(pairs: list[dict[str, Any]]) -> list[str]:
    rows = [p for p in pairs if p.get("target")]
    if not rows:
        return []
    lines = [
        "## Targets",
        "",
        "| pair | target | measured | met |",
        "| --- | --- | --- | --- |",
    ]
    for p in rows:
        t = p["target"]
        if t["kind"] == "min_ratio":
            want, got = f"A/B ≥ {t['value']:g}", f"A/B {p['ratio']:.2f}"
        elif t["kind"] == "max_ratio":
            want, got = f"A/B ≤ {t['value']:g}", f"A/B {p['ratio']:.2f}"
        elif t["kind"] == "a_below":
            want, got = f"A < {t['value']:g} {p['unit']}", f"A {fmt(p['a']['median'])} {p['unit']}"
        elif t["kind"] == "p999_below":
            p999 = p["a"].get("latency_ms", {}).get("p99.9", float("nan"))
            want, got = f"A p99.9 < {t['value']:g} ms", f"A p99.9 {fmt(p999)} ms"
        else:
            want, got = "A not slower than B beyond noise", f"A/B {p['ratio']:.2f} ({p['verdict']})"
        source = f" ({t['source']})" if t.get("source") else ""
        met = "yes" if t["met"] else ("**no**, profile below" if p.get("profile") else "**no**")
        lines.append(f"| `{p['id']}` | {want}{source} | {got} | {met} |")
    return [*lines, ""]


def _cell(side: dict[str, Any]) -> str:
    return f"{fmt(side['median'])} [{fmt(side['min'])}–{fmt(side['max'])}]"


def _pair_table(pairs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| id | scenario | A | B | A median [range] | B median [range] | unit | A/B | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in pairs:
        lines.append(
            f"| `{p['id']}` | {p['title']} | {p['a']['label']} | {p['b']['label']} | "
            f"{_cell(p['a'])} | {_cell(p['b'])} | {p['unit']} | {p['ratio']:.2f} | "
            f"{p['verdict']} |"
        )
    meanings = sorted({p["meaning"] for p in pairs})
    refs = sorted({p["params"].get("couchdb") for p in pairs} - {None})
    lines.append("")
    lines += [f"A/B: {m}." for m in meanings]
    lines += [f"For comparison, {r}." for r in refs]
    return [*lines, ""]


def _latency_table(pairs: list[dict[str, Any]]) -> list[str]:
    rows = [(p, s) for p in pairs for s in (p["a"], p["b"]) if s.get("latency_ms")]
    if not rows:
        return []
    lines = [
        "Read latency per call, all samples of a side pooled:",
        "",
        "| id | side | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | reads/s | writer docs/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p, s in rows:
        lat = s["latency_ms"]
        writer = s.get("extra", {}).get("writer_docs_per_s")
        lines.append(
            f"| `{p['id']}` | {s['label']} | {fmt(lat['p50'])} | {fmt(lat['p90'])} | "
            f"{fmt(lat['p99'])} | {fmt(lat['p99.9'])} | {fmt(lat['max'])} | "
            f"{fmt(s['median'])} | {fmt(writer) if writer is not None else '–'} |"
        )
    return [*lines, ""]


def _peer_matrix(pairs: list[dict[str, Any]]) -> list[str]:
    """docs/s of every store side by side per workload and client count."""
    cells: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    seeds: dict[str, str] = {}
    for p in pairs:
        if not p["group"].startswith("peers."):
            continue
        key = (p["params"]["workload"], p["params"]["clients"])
        cells[key][p["a"]["label"]] = p["a"]["median"]
        cells[key][p["b"]["label"]] = p["b"]["median"]
        seeds[p["params"]["workload"]] = p["params"].get("seed", "")
    if not cells:
        return []
    stores = ["settee", "sqlite3", "lmdb", "reference"]
    stores = [s for s in stores if any(s in c for c in cells.values())]
    lines = [
        "## Seed workloads side by side (docs/s, medians)",
        "",
        "| workload | clients | " + " | ".join(stores) + " | seed (CouchDB) |",
        "| --- | --- | " + " | ".join("---" for _ in stores) + " | --- |",
    ]
    for (workload, clients), values in cells.items():
        row = " | ".join(fmt(values[s]) if s in values else "–" for s in stores)
        lines.append(f"| {workload} | {clients} | {row} | {seeds[workload]} |")
    return [*lines, ""]


def _scaling_table(curve: list[dict[str, Any]]) -> list[str]:
    if not curve:
        return []
    lines = [
        "## Scaling curve (µs per operation, medians; sizes measured round-robin)",
        "",
        "| documents | random get µs | 100-key multiget µs | "
        "range get (100 rows, include_docs) µs/row | insert µs/doc (1000-doc batches) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for pt in curve:
        cells = [fmt(pt[k]) if k in pt else "–" for k in _SCALING_KEYS]
        lines.append(f"| {pt['docs']:,} | " + " | ".join(cells) + " |")
    return [*lines, ""]


_SCALING_KEYS = ("get_us", "multiget_us", "range_docs_us", "insert_us")


def _profiles(pairs: list[dict[str, Any]]) -> list[str]:
    rows = [p for p in pairs if p.get("profile")]
    if not rows:
        return []
    lines = ["## Profiles of missed targets (cProfile of side A, top functions by own time)", ""]
    for p in rows:
        lines += [f"### `{p['id']}`", "", "```", p["profile"], "```", ""]
    return lines


# -- the README section ---------------------------------------------------------------------------


def performance_section(doc: dict[str, Any]) -> str:
    """A short "Performance" section for the README, from this run only."""
    m = doc["machine"]
    pairs = {p["id"]: p for p in doc["pairs"]}
    lines = [
        "## Performance",
        "",
        f"Measured by `{doc['command']}` on {m['nproc']} CPUs "
        f"({m.get('cpu_model') or 'unknown'}), Python {m['python']}, "
        f"load average {fmt(m['loadavg_start'])} at start; full tables and plots in "
        "`bench/results/latest.md`. A/B ratios are medians measured in the same run.",
        "",
    ]
    bullets = []
    mixed = [p for p in doc["pairs"] if p["group"].endswith(".mixed")]
    for p in mixed:
        lat_a = p["a"].get("latency_ms", {})
        lat_b = p["b"].get("latency_ms", {})
        rate = p["params"].get("write_rate")
        where = " on the latency file system" if p["params"]["fs"] == "latency" else ""
        bullets.append(
            f"Reads under {p['params']['batch']}-doc batch writes "
            + (f"at {rate:,} docs/s" if rate else "back to back")
            + f"{where} ({p['params']['readers']} readers): parallel {fmt(p['a']['median'])} vs "
            f"serialized {fmt(p['b']['median'])} reads/s (×{p['ratio']:.2f}); p99 "
            f"{fmt(lat_a.get('p99', float('nan')))} vs {fmt(lat_b.get('p99', float('nan')))} ms."
        )
    seq = [p for i, p in pairs.items() if i.startswith("readmode.os.seq.")]
    if seq:
        worst = min(seq, key=lambda p: p["ratio"])
        bullets.append(
            "Sequential single-client calls, parallel ÷ serialized: "
            + ", ".join(f"{p['params']['op']} ×{p['ratio']:.2f}" for p in seq)
            + f" (lowest: {worst['params']['op']}, {worst['verdict']})."
        )
    bullets += _peer_bullets(doc["pairs"])
    for i in ("large.put", "large.get"):
        sized = [p for k, p in pairs.items() if k.startswith(i)]
        if sized:
            bullets.append(
                f"{'Put' if i.endswith('put') else 'Get'} of large documents: "
                + ", ".join(
                    f"{p['params']['mb']:g} MB at {fmt(p['a']['median'])} MB/s "
                    f"({p['ratio'] * 100:.0f}% of raw)"
                    for p in sized
                )
                + "."
            )
    if "reopen" in pairs:
        p = pairs["reopen"]
        bullets.append(
            f"Reopen of {p['params']['docs']:,} documents: {fmt(p['a']['median'] * 1000)} ms "
            f"(sqlite3 {fmt(p['b']['median'] * 1000)} ms)."
        )
    if "bursts.get" in pairs:
        p = pairs["bursts.get"]
        a, b = _latency(p["a"]), _latency(p["b"])
        bullets.append(
            f"Random gets while {p['params']['burst']}-doc bursts commit: p99.9 {a('p99.9')} ms, "
            f"max {a('max')} ms (sqlite3 {b('p99.9')} ms, max {b('max')} ms); "
            f"settee ÷ sqlite3 reads/s ×{p['ratio']:.2f}."
        )
    if "conflicts.reference" in pairs and "conflicts.growth" in pairs:
        p, g = pairs["conflicts.reference"], pairs["conflicts.growth"]
        bullets.append(
            f"{p['params']['conflicts']:,} conflicting revisions of one document in one "
            f"new_edits=false call: {fmt(p['a']['median'])} revisions/s, ×{p['ratio']:.1f} "
            f"the reference; ×{g['ratio']:.2f} the rate at a tenth of the leaves (1 is linear)."
        )
    if "processes.get" in pairs:
        p = pairs["processes.get"]
        bullets.append(
            f"Random gets from reader processes (`readonly=True`) while a writer commits: "
            f"2 processes {fmt(p['a']['median'])} vs 1 process {fmt(p['b']['median'])} "
            f"reads/s (×{p['ratio']:.2f}) on {p['params']['cpus']} CPUs."
        )
    scale = [p for k, p in pairs.items() if k.startswith("scaling.")]
    ours = [p for p in scale if p["params"].get("store", "settee") == "settee"]
    if ours:
        p0 = ours[0]["params"]
        peers: dict[str, list[str]] = {}
        for p in scale:
            store = p["params"].get("store", "settee")
            if store != "settee":
                peers.setdefault(store, []).append(f"{p['params']['op']} ×{p['ratio']:.2f}")
        compared = "; ".join(f"{store} {', '.join(grew)}" for store, grew in peers.items())
        bullets.append(
            f"From {p0['small']:,} to {p0['large']:,} documents the per-op cost grows "
            + ", ".join(f"{p['params']['op']} ×{p['ratio']:.2f}" for p in ours)
            + (f" (on the same sizes in the same run: {compared})" if compared else "")
            + "."
        )
    lines += [f"- {b}" for b in bullets]
    return "\n".join(lines) + "\n"


def _latency(side: dict[str, Any]) -> Callable[[str], str]:
    """A formatter of one side's latency percentiles (``nan`` when not recorded)."""
    lats = side.get("latency_ms", {})
    return lambda key: fmt(lats.get(key, float("nan")))


def _peer_bullets(pairs: Iterable[dict[str, Any]]) -> list[str]:
    wins: list[str] = []
    losses: list[str] = []
    for p in pairs:
        if not p["group"].startswith("peers.") or p["params"]["clients"] != 1:
            continue
        text = f"{p['params']['workload']} vs {p['b']['label']} ×{p['ratio']:.2f}"
        (wins if p["ratio"] >= 1 else losses).append(text)
    out = []
    if wins:
        out.append("One client, settee ÷ peer docs/s where settee wins: " + ", ".join(wins) + ".")
    if losses:
        out.append(
            "Where a peer wins (settee ÷ peer below 1): "
            + ", ".join(losses)
            + ". The peers run their work in C; settee's read and write paths are Python."
        )
    return out


# -- plots --------------------------------------------------------------------------------


def plot_all(doc: dict[str, Any], out_dir: str) -> list[str]:
    """Draw the PNG plots (matplotlib, Agg backend); return their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    for name, draw in (
        ("throughput_vs_clients.png", _plot_throughput),
        ("latency_percentiles.png", _plot_latency),
        ("large_documents.png", _plot_large),
        ("scaling.png", _plot_scaling),
    ):
        fig = draw(plt, doc)
        if fig is None:
            continue
        fig.savefig(os.path.join(out_dir, name), dpi=110, bbox_inches="tight")
        plt.close(fig)
        names.append(name)
    return names


def _series(pairs: list[dict[str, Any]], prefix: str, param: str) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for p in pairs:
        if p["id"].startswith(prefix):
            x = p["params"][param]
            out[p["a"]["label"]][x] = p["a"]["median"]
            out[p["b"]["label"]][x] = p["b"]["median"]
    return out


def _plot_throughput(plt: Any, doc: dict[str, Any]) -> Any:
    pairs = doc["pairs"]
    panels = [
        ("random reads, OS file system", _series(pairs, "readmode.os.concurrent", "clients")),
        (
            "random reads, latency file system",
            _series(pairs, "readmode.latency.concurrent", "clients"),
        ),
        ("100-key multiget include_docs", _series(pairs, "peers.multiget_docs.", "clients")),
        ("100-doc batch inserts", _series(pairs, "peers.insert.", "clients")),
    ]
    panels = [(t, s) for t, s in panels if s]
    if not panels:
        return None
    cols = min(2, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5.4 * cols, 3.8 * nrows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (title, series) in zip(axes.flat, panels, strict=False):
        clients: set[int] = set()
        for label, points in series.items():
            xs = sorted(points)
            clients.update(xs)
            ax.plot(xs, [points[x] for x in xs], marker="o", label=label)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("client threads")
        ax.set_ylabel("reads/s" if "random" in title else "docs/s")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(clients), [str(c) for c in sorted(clients)])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"settee bench --{doc['mode']}: throughput vs clients (medians)", fontsize=10)
    return fig


def _plot_latency(plt: Any, doc: dict[str, Any]) -> Any:
    rows = [p for p in doc["pairs"] if p["group"].endswith(".mixed") and p["a"].get("latency_ms")]
    if not rows:
        return None
    qs = ["p50", "p90", "p99", "p99.9"]
    cols = min(2, len(rows))
    nrows = (len(rows) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.4 * nrows), squeeze=False)
    for ax in axes.flat[len(rows) :]:
        ax.set_visible(False)
    for ax, p in zip(axes.flat, rows, strict=False):
        width = 0.38
        for k, side in enumerate((p["a"], p["b"])):
            xs = [i + (k - 0.5) * width for i in range(len(qs))]
            ax.bar(xs, [side["latency_ms"][q] for q in qs], width, label=side["label"])
        ax.set_xticks(range(len(qs)), qs)
        ax.set_yscale("log")
        ax.set_ylabel("ms per get")
        ax.set_title(p["title"], fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    fig.suptitle("read latency percentiles under batched writes (log scale)", fontsize=10)
    return fig


def _plot_large(plt: Any, doc: dict[str, Any]) -> Any:
    rows = [p for p in doc["pairs"] if p["group"] == "large"]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    labels = [f"{p['params']['mb']:g} MB {p['id'].split('.')[1]}" for p in rows]
    width = 0.38
    xs = range(len(rows))
    ax.bar([x - width / 2 for x in xs], [p["a"]["median"] for p in rows], width, label="settee")
    ax.bar([x + width / 2 for x in xs], [p["b"]["median"] for p in rows], width, label="raw os")
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.set_ylabel("MB/s")
    ax.set_title("large documents vs raw os.write+fsync / os.pread", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return fig


def _plot_scaling(plt: Any, doc: dict[str, Any]) -> Any:
    curve = doc.get("curves", {}).get("scaling", [])
    if len(curve) < 2:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = [pt["docs"] for pt in curve]
    for key, label in (
        ("insert_us", "insert µs/doc"),
        ("get_us", "random get µs"),
        ("multiget_us", "100-key multiget µs"),
        ("range_docs_us", "range get µs/row (100-row calls)"),
    ):
        if all(key in pt for pt in curve):
            ax.plot(xs, [pt[key] for pt in curve], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("documents in the database")
    ax.set_ylabel("µs per operation")
    ax.set_title("scaling: per-op cost vs database size", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig
