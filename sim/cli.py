"""Command line: ``clustersim`` / ``python -m sim``. Commands and flags as in DESIGN.md.

Here: the arguments of each command, and the one error boundary (``main``). What each command
does with its arguments is ``sim.commands``.

Every expected error (bad input, impossible plan) is one line on stderr and exit 2 (input) or 3
(infeasible plan). Anything else is a bug in clustersim: one line asking for a report, exit 1,
and the traceback only with ``--debug``. A closed output pipe (``clustersim run ... | head``) ends
the command quietly, as other Unix tools do.
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from . import commands
from .errors import EXIT_INFEASIBLE, EXIT_INPUT, InfeasibleError, SimError, one_line
from .precision import PRECISIONS

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
    """The ``clustersim`` argument parser: the global flags and one sub-parser per command."""
    parser = _Parser(prog="clustersim", description="Simulate accelerator clusters training large models.")
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("--debug", action="store_true",
                        help="on an internal error, print the Python traceback")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_add_run, _add_collective, _add_sweep, _add_plan, _add_whatif, _add_validate, _add_topo,
                _add_bench):
        add(sub)
    return parser


def _add_run(sub: Any) -> None:
    run = sub.add_parser("run", help="simulate one scenario")
    run.add_argument("scenario", help="scenario YAML (path, or a name in scenarios/)")
    run.add_argument("--json", action="store_true", help="one JSON object on stdout")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a scenario field (dotted key, YAML value), e.g. "
                          "--set cluster.chips=2048 --set parallelism.tp=4; repeatable")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--kernel-tables", metavar="DIR",
                     help="fit the compute model on your own kernel tables (clustersim bench "
                          "--out DIR) instead of the bundled ones: software.kernel_tables")
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
    run.set_defaults(func=commands.cmd_run)


def _add_collective(sub: Any) -> None:
    coll = sub.add_parser("collective", help="nccl-tests-style sweep of one collective")
    coll.add_argument("--topology", required=True, help="bundled name or YAML path")
    _cluster_flags(coll)
    coll.add_argument("--sharp", action="store_true", help="InfiniBand SHARP switches (GPU fat-trees)")
    coll.add_argument("--op", required=True, help="allreduce, allgather, reducescatter, alltoall, "
                                                  "broadcast or sendrecv")
    # The names of sim.collectives.algorithms.REGISTRY (importing it here would cost every command
    # half a second; tests/test_cli.py checks the two agree).
    coll.add_argument("--algo", help="force an algorithm (ring, tree, nvls, nvls_tree, collnet, "
                                     "hierarchical, torus, pairwise, p2p, pat)")
    coll.add_argument("--group", type=_positive_int, help="ranks 0..N-1 only (default: all chips)")
    coll.add_argument("--min-bytes", type=_size, default=8, help="smallest size (default 8)")
    coll.add_argument("--max-bytes", type=_size, default=128 * 2**20, help="largest (default 128M)")
    coll.add_argument("--factor", type=_positive_int, default=2, help="size multiplier (default 2)")
    coll.add_argument("--nccl-version", type=_nccl_version, metavar="MAJOR.MINOR",
                      help="the NCCL release the calls run (e.g. 2.18: no PAT, no tuner plugins); "
                           "default: a current one")
    coll.add_argument("--dtype", default="float", help="element type (default float)")
    coll.add_argument("--csv", action="store_true", help="CSV with nccl-tests' columns")
    coll.add_argument("--gpus-per-node", type=_positive_int, metavar="N",
                      help="GPUs used on each node (nccl-tests with 1, 2 or 4 GPUs on 8-GPU nodes), "
                           "each with its own NICs; the same as --nvl-domain N")
    coll.add_argument("--compare", metavar="LOG",
                      help="an nccl-tests output (its *_perf stdout as printed) to set the "
                           "prediction against, size by size, with the error per regime")
    coll.set_defaults(func=commands.cmd_collective)


def _add_sweep(sub: Any) -> None:
    sw = sub.add_parser("sweep", help="a scenario over the cartesian product of swept keys")
    sw.add_argument("scenario", help="base scenario YAML (path, or a name in scenarios/)")
    sw.add_argument("--over", action="append", default=[], metavar="KEY=V1,V2,...",
                    help="a swept key: KEY=V1,V2,... or KEY=A..BxF (geometric) or KEY=A..B+S; "
                         "repeat for a cartesian product (e.g. --over cluster.chips=64..8192x2)")
    sw.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a base scenario field, as for run")
    sw.add_argument("--kernel-tables", metavar="DIR",
                    help="fit the compute model on your own kernel tables (clustersim bench "
                         "--out DIR) instead of the bundled ones: software.kernel_tables")
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
    sw.set_defaults(func=commands.cmd_sweep)


def _add_plan(sub: Any) -> None:
    pl = sub.add_parser("plan", help="smallest and cheapest cluster that trains N tokens in D days")
    pl.add_argument("--model", required=True, help="model preset (llama3-8b, llama3-70b, ...)")
    pl.add_argument("--tokens", required=True, help="token budget, e.g. 15T, 300B, 2.5e12")
    pl.add_argument("--days", required=True, type=float, help="deadline in days")
    pl.add_argument("--topology", required=True, help="comma-separated topologies, e.g. dgx-h100,tpu-v5p")
    pl.add_argument("--price", default="", metavar="T=USD,...",
                    help="USD per chip-hour per topology (default: the catalogue's on-demand price)")
    pl.add_argument("--seq-len", type=_positive_int, default=8192, help="sequence length (default 8192)")
    pl.add_argument("--batch-tokens", default="4M", help="tokens per step (default 4M = 4,194,304)")
    pl.add_argument("--precision", choices=PRECISIONS, default="bf16")
    pl.add_argument("--framework", help="software.framework (default: the chip's)")
    pl.add_argument("--kernel-tables", metavar="DIR",
                    help="your own kernel tables (clustersim bench --out DIR) for the plan's GPU "
                         "topologies, which must all run that GPU")
    pl.add_argument("--max-chips", type=_positive_int, default=16384, help="largest cluster tried")
    pl.add_argument("--recovery", choices=("restart", "hot_spare", "replica", "in_memory_checkpoint"),
                    default="restart", help="failures.recovery the time to train assumes (default "
                    "restart); every strategy a layout can use is compared in the report")
    pl.add_argument("--plot", metavar="FILE", help="GPU vs TPU time and cost: .png, .svg or .pdf")
    pl.add_argument("--json", action="store_true", help="one JSON object, one entry per topology")
    pl.add_argument("--yes", action="store_true",
                    help="run a search estimated to take over 10 minutes (refused otherwise)")
    pl.set_defaults(func=commands.cmd_plan)


def _add_whatif(sub: Any) -> None:
    wi = sub.add_parser("whatif", help="replay a measured per-op trace; the straggler-free step, "
                                       "the slowdown S and who caused it")
    wi.add_argument("trace", help="trace: .parquet (the StragglerAnalysis per-op format), or PyTorch profiler "
                                  "(Kineto) JSON: a folder with one .json/.json.gz per rank, or one rank's file")
    wi.add_argument("--meta", help="job layout YAML (dp_size, pp_size, tp_size, vpp_size, world_size); "
                                   "default: meta-NAME.yaml beside trace-NAME.parquet; Kineto traces: "
                                   "pure data parallel over the ranks read")
    wi.add_argument("--json", action="store_true", help="one JSON object on stdout")
    wi.add_argument("--trace-out", metavar="FILE",
                    help="Perfetto timeline of one step: measured, replayed and straggler-free side by side")
    wi.add_argument("--trace-step", type=int, metavar="STEP",
                    help="the step --trace-out shows (default: the most slowed-down step)")
    wi.add_argument("--heatmap", metavar="FILE", help="worker x step attributed slowdown: .png, .svg or .pdf")
    wi.set_defaults(func=commands.cmd_whatif)


def _add_validate(sub: Any) -> None:
    from .validate import add_parser as add_validate_parser
    add_validate_parser(sub)  # type: ignore[arg-type]


def _add_topo(sub: Any) -> None:
    topo = sub.add_parser("topo", help="inspect topologies")
    tsub = topo.add_subparsers(dest="topo_command", required=True, parser_class=_Parser)
    show = tsub.add_parser("show", help="chips, switches, links, bisection and diameter")
    show.add_argument("topology", help="bundled name (dgx-h100, tpu-v4, ...) or a YAML path")
    _cluster_flags(show)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=commands.cmd_topo_show)


def _add_bench(sub: Any) -> None:
    be = sub.add_parser("bench", help="measure this GPU's kernel tables (needs PyTorch: "
                                      "pip install 'clustersim[bench]')")
    be.add_argument("--out", required=True, metavar="DIR",
                    help="folder for the tables (validation/compute/<gpu>/'s files) and env.json")
    be.add_argument("--quick", action="store_true", help="a smaller set (about 1 minute on an H100)")
    be.add_argument("--only", metavar="GROUP,...",
                    help="only these groups: gemm, fp8, attention, memory, optimizer, moe, nccl")
    be.add_argument("--device", type=int, default=0, metavar="N", help="CUDA GPU index (default 0)")
    be.add_argument("--yes", action="store_true",
                    help="run a set estimated to take over 15 minutes (refused otherwise)")
    be.set_defaults(func=commands.cmd_bench)


class _VersionAction(argparse.Action):
    """``--version``: argparse's version action, the version looked up when asked for (PERF:
    importlib.metadata costs every command ~15 ms of imports, benchmarks/release.py)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS,
                 help: str = "show program's version number and exit") -> None:  # noqa: A002
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0,
                         help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser._print_message(f"clustersim {_version()}\n", sys.stdout)  # noqa: SLF001
        parser.exit()


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
        commands.warn(f"clustersim: infeasible: {one_line(str(e))}")
        return EXIT_INFEASIBLE
    except SimError as e:
        commands.warn(f"clustersim: error: {one_line(str(e))}")
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
        commands.warn("clustersim: interrupted")
        return 130
    except RecursionError:
        commands.warn("clustersim: error: input nested too deeply to read")
        return EXIT_INPUT
    except Exception as e:                       # noqa: BLE001 - the boundary: a bug of ours
        if getattr(args, "debug", False):
            import traceback

            traceback.print_exc()
        commands.warn(f"clustersim: internal error: {type(e).__name__}: {one_line(str(e))[:300]}; this is a "
             "bug in clustersim, please report it with the command line (--debug shows the traceback)")
        return EXIT_BUG


def entry() -> NoReturn:
    """The ``clustersim`` console script and ``python -m sim``: ``main``, then exit with its status.

    PERF: before the interpreter shuts down, every object the run made is moved out of the
    collector's reach (``gc.freeze``), so its last collection does not walk them all (0.045 ->
    0.011 s of a 0.4 s ``run``, benchmarks/release.py). Shutdown is otherwise the usual one: exit
    handlers run, modules are torn down and open files flushed and closed."""
    status = main()
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":                                     # pragma: no cover
    entry()
