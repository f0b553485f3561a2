"""Shared helpers of the device measurement scripts in this folder: the timing method of
validation/compute/README.md (CUDA events around one call, 3 warm-ups, median of the timed calls), CSVs
written row by row, a run-wide deadline. Not a test module; runs only inside those scripts."""
from __future__ import annotations

import csv
import os
import statistics
import time

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
