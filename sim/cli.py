"""Command line: ``clustersim`` / ``python -m sim``. Commands and flags as in DESIGN.md.

Each command parses its arguments, calls the model and prints what ``sim.report`` makes of the
result records (tables, JSON); only the one-line errors and notes on stderr are written here.

Every expected error (bad input, impossible plan) is one line on stderr and exit 2 (input) or 3
(infeasible plan). Anything else is a bug in clustersim: one line asking for a report, exit 1,
and the traceback only with ``--debug``. A closed output pipe (``clustersim run ... | head``) ends
the command quietly, as other Unix tools do.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from . import report
from .config import PLOT_SUFFIXES, check_output_path
from .errors import ConfigError, InfeasibleError, SimError

EXIT_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_BUG = 1
EXIT_PIPE = 141                 # 128 + SIGPIPE, what a shell reports for a tool killed by it


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (and exit 2) instead of usage + error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _size(text: str) -> int:
    """A byte count: 1048576, 64K, 64M, 8G, 64MiB (binary multiples, as nccl-tests reads them)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(t[-1:], 1)
    try:
        v = int(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive byte count like 8, 64K, 8G, 64MiB; got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive byte count, got {text!r}")
    return v


def _nccl_version(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected an NCCL release MAJOR.MINOR like 2.23, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chips", type=_positive_int, help="cluster size (GPU: whole nodes of 8)")
    p.add_argument("--slice", dest="slice_", metavar="AxBxC", help="TPU slice shape instead of --chips")
    p.add_argument("--slices", type=_positive_int,
                   help="TPU Multislice: this many equal slices joined over the DCN")
    p.add_argument("--twisted", action="store_true", help="TPU v4/v5p twisted torus")
    p.add_argument("--oversubscription", type=float, help="fat-tree leaf oversubscription (>= 1)")
    p.add_argument("--background-load", type=float, metavar="F",
                   help="share 0-0.95 of every inter-node link taken by other jobs' traffic")
    p.add_argument("--nvl-domain", type=_positive_int, metavar="G",
                   help="GPUs of each NVLink domain the job uses (e.g. 64 of an NVL72 rack)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="clustersim", description="Simulate accelerator clusters training large models.")
    parser.add_argument("--version", action="version", version=f"clustersim {_version()}")
    parser.add_argument("--debug", action="store_true",
                        help="on an internal error, print the Python traceback")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="simulate one scenario")
    run.add_argument("scenario", help="scenario YAML (path, or a name in scenarios/)")
    run.add_argument("--json", action="store_true", help="one JSON object on stdout")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a scenario field (dotted key, YAML value), e.g. "
                          "--set cluster.chips=2048 --set parallelism.tp=4; repeatable")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto timeline")
    run.add_argument("--trace-ranks", choices=("stage", "all"), default="stage",
                     help="trace one representative rank per pipeline stage (default; with "
                          "stragglers, the median replica the breakdown reports) or every rank")
    run.add_argument("--steps", type=_positive_int, default=1,
                     help="simulate K steps with fresh straggler draws; report the distribution")
    run.add_argument("--max-events", type=_positive_int, default=None, metavar="N",
                     help="refuse a run whose simulation would exceed N events in all "
                          "(default 8,000,000: about 10 s); raise it to run a bigger plan")
    run.add_argument("--yes", action="store_true",
                     help="run however long the estimate says it takes (no event limit)")
    run.set_defaults(func=_cmd_run)

    coll = sub.add_parser("collective", help="nccl-tests-style sweep of one collective")
    coll.add_argument("--topology", required=True, help="bundled name or YAML path")
    _cluster_flags(coll)
    coll.add_argument("--sharp", action="store_true", help="InfiniBand SHARP switches (GPU fat-trees)")
    coll.add_argument("--op", required=True, help="allreduce, allgather, reducescatter, alltoall, "
                                                  "broadcast or sendrecv")
    coll.add_argument("--algo", help="force an algorithm (ring, tree, nvls, nvls_tree, collnet, "
                                     "hierarchical, torus, pairwise, p2p)")
    coll.add_argument("--group", type=_positive_int, help="ranks 0..N-1 only (default: all chips)")
    coll.add_argument("--min-bytes", type=_size, default=8, help="smallest size (default 8)")
    coll.add_argument("--max-bytes", type=_size, default=128 * 2**20, help="largest (default 128M)")
    coll.add_argument("--factor", type=_positive_int, default=2, help="size multiplier (default 2)")
    coll.add_argument("--nccl-version", type=_nccl_version, metavar="MAJOR.MINOR",
                      help="the NCCL release the calls run (e.g. 2.18: no PAT, no tuner plugins); "
                           "default: a current one")
    coll.add_argument("--dtype", default="float", help="element type (default float)")
    coll.add_argument("--csv", action="store_true", help="CSV with nccl-tests' columns")
    coll.set_defaults(func=_cmd_collective)

    sw = sub.add_parser("sweep", help="a scenario over the cartesian product of swept keys")
    sw.add_argument("scenario", help="base scenario YAML (path, or a name in scenarios/)")
    sw.add_argument("--over", action="append", default=[], metavar="KEY=V1,V2,...",
                    help="a swept key: KEY=V1,V2,... or KEY=A..BxF (geometric) or KEY=A..B+S; "
                         "repeat for a cartesian product (e.g. --over cluster.chips=64..8192x2)")
    sw.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a base scenario field, as for run")
    sw.add_argument("--out", metavar="FILE", help="write the table: .csv or .parquet; a sweep "
                                                 "started again with the same file resumes")
    sw.add_argument("--plot", metavar="FILE", help="scaling curve (sweeps over cluster.chips) or "
                                                  "step-time breakdown: .png, .svg or .pdf")
    sw.add_argument("--weak", action="store_true",
                    help="weak scaling: keep the global batch per chip as in the scenario")
    sw.add_argument("--workers", type=_positive_int, default=None,
                    help="local processes (default: the CPU count)")
    sw.add_argument("--scheduler", metavar="ADDRESS", help="run on a Dask cluster (tcp://host:port)")
    sw.add_argument("--max-events", type=_positive_int, default=None, metavar="N",
                    help="per point, as for run (default 8,000,000)")
    sw.add_argument("--yes", action="store_true", help="no event limit per point")
    sw.add_argument("--json", action="store_true", help="the rows as one JSON list on stdout")
    sw.set_defaults(func=_cmd_sweep)

    pl = sub.add_parser("plan", help="smallest and cheapest cluster that trains N tokens in D days")
    pl.add_argument("--model", required=True, help="model preset (llama3-8b, llama3-70b, ...)")
    pl.add_argument("--tokens", required=True, help="token budget, e.g. 15T, 300B, 2.5e12")
    pl.add_argument("--days", required=True, type=float, help="deadline in days")
    pl.add_argument("--topology", required=True, help="comma-separated topologies, e.g. dgx-h100,tpu-v5p")
    pl.add_argument("--price", default="", metavar="T=USD,...",
                    help="USD per chip-hour per topology (default: the catalogue's on-demand price)")
    pl.add_argument("--seq-len", type=_positive_int, default=8192, help="sequence length (default 8192)")
    pl.add_argument("--batch-tokens", default="4M", help="tokens per step (default 4M = 4,194,304)")
    pl.add_argument("--precision", choices=("bf16", "fp8"), default="bf16")
    pl.add_argument("--framework", help="software.framework (default: the chip's)")
    pl.add_argument("--max-chips", type=_positive_int, default=16384, help="largest cluster tried")
    pl.add_argument("--plot", metavar="FILE", help="GPU vs TPU time and cost: .png, .svg or .pdf")
    pl.add_argument("--json", action="store_true", help="one JSON object, one entry per topology")
    pl.set_defaults(func=_cmd_plan)

    wi = sub.add_parser("whatif", help="replay a measured per-op trace; the straggler-free step, "
                                       "the slowdown S and who caused it")
    wi.add_argument("trace", help="trace file (.parquet: the StragglerAnalysis per-op format)")
    wi.add_argument("--meta", help="job layout YAML (dp_size, pp_size, tp_size, vpp_size, world_size); "
                                   "default: meta-NAME.yaml beside trace-NAME.parquet")
    wi.add_argument("--json", action="store_true", help="one JSON object on stdout")
    wi.add_argument("--trace-out", metavar="FILE",
                    help="Perfetto timeline of one step: measured, replayed and straggler-free side by side")
    wi.add_argument("--trace-step", type=int, metavar="STEP",
                    help="the step --trace-out shows (default: the most slowed-down step)")
    wi.add_argument("--heatmap", metavar="FILE", help="worker x step attributed slowdown: .png, .svg or .pdf")
    wi.set_defaults(func=_cmd_whatif)

    from .validate import add_parser as add_validate_parser
    add_validate_parser(sub)  # type: ignore[arg-type]

    topo = sub.add_parser("topo", help="inspect topologies")
    tsub = topo.add_subparsers(dest="topo_command", required=True, parser_class=_Parser)
    show = tsub.add_parser("show", help="chips, switches, links, bisection and diameter")
    show.add_argument("topology", help="bundled name (dgx-h100, tpu-v4, ...) or a YAML path")
    _cluster_flags(show)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=_cmd_topo_show)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("clustersim")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (the one error boundary of the program)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:                      # --help, --version, usage errors
        return int(e.code or 0) if not isinstance(e.code, str) else EXIT_INPUT
    try:
        return int(args.func(args) or 0)
    except InfeasibleError as e:
        _err(f"clustersim: infeasible: {_one_line(str(e))}")
        return EXIT_INFEASIBLE
    except SimError as e:
        _err(f"clustersim: error: {_one_line(str(e))}")
        return EXIT_INPUT
    except BrokenPipeError:
        # The reader went away (| head): stop quietly; point stdout at /dev/null so that Python's
        # own flush at exit does not raise again.
        import os

        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_PIPE
    except KeyboardInterrupt:
        _err("clustersim: interrupted")
        return 130
    except RecursionError:
        _err("clustersim: error: input nested too deeply to read")
        return EXIT_INPUT
    except Exception as e:                       # noqa: BLE001 - the boundary: a bug of ours
        if getattr(args, "debug", False):
            import traceback

            traceback.print_exc()
        _err(f"clustersim: internal error: {type(e).__name__}: {_one_line(str(e))[:300]}; this is a "
             "bug in clustersim, please report it with the command line (--debug shows the traceback)")
        return EXIT_BUG


def _err(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except (BrokenPipeError, ValueError):
        pass


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ----------------------------------------------------------------------------- commands

def _cmd_topo_show(args: argparse.Namespace) -> int:
    from .config import load_cluster
    from .topology import build_topology
    from .topology.analysis import summarize

    cluster = load_cluster(args.topology, args.chips, args.slice_, args.twisted, args.oversubscription,
                           where="topo show", slices=args.slices,
                           background_load=args.background_load, nvl_domain=args.nvl_domain)
    info = summarize(build_topology(cluster))
    print(report.dump_json(info) if args.json else report.topology_text(info))
    return 0


def _cmd_collective(args: argparse.Namespace) -> int:
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
    cluster = load_cluster(args.topology, args.chips, args.slice_, args.twisted, args.oversubscription,
                           sharp=True if args.sharp else None, where="collective",
                           slices=args.slices, background_load=args.background_load,
                           nvl_domain=args.nvl_domain)
    topo = build_topology(cluster)
    if args.group is not None and args.group < 2:
        raise ConfigError(f"--group: a collective needs at least 2 ranks, got {args.group}")
    if args.group is not None and args.group > topo.chips:
        raise ConfigError(f"--group: {args.group} ranks but the topology has {topo.chips} chips")
    group = list(range(args.group)) if args.group else None
    model = CollectiveModel(topo, nccl_version=args.nccl_version)
    tsize = DTYPE_BYTES[args.dtype]
    results = []
    size = args.min_bytes
    try:
        while size <= args.max_bytes:
            results.append(model.time(args.op, max(tsize, size - size % tsize), group, args.algo))
            size *= args.factor
    except ConfigError as e:            # the model names its fields (algo ...); the user gave flags
        if str(e).split(" ", 1)[0].rstrip(":") in ("op", "algo"):
            raise ConfigError(f"--{e}") from None
        raise
    if args.csv:
        print(report.collective_csv(results, args.dtype, tsize))
        return 0
    n = len(group) if group else topo.chips
    print(report.collective_table(results, args.op, n, topo.name, topo.spec.chip.name, args.dtype,
                                  tsize))
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    import math

    from .config import PRESETS_NAMES, parse_tokens
    from .plan import PlanRequest, plan
    from .progress import progress

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
        if not sep or not (math.isfinite(price) and 0 < price <= 10_000):
            raise ConfigError(f"--price: expected TOPOLOGY=USD_PER_CHIP_HOUR (0 < USD <= 10000), got {item!r}")
        prices[name.strip()] = price
    topologies = tuple(t.strip() for t in args.topology.split(",") if t.strip())
    if not topologies:
        raise ConfigError("--topology: give one or more topologies, e.g. dgx-h100,tpu-v5p")
    if unknown := sorted(set(prices) - set(topologies)):
        raise ConfigError(f"--price: {', '.join(unknown)} is not among --topology {args.topology}")
    req = PlanRequest(model=args.model, tokens=parse_tokens(args.tokens, "--tokens"), days=args.days,
                      topologies=topologies, prices=prices, seq_len=args.seq_len,
                      batch_tokens=_batch_tokens(args.batch_tokens), precision=args.precision,
                      max_chips=args.max_chips, framework=args.framework)
    plans = plan(req, progress=progress)
    entries = report.plan_json(plans, req)
    if plot is not None:
        from .plots import plot_plan

        plot_plan([e for e in entries.values() if "chips" in e], plot)
    print(report.dump_json(entries) if args.json
          else report.plan_text(plans, req, None if plot is None else str(plot)))
    return 0


def _batch_tokens(text: str) -> float:
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


def _cmd_sweep(args: argparse.Namespace) -> int:
    import os

    from .config import read_scenario_raw
    from .progress import progress
    from .sweep import parse_over, run_sweep
    from .training import DEFAULT_MAX_EVENTS

    if not args.over:
        raise ConfigError("--over: give at least one KEY=V1,V2,... to sweep")
    out = check_output_path(args.out, "--out", (".csv", ".parquet")) if args.out is not None else None
    plot = check_output_path(args.plot, "--plot", PLOT_SUFFIXES) if args.plot is not None else None
    raw, source, _ = read_scenario_raw(args.scenario)
    axes = [parse_over(o, raw) for o in args.over]
    workers = args.workers or os.cpu_count() or 1
    rows = run_sweep(raw, source, axes, sets=args.set, weak=args.weak, workers=workers,
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


def _cmd_whatif(args: argparse.Namespace) -> int:
    from .traces import Replay, load_trace, what_if

    trace_out = check_output_path(args.trace_out, "--trace-out") if args.trace_out else None
    heatmap = check_output_path(args.heatmap, "--heatmap", PLOT_SUFFIXES) if args.heatmap else None
    prog = load_trace(args.trace, args.meta)
    for why in prog.skipped:
        _err(f"clustersim: warning: {args.trace}: partial step skipped, not scored: {why}")
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


def _cmd_run(args: argparse.Namespace) -> int:
    from .config import load_scenario
    from .run import run
    from .training import DEFAULT_MAX_EVENTS

    if args.trace is not None:
        check_output_path(args.trace, "--trace")
    scn = load_scenario(args.scenario, args.set)
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
        print(f"simulated {args.steps} steps", file=sys.stderr)
    if args.trace:
        from .trace import write_trace

        assert result.timeline is not None
        write_trace(args.trace, result.timeline, scn.name)
    print(report.dump_json(report.step_json(result)) if args.json else report.step_text(result, args.trace))
    return 0


if __name__ == "__main__":                                     # pragma: no cover
    sys.exit(main())
