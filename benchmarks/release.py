"""Release benchmarks, the regression gate (issue 32): each row is a whole ``python -m sim ...``
process (start-up and imports included, stdout discarded), run N times; its fastest run divided
by the fastest of a fixed reference played just before each run (bare simpy, 200,000 timeouts:
see benchmarks/_reference.py) is its ratio, so that machine speed cancels (and, by taking the
fastest runs, most of a shared machine's load). The median is printed beside it. The rows run as a
user's do, from compiled bytecode (``child_env``, ``compile_once``).
benchmarks/test_bench_release.py fails a row whose ratio is more than 25% above the one stored in
benchmarks/release_ratios.json.

    python benchmarks/release.py [--rows run-16k,plan-70b] [--repeats N] [--update] [--note TEXT]

prints row, median s, reference s, ratio, stored ratio, change and the child's peak RSS;
``--update`` writes the measured rows' ratios into release_ratios.json (rows not measured keep
theirs). N is 5 unless ``--repeats`` or the environment variable CLUSTERSIM_BENCH_REPEATS says
otherwise. Peak RSS comes from os.wait4 (per child; Linux reports it in KiB).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from _reference import bare_simpy_events_per_s

REPO = Path(__file__).resolve().parent.parent
STORED = Path(__file__).resolve().parent / "release_ratios.json"
REFERENCE_EVENTS = 200_000
TOLERANCE = 1.25                  # a row fails when its ratio exceeds 1.25 x the stored one


class Row(NamedTuple):
    argv: tuple[str, ...]         # after ``python -m sim``
    quick: bool                   # cheap enough for CI (.ci/run)


ROWS: dict[str, Row] = {
    "run-16k": Row(("run", "scenarios/llama3-405b-16384xh100.yaml", "--json"), quick=True),
    "run-tpu-v4": Row(("run", "scenarios/llama3-70b-tpu-v4-4096.yaml", "--json"), quick=True),
    "run-98k": Row(("run", "scenarios/llama3-405b-98304xh100.yaml", "--json"), quick=False),
    "plan-70b": Row(("plan", "--model", "llama3-70b", "--tokens", "15T", "--days", "90",
                     "--topology", "dgx-h100,tpu-v5p", "--json"), quick=False),
    "validate-training": Row(("validate", "--suite", "training", "--json"), quick=False),
    # the 131,072-GPU graph, built and described (its peak RSS is held to 1 GiB below)
    "topo-131k": Row(("topo", "show", "h100-3tier", "--chips", "131072", "--json"), quick=False),
}
RSS_LIMIT_MiB = {"topo-131k": 1024.0}


def default_repeats() -> int:
    return int(os.environ.get("CLUSTERSIM_BENCH_REPEATS", "5"))


def reference_s() -> float:
    """Wall time, in seconds, of one in-process run of the reference workload."""
    return REFERENCE_EVENTS / bare_simpy_events_per_s(REFERENCE_EVENTS)


def child_env() -> dict[str, str]:
    """The rows' environment: this one, Python's bytecode cache allowed. A user's ``python``
    compiles a module once and reads its ``__pycache__`` after; a session that sets
    PYTHONDONTWRITEBYTECODE would time the compilation of every module in every run instead."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def compile_once(repo: Path) -> None:
    """Write *repo*'s ``sim`` bytecode before the timed runs (what its first run would do)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "sim"], cwd=repo, env=child_env(),
                   check=True, stdout=subprocess.DEVNULL)


def run_once(argv: tuple[str, ...], repo: Path = REPO) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one ``python -m sim *argv*`` run from the root of *repo*
    (``python -m`` imports the ``sim`` of its working folder: another checkout's, e.g. the
    previous release's, times that release)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "sim", *argv], cwd=repo, env=child_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read()
    # os.wait4, not proc.wait: it returns this child's own rusage (RUSAGE_CHILDREN is a running max).
    _, status, usage = os.wait4(proc.pid, 0)
    wall_s = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != 0:
        raise RuntimeError(f"python -m sim {' '.join(argv)}: exit {proc.returncode}\n{err.decode()[-2000:]}")
    return wall_s, usage.ru_maxrss / 1024


def measure(rows: list[str], repeats: int, repo: Path = REPO) -> dict[str, dict[str, float]]:
    """Each row's median and fastest wall time over *repeats* runs, the reference played just
    before each of them (so that both see the same load on a shared machine), the ratio of the
    fastest row run to the fastest reference (load only ever adds time, so the fastest runs are
    the steadiest measure: the gate's), and the row's largest peak RSS."""
    out = {}
    compile_once(repo)
    for name in rows:
        refs, runs = [], []
        for _ in range(repeats):
            refs.append(reference_s())
            runs.append(run_once(ROWS[name].argv, repo))
        walls = [wall for wall, _ in runs]
        out[name] = {"median_s": statistics.median(walls), "min_s": min(walls),
                     "reference_s": min(refs), "ratio": min(walls) / min(refs),
                     "peak_rss_MiB": max(rss for _, rss in runs)}
    return out


def stored_ratios(path: Path = STORED) -> dict[str, float]:
    """The stored ratio of each row in *path*; empty when the file does not exist."""
    return json.loads(path.read_text())["ratios"] if path.exists() else {}


def regression(name: str, ratio: float, stored: float) -> str | None:
    """Why *ratio* fails against *stored* (more than TOLERANCE x), or None when it passes."""
    if ratio <= TOLERANCE * stored:
        return None
    return (f"{name}: ratio {ratio:.2f} is {100 * (ratio / stored - 1):.0f}% above the stored "
            f"{stored:.2f} (limit +{100 * (TOLERANCE - 1):.0f}%)")


def update(path: Path, measured: dict[str, dict[str, float]], repeats: int, note: str | None) -> None:
    """Write *measured*'s ratios into *path*, keeping the stored ratios of rows not measured."""
    ratios = {**stored_ratios(path), **{k: round(v["ratio"], 3) for k, v in measured.items()}}
    doc = {
        "note": note or (f"last update: rows {', '.join(measured)}, {repeats} runs each, "
                         f"{os.cpu_count()} cores; ratio = fastest row wall s / fastest reference wall s"),
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "reference_events_per_s": round(REFERENCE_EVENTS / min(
            m["reference_s"] for m in measured.values())),
        "ratios": {k: ratios[k] for k in ROWS if k in ratios},
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
    ap.add_argument("--repeats", type=int, default=default_repeats(), help="runs per row")
    ap.add_argument("--update", action="store_true", help="store the measured ratios")
    ap.add_argument("--note", help="the stored file's note (with --update)")
    ap.add_argument("--repo", type=Path, default=REPO,
                    help="time the sim of this checkout instead (e.g. a worktree of the last release)")
    args = ap.parse_args(argv)
    if args.update and args.repo != REPO:
        ap.error("--update stores this checkout's ratios: drop --repo")
    rows = args.rows.split(",")
    if unknown := [r for r in rows if r not in ROWS]:
        ap.error(f"--rows: unknown {unknown}; known {list(ROWS)}")
    stored = stored_ratios()
    print(f"{REFERENCE_EVENTS:,} bare simpy timeouts before each of {args.repeats} runs per row")
    print(f"{'row':<18} {'median s':>9} {'min s':>7} {'ref s':>6} {'ratio':>7} {'stored':>7} "
          f"{'change':>7} {'peak RSS MiB':>13}", flush=True)
    measured = {}
    for name in rows:
        m = measured[name] = measure([name], args.repeats, args.repo)[name]
        old = stored.get(name)
        old_s, change = (f"{old:.2f}", f"{100 * (m['ratio'] / old - 1):+.1f}%") if old else ("-", "-")
        print(f"{name:<18} {m['median_s']:>9.2f} {m['min_s']:>7.2f} {m['reference_s']:>6.3f} "
              f"{m['ratio']:>7.2f} {old_s:>7} {change:>7} {m['peak_rss_MiB']:>13.0f}", flush=True)
    if args.update:
        update(STORED, measured, args.repeats, args.note)
        print(f"wrote {STORED.relative_to(REPO)}")


if __name__ == "__main__":
    main()
