"""Reader of PyTorch-profiler (Kineto) traces of a data-parallel job: one Chrome-trace JSON per
rank (``.json`` / ``.json.gz``; a folder of them, or one file for one rank) into the neutral
``OpTable`` of the ops that ``sim.traces.dataparallel`` turns into a program.

Ranks: ``distributedInfo.rank`` / ``world_size`` of each file's header; files without a header
take their rank from the file order (said in a note). A folder must hold every rank of the
world once, all with the same ``ProfilerStep#N`` numbers. One file is one rank replayed alone.
The layout is pure data parallel (dp = ranks, pp = tp = 1); ``--meta`` may name it but not change it.

Steps: the ``ProfilerStep#N`` CPU annotations; a GPU event belongs to the step whose window holds
the CPU call that launched it (``sim.traces.kineto_events``). Each GPU event gets a role:
- backward: launched from the autograd engine's thread (``pt_autograd_*``) or under an
  ``autograd::engine::evaluate_function`` op or a ``## backward ##`` annotation;
- optimizer: launched under an ``Optimizer.step#...`` annotation;
- forward: any other compute launched before the step's first backward launch, outside
  ``Optimizer.zero_grad#...``;
- gradient sync: NCCL all-reduce / reduce-scatter kernels (``ncclKernel_AllReduce_...``,
  ``ncclDevKernel_ReduceScatter_...``) launched in or after the backward, outside the optimizer;
- parameter gather: NCCL all-gather kernels launched before the backward (ZeRO / FSDP);
- anything else (zero_grad's memsets, broadcasts, all-to-all, kernels after the backward outside
  the optimizer) is *unmapped*: counted, and the largest named by time (``OpTable.notes``).
Ops of one rank and step (times are on the GPU, so an op's span includes the idle time of a
launch-bound phase, as the artifact's CUDA-event timed ops do):
- ``forward-compute``: from the step's first GPU event to its first backward kernel;
- ``backward-compute`` #0..n: the backward (first to last backward kernel), cut where each of the
  n gradient-sync kernels starts (clipped to the backward): gradient bucket i is reduced after
  segment i (DDP's bucketed overlap; with no overlap the cuts fall at the backward's end);
- ``grads-reduce-scatter`` #i: gradient-sync kernel i (an all-reduce is this op type too: it is
  the data-parallel gradient collective of the dependency model);
- ``params-all-gather`` #j: parameter-gather kernel j;
- ``optimizer``: from when the backward and the last gradient sync are done to the step's last
  GPU event (so unmapped tail kernels count here).
Unmapped kernels inside a span count toward it: the ops cover each rank's step without gaps.
Assumptions: ranks share one clock (the same host, or synchronised clocks); one file, one rank.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .dependencies import AG, BWD, FWD, OPT, RS
from .kineto_events import Kernel, RankEvents, read_rank
from .table import OpTable, TraceMeta

__all__ = ["KINETO_SUFFIXES", "is_kineto", "kineto_files", "kineto_meta", "read_kineto", "roles"]

KINETO_SUFFIXES = (".json", ".json.gz")
NCCL_KINDS = ("AllReduce", "ReduceScatter", "AllGather", "Broadcast", "SendRecv", "AllToAll", "Reduce")
UNMAPPED = "unmapped"
_TOP = 5


def is_kineto(path: Path) -> bool:
    """Whether *path* is read as Kineto traces: a folder, or a file named ``*.json`` /
    ``*.json.gz`` (any case). Looks only at the name and whether the path is a folder; never
    raises (a path that cannot be looked at is not a folder)."""
    try:
        is_dir = path.is_dir()
    except OSError:
        is_dir = False
    return is_dir or path.name.lower().endswith(KINETO_SUFFIXES)


def kineto_files(path: Path) -> list[Path]:
    """The trace files at *path*: ``[path]`` for a file (of any name), or the ``*.json`` /
    ``*.json.gz`` files of a folder (not its subfolders) in natural order (``rank-2`` before
    ``rank-10``). ConfigError when *path* does not exist, or is a folder that cannot be listed or
    holds no trace file. The files are not opened (``kineto_events.read_trace_json`` checks them)."""
    if not path.is_dir():
        if not path.exists():
            raise ConfigError(f"{path}: no such trace file or folder")
        return [path]
    try:
        files = [p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(KINETO_SUFFIXES)]
    except OSError as e:
        raise ConfigError(f"{path}: cannot list the trace folder: {e.strerror}") from None
    if not files:
        raise ConfigError(f"{path}: no trace files (*.json, *.json.gz) in the folder")
    return sorted(files, key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)])


def _nccl_kind(name: str) -> str:
    if not name.lower().startswith("nccl"):
        return ""
    return next((k for k in NCCL_KINDS if k in name), "other")


def roles(kernels: tuple[Kernel, ...] | list[Kernel]) -> list[str]:
    """The role of each of one step's GPU events: ``forward``, ``backward``, ``optimizer``,
    ``grad-sync``, ``param-gather`` or ``unmapped`` (rules in the module docstring)."""
    bwd_launch = min((k.launch_us for k in kernels if k.context == "backward"), default=math.inf)
    out = []
    for k in kernels:
        kind = _nccl_kind(k.name)
        after = k.context == "backward" or k.launch_us >= bwd_launch
        if kind in ("AllReduce", "ReduceScatter") and k.context != "optimizer" and after:
            out.append("grad-sync")
        elif kind == "AllGather" and k.context == "" and k.launch_us < bwd_launch:
            out.append("param-gather")
        elif kind:
            out.append(UNMAPPED)
        elif k.context in ("backward", "optimizer"):
            out.append(k.context)
        elif k.context == "" and k.launch_us < bwd_launch:
            out.append("forward")
        else:
            out.append(UNMAPPED)
    return out


def _step_ops(kernels: list[Kernel], role: list[str]) -> list[tuple[str, int, float, float]] | str:
    """One rank's step as ops (optype, seq, start us, end us), or why it cannot be one."""
    bwd = [k for k, r in zip(kernels, role) if r == "backward"]
    if not bwd:
        return "no backward kernels (not a training step?)"
    t0 = min(k.ts_us for k in kernels)
    t_end = max(k.ts_us + k.dur_us for k in kernels)
    t_b = min(k.ts_us for k in bwd)
    t_bend = max(k.ts_us + k.dur_us for k in bwd)
    sync = [k for k, r in zip(kernels, role) if r == "grad-sync"]
    ops = [(AG, j, k.ts_us, k.ts_us + k.dur_us)
           for j, k in enumerate(k for k, r in zip(kernels, role) if r == "param-gather")]
    ops.append((FWD, 0, t0, t_b))
    cut = t_b
    for i, k in enumerate(sync):
        nxt = min(max(k.ts_us, cut), t_bend)
        ops += [(BWD, i, cut, nxt), (RS, i, k.ts_us, k.ts_us + k.dur_us)]
        cut = nxt
    ops.append((BWD, len(sync), cut, t_bend))
    ops.append((OPT, 0, max([t_bend] + [k.ts_us + k.dur_us for k in sync]), t_end))
    return ops


def _by_step(ev: RankEvents) -> dict[int, list[Kernel]]:
    """The GPU events of each ProfilerStep (by their launch time; the GPU time where no launch is known)."""
    nums = sorted(ev.steps)
    starts = [ev.steps[n][0] for n in nums]
    out: dict[int, list[Kernel]] = {n: [] for n in nums}
    for k in ev.kernels:
        t = k.ts_us if math.isnan(k.launch_us) else k.launch_us
        i = bisect_right(starts, t) - 1
        if i >= 0 and t < ev.steps[nums[i]][1]:
            out[nums[i]].append(k)
    return out


def _align(path: Path, evs: list[RankEvents]) -> tuple[list[int], list[str]]:
    """Each file's rank (header, or file order), checked: every rank once, world size = file count
    (a folder), the same steps everywhere; and the notes to print."""
    notes: list[str] = []
    have = [e for e in evs if e.rank >= 0]
    if have and len(have) != len(evs):
        bad = next(e for e in evs if e.rank < 0)
        raise ConfigError(f"{bad.path}: no distributedInfo.rank, but {have[0].path.name} has one; "
                          "give every rank's trace from the same run")
    ranks = [e.rank for e in evs] if have else list(range(len(evs)))
    if not have and len(evs) > 1:
        notes.append(f"no distributedInfo.rank in the trace headers: ranks 0..{len(evs) - 1} taken from the "
                     "file order " + ", ".join(e.path.name for e in evs[:4]) + (" ..." if len(evs) > 4 else ""))
    seen: dict[int, Path] = {}
    for e, r in zip(evs, ranks):
        if r in seen:
            raise ConfigError(f"{e.path}: distributedInfo.rank {r} is also the rank of {seen[r].name}; "
                              "one file per rank")
        seen[r] = e.path
    sizes = {e.world_size for e in evs if e.world_size >= 0}
    if len(sizes) > 1:
        a, b = sorted(sizes)[:2]
        ea = next(e for e in evs if e.world_size == a)
        eb = next(e for e in evs if e.world_size == b)
        raise ConfigError(f"{eb.path}: distributedInfo.world_size {b}, but {ea.path.name} says {a}; "
                          "give the traces of one run")
    ws = sizes.pop() if sizes else -1
    if path.is_dir() and ws >= 0 and ws != len(evs):
        raise ConfigError(f"{evs[0].path}: distributedInfo.world_size {ws}, but the folder {path} holds "
                          f"{len(evs)} trace file(s); a folder needs every rank's trace (ranks 0..{ws - 1})")
    if path.is_dir() and sorted(ranks) != list(range(len(evs))):
        miss = sorted(set(range(len(evs))) - set(ranks))
        raise ConfigError(f"{path}: ranks {sorted(ranks)[:8]} in the trace headers: rank(s) {miss[:8]} missing; "
                          "a folder needs every rank's trace")
    if not path.is_dir() and ws > 1:
        notes.append(f"rank {ranks[0]} of world size {ws}: only this rank's trace is given; it is replayed alone "
                     "(its collectives' waits for the other ranks count as transfer time)")
    for e in evs:
        if not e.steps:
            raise ConfigError(f"{e.path}: no ProfilerStep#N annotation; profile with a torch.profiler schedule "
                              "and call prof.step() once per training step")
        if not e.kernels:
            raise ConfigError(f"{e.path}: no GPU kernels; profile with activities=[ProfilerActivity.CPU, "
                              "ProfilerActivity.CUDA]")
    for e in evs[1:]:
        if sorted(e.steps) != sorted(evs[0].steps):
            sa, sb = sorted(evs[0].steps), sorted(e.steps)
            raise ConfigError(f"{e.path}: ProfilerSteps {sb[:6]}{' ...' if len(sb) > 6 else ''}, but "
                              f"{evs[0].path.name} has {sa[:6]}{' ...' if len(sa) > 6 else ''}; every rank must "
                              "record the same steps")
    return ranks, notes


def kineto_meta(path: Path, n_ranks: int, meta: TraceMeta | None) -> TraceMeta:
    """The job layout: pure data parallel over the ranks read, or *meta* if it says the same."""
    if meta is None:
        return TraceMeta(name=path.name.split(".")[0] or "kineto", dp=n_ranks, pp=1, tp=1, world_size=n_ranks)
    if meta.pp != 1 or meta.tp != 1 or meta.vpp != 1 or meta.dp * meta.dsp != n_ranks:
        raise ConfigError(f"trace meta {meta.name!r}: dp {meta.dp} x dsp {meta.dsp}, pp {meta.pp}, tp {meta.tp}, "
                          f"vpp {meta.vpp}; a Kineto trace of {n_ranks} rank file(s) is replayed as pure data "
                          f"parallel: dp x dsp = {n_ranks}, pp = tp = vpp = 1")
    return meta


def _unmapped_note(kernels: list[Kernel], role: list[str]) -> str:
    total = sum(k.dur_us for k in kernels)
    left = [k for k, r in zip(kernels, role) if r == UNMAPPED]
    if not left:
        return ""
    by: dict[str, float] = {}
    for k in left:
        short = re.split(r"[(<]", k.name, maxsplit=1)[0].strip()[:60] or k.name[:60]
        by[short] = by.get(short, 0.0) + k.dur_us
    top = ", ".join(f"{n} ({t / 1e3:.2f} ms)" for n, t in sorted(by.items(), key=lambda x: -x[1])[:_TOP])
    share = 100.0 * sum(k.dur_us for k in left) / total if total > 0 else 0.0
    return (f"{len(left)} of {len(kernels)} GPU kernels ({share:.1f}% of kernel time) not mapped to an op type; "
            f"their time counts toward the op span they ran in. Largest: {top}")


def read_kineto(path: Path, meta: TraceMeta | None = None) -> tuple[OpTable, TraceMeta]:
    """The ops of the Kineto trace(s) at *path* (a folder or one file) and the job layout
    (``kineto_meta``: *meta* checked, or pure data parallel over the ranks read); ConfigError
    names the file and field of bad input."""
    evs = [read_rank(p) for p in kineto_files(path)]
    ranks, notes = _align(path, evs)
    layout = kineto_meta(path, len(evs), meta)
    cols: dict[str, list[object]] = {c: [] for c in ("dp", "rank", "step", "optype", "seq", "start", "dur")}
    all_k: list[Kernel] = []
    all_r: list[str] = []
    skipped = 0
    opt_seen = False
    for dp, (ev, rank) in enumerate(sorted(zip(evs, ranks), key=lambda x: x[1])):
        for step, ks in _by_step(ev).items():
            role = roles(ks)
            all_k += ks
            all_r += role
            opt_seen |= "optimizer" in role
            ops = _step_ops(ks, role) if ks else "no GPU kernels launched in the step"
            if isinstance(ops, str):
                notes.append(f"{ev.path.name}: step {step}: {ops}; the step is left out")
                skipped += 1
                continue
            for optype, seq, a, b in ops:
                for c, v in zip(cols, (dp, rank, step, optype, seq, a * 1e-6, max(b - a, 0.0) * 1e-6)):
                    cols[c].append(v)
    if not cols["dp"]:
        raise ConfigError(f"{path}: no training step with backward kernels in {skipped} step(s) of "
                          f"{len(evs)} rank(s); is this a training trace?")
    if not opt_seen:
        notes.append("no kernels under Optimizer.step#...: the optimizer op is the step's tail after the "
                     "backward and the gradient sync")
    if note := _unmapped_note(all_k, all_r):
        notes.append(note)
    n = len(cols["dp"])
    ints = {c: np.array(cols[c], dtype=np.int64) for c in ("dp", "rank", "step", "seq")}
    table = OpTable(source=str(path), dp=ints["dp"], stage=np.zeros(n, dtype=np.int64), rank=ints["rank"],
                  step=ints["step"], optype=np.array(cols["optype"], dtype=object), seq=ints["seq"],
                  chunk=np.full(n, -1, dtype=np.int64), gchunk=np.full(n, -1, dtype=np.int64),
                  start_s=np.array(cols["start"], dtype=np.float64), dur_s=np.array(cols["dur"], dtype=np.float64),
                  notes=tuple(notes))
    return table, layout
