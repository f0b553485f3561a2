"""What each command of ``clustersim`` does with its parsed arguments (``sim.cli`` parses them):
check what the flags alone can tell, call the model (``sim.run``, ``sim.plan``, ``sim.sweep``,
``sim.traces``, the collective and topology models) and print what ``sim.report`` makes of the
result records (tables, JSON). Expected errors are raised (``sim.errors``) for ``sim.cli.main``
to print as one line; notes go to stderr through ``warn``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from . import report
from .config import PLOT_SUFFIXES, check_output_path
from .config.paths import check_name
from .errors import EXIT_INFEASIBLE, ConfigError, one_line

__all__ = ["cmd_run", "cmd_collective", "cmd_sweep", "cmd_plan", "cmd_whatif", "cmd_topo_show",
           "cmd_bench", "batch_tokens", "warn"]


def warn(line: str) -> None:
    """A line on stderr (a note, a warning, an error), each of its lines made safe to show
    (``sim.errors.one_line``); quiet when stderr is gone."""
    try:
        print("\n".join(one_line(part) for part in line.split("\n")), file=sys.stderr)
    except (BrokenPipeError, ValueError):
        pass


def cmd_topo_show(args: argparse.Namespace) -> int:
    from .config import load_cluster
    from .topology import build_topology
    from .topology.analysis import summarize

    cluster = load_cluster(args.topology, args.chips, args.slice_, args.twisted, args.oversubscription,
                           where="topo show", slices=args.slices,
                           background_load=args.background_load, nvl_domain=args.nvl_domain)
    info = summarize(build_topology(cluster))
    print(report.dump_json(info) if args.json else report.topology_text(info))
    return 0


def _compare_log(args: argparse.Namespace, model: Any, group: list[int] | None, ranks: int) -> int:
    """``collective --compare LOG``: the prediction at every size of an nccl-tests output, scored
    as the collectives suite scores a run (``validate.collectives.score_time``), and the median
    error per regime."""
    from pathlib import Path

    from .collectives import busbw_factor
    from .validate.collectives import score_time
    from .validate.collectives_runs import measured_of
    from .validate.nccl_log import read_nccl_tests_log
    from .validate.stats import median

    log = read_nccl_tests_log(Path(args.compare))
    if log.ranks is not None and log.ranks != ranks:
        raise ConfigError(f"--compare: {args.compare} lists {log.ranks} ranks but the prediction "
                          f"is for {ranks} (--chips / --group)")
    factor = busbw_factor(args.op, ranks)
    lines = [f"{args.op} on {ranks} x {model.topo.spec.chip.name} ({model.topo.name}) vs "
             f"{args.compare}" + (f" (NCCL {log.nccl_version})" if log.nccl_version else ""),
             f"{'size_bytes':>14} {'regime':>9} {'meas_us':>11} {'pred_us':>11} {'meas_busbw':>11} "
             f"{'pred_busbw':>11} {'err_pct':>8}"]
    errs: dict[str, list[float]] = {"latency": [], "ramp": [], "bandwidth": []}
    for m in measured_of(log):
        try:
            pred = model.time(args.op, m.size_bytes, group, args.algo).time_s
        except ConfigError as e:
            raise ConfigError(f"--{e}") from None
        p = score_time(m, pred, factor, args.compare)
        assert p.measured_time_s is not None and p.abs_err_pct is not None
        errs[p.regime].append(p.abs_err_pct)
        lines.append(f"{m.size_bytes:>14} {p.regime:>9} {p.measured_time_s * 1e6:>11.2f} "
                     f"{pred * 1e6:>11.2f} {m.busbw_GBps:>11.2f} {p.predicted_busbw_GBps:>11.2f} "
                     f"{p.abs_err_pct:>8.1f}")
    for regime, xs in errs.items():
        if xs:
            lines.append(f"{regime}: median |error| {median(xs):.1f}% over {len(xs)} sizes")
    print("\n".join(lines))
    return 0


def cmd_collective(args: argparse.Namespace) -> int:
    from .collectives import DTYPE_BYTES, OPS, CollectiveModel
    from .config import load_cluster
    from .topology import build_topology

    if args.op not in OPS:
        raise ConfigError(f"--op: unknown collective {args.op!r}; valid: {', '.join(OPS)}")
    if args.dtype not in DTYPE_BYTES:
        raise ConfigError(f"--dtype: unknown type {args.dtype!r}; valid: {', '.join(DTYPE_BYTES)}")
    if args.min_bytes > args.max_bytes:
        raise ConfigError(f"--min-bytes {args.min_bytes} is larger than --max-bytes {args.max_bytes}")
    if args.factor < 2:
        raise ConfigError(f"--factor: must be >= 2, got {args.factor}")
    if args.gpus_per_node is not None and args.nvl_domain not in (None, args.gpus_per_node):
        raise ConfigError(f"--gpus-per-node {args.gpus_per_node} contradicts --nvl-domain "
                          f"{args.nvl_domain}; give one")
    cluster = load_cluster(args.topology, args.chips, args.slice_, args.twisted, args.oversubscription,
                           sharp=True if args.sharp else None, where="collective",
                           slices=args.slices, background_load=args.background_load,
                           nvl_domain=args.gpus_per_node or args.nvl_domain)
    topo = build_topology(cluster)
    if args.group is not None and args.group < 2:
        raise ConfigError(f"--group: a collective needs at least 2 ranks, got {args.group}")
    if args.group is not None and args.group > topo.chips:
        raise ConfigError(f"--group: {args.group} ranks but the topology has {topo.chips} chips")
    group = list(range(args.group)) if args.group else None
    model = CollectiveModel(topo, nccl_version=args.nccl_version)
    if args.compare is not None:
        return _compare_log(args, model, group, len(group) if group else topo.chips)
    tsize = DTYPE_BYTES[args.dtype]
    results = []
    size = args.min_bytes
    try:
        while size <= args.max_bytes:
            results.append(model.time(args.op, max(tsize, size - size % tsize), group, args.algo))
            size *= args.factor
    except ConfigError as e:            # the model names its fields (algo ...); the user gave flags
        if str(e).split(" ", 1)[0].rstrip(":") == "algo":
            raise ConfigError(f"--{e}") from None
        raise
    if args.csv:
        print(report.collective_csv(results, args.dtype, tsize))
        return 0
    n = len(group) if group else topo.chips
    print(report.collective_table(results, args.op, n, topo.name, topo.spec.chip.name, args.dtype,
                                  tsize))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    import math

    from .config import PRESETS_NAMES, parse_tokens
    from .plan import PlanRequest, plan
    from .progress import available_cores, progress

    if args.model not in PRESETS_NAMES:
        raise ConfigError(f"--model: unknown model {args.model!r}; valid: {', '.join(PRESETS_NAMES)}")
    if not (math.isfinite(args.days) and 0 < args.days <= 3650):
        raise ConfigError(f"--days: expected a number of days in (0, 3650], got {args.days}")
    plot = check_output_path(args.plot, "--plot", PLOT_SUFFIXES) if args.plot is not None else None
    prices: dict[str, float] = {}
    for item in filter(None, (x.strip() for x in args.price.split(","))):
        name, sep, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = -1.0
        if not sep or not name.strip() or not (math.isfinite(price) and 0 < price <= 10_000):
            raise ConfigError(f"--price: expected TOPOLOGY=USD_PER_CHIP_HOUR (0 < USD <= 10000), got {item!r}")
        if name.strip() in prices:
            raise ConfigError(f"--price: {name.strip()!r} is priced twice; give each topology one price")
        prices[name.strip()] = price
    topologies = tuple(t.strip() for t in args.topology.split(",") if t.strip())
    if not topologies:
        raise ConfigError("--topology: give one or more topologies, e.g. dgx-h100,tpu-v5p")
    if len(set(topologies)) != len(topologies):
        twice = sorted({t for t in topologies if topologies.count(t) > 1})
        raise ConfigError(f"--topology: {', '.join(map(repr, twice[:5]))} listed more than once; "
                          "list each topology once")
    if unknown := sorted(set(prices) - set(topologies)):
        raise ConfigError(f"--price: {', '.join(unknown)} is not among --topology {args.topology}")
    if args.kernel_tables is not None:
        _check_plan_tables(topologies)
    per_step = batch_tokens(args.batch_tokens)
    if per_step < args.seq_len:
        raise ConfigError(f"--batch-tokens: {per_step:,.0f} tokens is less than one sequence of "
                          f"--seq-len {args.seq_len}; give at least {args.seq_len}")
    req = PlanRequest(model=args.model, tokens=parse_tokens(args.tokens, "--tokens"), days=args.days,
                      topologies=topologies, prices=prices, seq_len=args.seq_len,
                      batch_tokens=per_step, precision=args.precision,
                      max_chips=args.max_chips, framework=args.framework, recovery=args.recovery,
                      kernel_tables=kernel_tables_dir(args.kernel_tables))
    if not args.yes:
        from .plan import MAX_SCREEN_S, screen_estimate

        n, seconds = screen_estimate(req)
        if seconds > MAX_SCREEN_S:
            raise ConfigError(f"plan: screening up to {n:,} layouts would take ~{seconds / 60:,.0f} "
                              f"minutes (over {MAX_SCREEN_S / 60:.0f}); lower --max-chips or "
                              "--batch-tokens, raise --seq-len, or pass --yes to run it anyway")
    plans = plan(req, progress=progress, workers=available_cores())
    entries = report.plan_json(plans, req)
    if plot is not None:
        from .plots import plot_plan

        plot_plan([e for e in entries.values() if "chips" in e], plot)
    print(report.dump_json(entries) if args.json
          else report.plan_text(plans, req, None if plot is None else str(plot)))
    # a valid plan no topology can meet (the deadline, memory) is answered, then exit 3
    if any(e.get("meets_deadline") for e in entries.values()):
        return 0
    warn(f"clustersim: infeasible: no topology of --topology {args.topology} trains "
         f"{args.tokens} tokens within {args.days:g} days (the answer above says how close each comes)")
    return EXIT_INFEASIBLE


def _check_plan_tables(topologies: tuple[str, ...]) -> None:
    """``plan --kernel-tables``: tables fit one GPU, so the plan's GPU topologies must share it."""
    from .config import load_topology_spec

    chips = [load_topology_spec(t, "--topology").chip for t in topologies]
    gpus = {c.name for c in chips if not c.is_tpu}
    if len(gpus) != 1:
        said = (f"the plan's GPU topologies run {', '.join(sorted(gpus))}: plan them one GPU at a time"
                if gpus else "the plan has no GPU topology to fit them to")
        raise ConfigError(f"--kernel-tables: the tables fit one GPU; {said}")


def kernel_tables_dir(path: str | None) -> str:
    """``--kernel-tables DIR``: the folder, checked and absolute ("" when not given). A PyTorch
    profiler (Kineto) trace, a ``.json``/``.json.gz`` file or a folder of them, stands for the
    tables of its GEMM and attention ops (``sim.traces.kineto_tables``), written once into the
    user's cache folder and said on stderr."""
    if path is None:
        return ""
    from .compute.folder_fit import check_tables_folder
    from .traces.kineto_tables import cached_trace_tables, is_trace

    p = Path(check_name(path, "--kernel-tables"))
    if is_trace(p):
        p = cached_trace_tables(p, warn)
    return str(check_tables_folder(p, "--kernel-tables"))


def kernel_tables_set(path: str | None) -> list[str]:
    """``--kernel-tables DIR`` as the ``--set`` it stands for (the path quoted: a YAML string)."""
    folder = kernel_tables_dir(path)
    return [f"software.kernel_tables={json.dumps(folder)}"] if folder else []


def batch_tokens(text: str) -> float:
    """Tokens per step: 4M means 4 x 2^20 (a power-of-two batch), like --max-bytes."""
    t = text.strip().upper()
    mult = {"K": 2**10, "M": 2**20}.get(t[-1:], 1)
    try:
        v = float(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        v = -1.0
    if not (v >= 1 and v <= 2**32):
        raise ConfigError(f"--batch-tokens: expected a token count like 4M or 1048576, got {text!r}")
    return v


def cmd_sweep(args: argparse.Namespace) -> int:

    from .config import read_scenario_raw
    from .job import DEFAULT_MAX_EVENTS
    from .progress import available_cores, progress
    from .sweep import parse_over, run_sweep

    if not args.over:
        raise ConfigError("--over: give at least one KEY=V1,V2,... to sweep")
    out = check_output_path(args.out, "--out", (".csv", ".parquet")) if args.out is not None else None
    plot = check_output_path(args.plot, "--plot", PLOT_SUFFIXES) if args.plot is not None else None
    raw, source, _ = read_scenario_raw(args.scenario)
    axes = [parse_over(o, raw) for o in args.over]
    if both := sorted({s.partition("=")[0].strip() for s in args.set} & {a.key for a in axes}):
        raise ConfigError(f"--set {both[0]}: also swept by --over (which would override it); give it once")
    workers = args.workers or available_cores()
    rows = run_sweep(raw, source, axes, sets=args.set + kernel_tables_set(args.kernel_tables),
                     weak=args.weak, workers=workers,
                     scheduler=args.scheduler, out=out,
                     max_events=None if args.yes else (args.max_events or DEFAULT_MAX_EVENTS),
                     progress=progress)
    if plot is not None:
        from .plots import plot_sweep
        from .validate import sweep_overlay

        keys = [a.key for a in axes]
        plot_sweep(rows, keys, plot, weak=args.weak, measured=sweep_overlay(rows, keys),
                   measured_label="measured (validation/training)")
    print(report.dump_json(rows) if args.json
          else report.sweep_text(rows, [a.key for a in axes], None if out is None else str(out),
                                 None if plot is None else str(plot)))
    return 0


def cmd_whatif(args: argparse.Namespace) -> int:
    from .traces import Replay, load_trace, what_if

    check_name(args.trace, "trace")
    trace_out = check_output_path(args.trace_out, "--trace-out") if args.trace_out else None
    heatmap = check_output_path(args.heatmap, "--heatmap", PLOT_SUFFIXES) if args.heatmap else None
    prog = load_trace(args.trace, args.meta)
    for why in prog.skipped:
        warn(f"clustersim: warning: {args.trace}: partial step skipped, not scored: {why}")
    for note in prog.notes:
        warn(f"clustersim: warning: {args.trace}: {note}")
    w = what_if(prog)
    files = []
    if trace_out is not None:
        import numpy as np

        if args.trace_step is None:
            i = int(np.argmax(w.step_slowdown))
        elif args.trace_step in prog.steps.tolist():
            i = prog.steps.tolist().index(args.trace_step)
        else:
            raise ConfigError(f"--trace-step: step {args.trace_step} is not a complete step of {args.trace}; "
                              f"complete steps: {prog.steps.tolist()[:10]}{' ...' if len(prog.steps) > 10 else ''}")
        from .trace import write_whatif_trace

        write_whatif_trace(trace_out, prog, {"measured": Replay(prog.start_s, prog.end_s), "replayed": w.replay,
                                             "straggler-free": w.ideal}, i, w.name)
        files.append(str(trace_out))
    if heatmap is not None:
        from .plots import plot_straggler_heatmap

        workers = sorted(w.by_worker_steps)
        plot_straggler_heatmap(workers, [int(s) for s in w.steps], [w.by_worker_steps[k].tolist() for k in workers],
                               heatmap, f"{w.name}: attributed slowdown per worker and step")
        files.append(str(heatmap))
    print(report.dump_json(report.whatif_json(w)) if args.json else report.whatif_text(w, files))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Measure this GPU's kernel tables into --out (``sim.bench``)."""
    from .bench import bench, open_torch
    from .progress import progress

    if args.device < 0:
        raise ConfigError(f"--device: expected a CUDA GPU index >= 0, got {args.device}")
    return bench(args.out, args.quick, args.yes, args.only, lambda: open_torch(args.device), warn,
                 progress)


def cmd_run(args: argparse.Namespace) -> int:
    from .config import load_scenario
    from .job import DEFAULT_MAX_EVENTS
    from .run import run

    if args.trace is not None:
        check_output_path(args.trace, "--trace")
    scn = load_scenario(args.scenario, args.set + kernel_tables_set(args.kernel_tables))
    if args.seed is not None and args.seed < 0:
        raise ConfigError(f"--seed: must be >= 0, got {args.seed}")
    per_rank = args.trace_ranks == "all"
    if per_rank and not args.trace:
        raise ConfigError("--trace-ranks all: needs --trace FILE to write the timeline to")
    if per_rank and scn.stragglers is not None:
        raise ConfigError("--trace-ranks all: a straggler scenario is simulated replica by replica; "
                          "trace the replica it reports with --trace-ranks stage")
    result = run(scn, seed=args.seed, trace=bool(args.trace), per_rank=per_rank, steps=args.steps,
                 max_events=None if args.yes else (args.max_events or DEFAULT_MAX_EVENTS))
    if args.steps > 1 and not args.json:
        warn(f"simulated {args.steps} steps")
    if args.trace:
        from .trace import write_trace

        assert result.timeline is not None
        write_trace(args.trace, result.timeline, scn.name)
    print(report.dump_json(report.step_json(result)) if args.json else report.step_text(result, args.trace))
    return 0
