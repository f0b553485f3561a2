"""Shared helpers of the device measurement scripts in this folder: the timing method of
validation/compute/README.md (CUDA events around one call, 3 warm-ups, median of the timed calls), CSVs
written row by row, a run-wide deadline. Not a test module; runs only inside those scripts."""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import tempfile
import time
import traceback

import torch


class State:
    """Where the run writes, on which device, and when it must stop (main sets dev and out_dir)."""

    def __init__(self) -> None:
        self.deadline_s = 330.0  # 5.5 minutes from the start: later cases are skipped, the files stay complete
        self.start = time.monotonic()
        self.out_dir = "."
        self.dev = torch.device("cpu")


S = State()


def log(msg: str) -> None:
    line = f"[{time.monotonic() - S.start:6.1f}s] {msg}"
    print(line, flush=True)
    with open(os.path.join(S.out_dir, "log.txt"), "a") as f:
        f.write(line + "\n")


def late() -> bool:
    return time.monotonic() - S.start > S.deadline_s


class Table:
    """One CSV under S.out_dir, each row flushed as written so a killed run keeps what it timed."""

    def __init__(self, name: str, columns: list[str]) -> None:
        self.columns = columns
        self.path = os.path.join(S.out_dir, name)
        with open(self.path, "w", newline="") as f:
            csv.writer(f).writerow(columns)

    def row(self, **values: object) -> None:
        unknown = set(values) - set(self.columns)
        assert not unknown, unknown
        with open(self.path, "a", newline="") as f:
            csv.writer(f).writerow([values.get(c, "") for c in self.columns])


def sync() -> None:
    if S.dev.type == "cuda":
        torch.cuda.synchronize()


def bench(fn, reps: int = 10, warmup: int = 3) -> float:
    """Median microseconds of one call: events around each call on CUDA, the host clock on the CPU."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        if S.dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def rnd(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device=S.dev, dtype=torch.bfloat16)


def rel_err(approx: torch.Tensor, ref: torch.Tensor) -> float:
    ref64 = ref.double()
    return float((approx.double() - ref64).norm() / ref64.norm())


def short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def setup(out: str | None, dry_run: bool, prefix: str) -> bool:
    """Where the run writes (a temporary folder for a dry run without --out) and on which device;
    False, with a line on stderr, when a real run finds no CUDA device."""
    S.out_dir = out or (tempfile.mkdtemp(prefix=prefix) if dry_run else ".")
    os.makedirs(S.out_dir, exist_ok=True)
    if not dry_run:
        if not torch.cuda.is_available():
            print("no CUDA device: use --dry-run on a CPU", file=sys.stderr)
            return False
        S.dev = torch.device("cuda")
        torch.cuda.set_per_process_memory_fraction(0.85)  # stay well under 70 GiB of the card's 79
    torch.manual_seed(0)
    log(f"out={S.out_dir} device={S.dev} dry_run={dry_run}")
    return True


def start(doc: str, prefix: str, deadline_s: float | None = None) -> argparse.Namespace | None:
    """A script's command line (--out, --dry-run), its deadline and setup: the parsed arguments, or
    None when a real run finds no CUDA device (the caller exits 2)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, every code path a CPU runs")
    args = ap.parse_args()
    if deadline_s is not None:
        S.deadline_s = deadline_s
    return args if setup(args.out, args.dry_run, prefix) else None


def run_sections(sections) -> None:
    """Each (name, call) in turn until the deadline, a failing one logged and the rest run; then
    the summary and the files written."""
    for name, run in sections:
        if late():
            log(f"{name}: skipped, past the {S.deadline_s:.0f}s deadline")
            continue
        try:
            run()
        except Exception:
            log(f"{name} FAILED:\n{traceback.format_exc()}")
        if S.dev.type == "cuda":
            log(f"{name}: peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
            torch.cuda.empty_cache()
    summary()
    log(f"finished in {time.monotonic() - S.start:.0f}s; files in {S.out_dir}: {sorted(os.listdir(S.out_dir))}")


def summary() -> None:
    """A short table last, since only the end of the output comes back: rows timed and rows with a note."""
    for name in sorted(os.listdir(S.out_dir)):
        if not name.endswith(".csv"):
            continue
        with open(os.path.join(S.out_dir, name)) as f:
            rows = list(csv.DictReader(f))
        notes = sorted({r["note"][:90] for r in rows if r.get("note") and not r.get("time_us")})
        log(f"{name}: {len(rows)} rows, {sum(bool(r.get('time_us')) for r in rows)} timed; untimed: {notes[:4]}")
