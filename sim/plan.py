"""``clustersim plan``: the smallest and the cheapest cluster (and layout) that trains N tokens in
D days, per topology, GPU and TPU side by side.

For each topology and each cluster size (powers of two from one node / one cube up), it lists
the parallel layouts (tp, pp, virtual stages, ZeRO stage, micro-batch, recompute) that divide the
model and fit in memory, times each with the screening path (``sim.engine.fast_step``: the
engine's step as a longest path over the schedule, equal to the simpy engine wherever no
straggler breaks symmetry; tests/test_engine.py), confirms the best with the simpy engine, and
folds in goodput from the failure model (Monte Carlo over the horizon). Time to train = tokens /
(tokens/s x goodput); cost = chip-hours x price; energy = chip-hours x TDP x PUE (sim.cost).
A topology whose chip has no price (and no ``--price``) gets its smallest cluster and every size's
time, chip-hours and energy, no cost and no cheapest pick; the report says it has no price.

Every layout that divides and fits is screened (``sim.screen``): a floor under its step is taken
from its last stage's plan alone, without its transfers, with the pipeline's fill and drain
(``sim.engine.step_floor``); layouts are timed in the order of their floors until a floor lies
above the fourth-best step, so the pick and its runners-up are those of timing every layout
(tests/test_plan.py checks it), in a fraction of the time.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from .config import data_parallel, load_topology_spec, scenario_from_dict
from .errors import ConfigError
from .screen import RANKED
from .topology_spec import GpuClusterSpec

__all__ = ["PlanRequest", "Candidate", "TopologyPlan", "plan", "layouts", "RANKED"]

_PROBE_LAYOUT = {"tp": 1, "pp": 1, "zero": 1, "micro_batch": 1, "recompute": "full",
                 "schedule": "1f1b", "virtual_stages": 1}
GOODPUT_RUNS = 20                  # Monte Carlo histories per finalist (the 5-95% band is +-1%)


@dataclass(frozen=True)
class PlanRequest:
    model: str | Mapping[str, Any]
    tokens: float
    days: float
    topologies: tuple[str, ...]
    prices: Mapping[str, float] = field(default_factory=dict)
    seq_len: int = 8192
    batch_tokens: float = 4 * 2**20        # tokens per step (Llama 3 70B: 4M-16M)
    precision: str = "bf16"
    max_chips: int = 16384
    framework: str | None = None
    recovery: str = "restart"              # the strategy the time to train assumes
    kernel_tables: str = ""                # the user's kernel tables for the GPU topologies

    @property
    def global_batch(self) -> int:
        """Sequences per step asked for (``batch_tokens`` over ``seq_len``, at least one)."""
        return max(1, round(self.batch_tokens / self.seq_len))


@dataclass(frozen=True)
class Candidate:
    chips: int
    layout: dict[str, Any]
    step_time_s: float
    tokens_per_s: float
    mfu: float
    memory_GiB: float
    goodput: float = 1.0
    days: float = math.inf
    chip_hours: float = math.inf
    cost_usd: float | None = math.inf     # None: the topology has no price
    energy_MWh: float | None = None
    goodput_by_recovery: dict[str, float] = field(default_factory=dict)  # those the layout can use
    breakdown_s: dict[str, float] = field(default_factory=dict)   # the confirmed step's, by part


@dataclass
class TopologyPlan:
    topology: str
    chip: str
    usd_per_chip_hour: float | None       # None: no price (``price_source`` says so)
    price_source: str
    days_limit: float
    by_size: dict[int, list[Candidate]] = field(default_factory=dict)   # timed, best first (the first RANKED exact)
    best: dict[int, Candidate] = field(default_factory=dict)            # confirmed, goodput in
    refused: dict[int, str] = field(default_factory=dict)               # sizes with no layout
    layouts_screened: int = 0

    def meeting(self) -> list[Candidate]:
        """The confirmed sizes that train the budget within the deadline, smallest first."""
        return sorted((c for c in self.best.values() if c.days <= self.days_limit),
                      key=lambda c: c.chips)

    @property
    def smallest(self) -> Candidate | None:
        ok = self.meeting()
        return ok[0] if ok else None

    @property
    def cheapest(self) -> Candidate | None:
        """The cheapest size meeting the deadline; None without a price (nothing to rank by)."""
        ok = [c for c in self.meeting() if c.cost_usd is not None]
        return min(ok, key=lambda c: (float(f"{c.cost_usd:.9g}"), c.chips)) if ok else None

    @property
    def closest(self) -> Candidate | None:
        return min(self.best.values(), key=lambda c: c.days) if self.best else None


# What screening costs on a 2-core machine (the plan row of benchmarks/release.py searched in one
# process, 2026-11-28: 7,372 layouts tried in 2.9 s, 144 of them timed in full, their 28,234
# pipeline steps played by ``fast_step`` at ~1.1 us each): per layout (its scenario, workload,
# memory, XLA's remat trials, the floor's stage plan, and its share of each size's graph,
# timings and confirmation), and per pipeline step of the layouts the floor lets through, taken
# as ``SCREEN_TIMED`` a size (4 to 17 there) of its layouts' mean steps.
# benchmarks/test_bench_estimate.py holds the estimate to the measured plan (1/1.5 to 4x).
SCREEN_LAYOUT_S = 3.9e-4
SCREEN_STEP_S = 1.1e-6
SCREEN_TIMED = 16
# A plan estimated to screen longer than this is refused (``plan --yes`` runs it anyway).
MAX_SCREEN_S = 600.0


def screen_estimate(req: PlanRequest) -> tuple[int, float]:
    """(layouts, seconds) the search of *req* screens at most: every layout of every size (the
    search may stop growing the cluster earlier), each one's workload, and the pipeline steps of
    those a size times in full (``SCREEN_TIMED`` of its mean layout)."""
    n, seconds = 0, 0.0
    for topology in req.topologies:
        sizes, probe, size_layouts = _search_space(req, topology)
        for chips in sizes:
            steps = []
            for lay in size_layouts(chips):
                dp = data_parallel(chips, lay["tp"], lay["pp"], cp=1)
                micro = lay["global_batch"] // (lay["micro_batch"] * dp)
                steps.append(2 * lay["pp"] * lay["virtual_stages"] * micro)
            n += len(steps)
            seconds += SCREEN_LAYOUT_S * len(steps)
            if steps:
                seconds += SCREEN_STEP_S * min(SCREEN_TIMED, len(steps)) * sum(steps) / len(steps)
    return n, seconds


def _search_space(req: PlanRequest, topology: str
                  ) -> tuple[list[int], Any, Callable[[int], Iterable[dict[str, Any]]]]:
    """What the search of *topology* tries: the cluster sizes, the probe scenario (the chip,
    price and model it names) and the layouts of a size."""
    spec = load_topology_spec(topology, "--topology")
    sizes = _sizes(spec, req.max_chips)
    if not sizes:
        raise ConfigError(f"--max-chips: {req.max_chips} is below the smallest {topology} cluster")
    gpu = not spec.chip.is_tpu
    probe = scenario_from_dict(_scenario(req, topology, sizes[0], _PROBE_LAYOUT, req.global_batch, gpu),
                               "plan")
    m = probe.model

    def size_layouts(chips: int) -> Iterable[dict[str, Any]]:
        return layouts(chips, m.layers, m.heads, gpu, getattr(spec, "gpus_per_node", 8),
                       req.global_batch)
    return sizes, probe, size_layouts


def _sizes(spec: Any, max_chips: int) -> list[int]:
    """Cluster sizes to try: powers of two from one node (GPU) or the smallest slice (TPU)."""
    out = []
    n = spec.gpus_per_node if isinstance(spec, GpuClusterSpec) else 4
    while n <= max_chips:
        try:
            if isinstance(spec, GpuClusterSpec):
                spec.resolve_chips(n, "plan")
            else:
                spec.resolve_shape(n, None, "plan")
            out.append(n)
        except ConfigError:
            pass
        n *= 2
    return out


def layouts(chips: int, layers: int, heads: int, gpu: bool, gpus_per_node: int,
            global_batch: int) -> Iterable[dict[str, Any]]:
    """Parallel layouts worth trying on *chips*: TP inside a node (GPU) or up to 16 (TPU),
    pipelines that divide the layers (interleaved where the micro-batches allow), ZeRO 1 or 3,
    micro-batch 1 or 2, selective or full recompute. Every one that divides is yielded (no
    pruning); the search stops growing the cluster once, past the deadline, the cost has risen
    two sizes in a row."""
    tps = [t for t in (1, 2, 4, 8, 16) if (t <= gpus_per_node if gpu else True) and heads % t == 0]
    for tp, pp in itertools.product(tps, (1, 2, 4, 8, 16)):
        if chips % (tp * pp) or layers % pp:
            continue
        dp = data_parallel(chips, tp, pp, cp=1)
        vss = [1] + [v for v in (2, 4, 5) if pp > 1 and layers % (pp * v) == 0]
        for vs, zero, mb, rc in itertools.product(vss, (1, 3), (1, 2), ("selective", "full")):
            if mb * dp > global_batch:
                continue                  # fewer sequences than replicas
            # A data-parallel width the batch does not divide (9 replicas of an NVL72 rack)
            # takes the nearest batch it divides: the step's tokens move by less than 1/(2 micro).
            batch = round(global_batch / (mb * dp)) * mb * dp
            micro = batch // (mb * dp)
            if vs > 1 and micro % pp:
                continue                  # Megatron's interleaved schedule needs whole groups
            yield {"tp": tp, "pp": pp, "zero": zero, "micro_batch": mb, "recompute": rc,
                   "schedule": "interleaved" if vs > 1 else "1f1b", "virtual_stages": vs,
                   "global_batch": batch}


def _scenario(req: PlanRequest, topology: str, chips: int, lay: Mapping[str, Any],
              global_batch: int, gpu: bool) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": f"plan-{topology}-{chips}", "cluster": {"topology": topology, "chips": chips},
        "model": req.model, "training": {"seq_len": req.seq_len,
                                         "global_batch": lay.get("global_batch", global_batch),
                                         "micro_batch": lay["micro_batch"],
                                         "precision": req.precision, "recompute": lay["recompute"]},
        "parallelism": {k: lay[k] for k in ("tp", "pp", "zero", "schedule", "virtual_stages")}}
    if topology in req.prices:
        raw["cost"] = {"usd_per_chip_hour": req.prices[topology]}
    if req.framework is not None:
        raw["software"] = {"framework": req.framework}
    if req.kernel_tables and gpu:                  # the user's tables fit their GPU, not a TPU
        raw.setdefault("software", {})["kernel_tables"] = req.kernel_tables
    return raw


def plan(req: PlanRequest,
         progress: Callable[[Iterable[Any], int, str], Iterable[Any]] | None = None,
         workers: int = 1) -> list[TopologyPlan]:
    """Search every topology of *req* (see the module docstring). With *workers* > 1 and several
    topologies, each topology's search runs in its own process (they share nothing; the plans
    are the same as one process makes, in *req*'s order)."""
    if req.tokens <= 0 or req.days <= 0:
        raise ConfigError("plan: --tokens and --days must be > 0")
    if workers > 1 and len(req.topologies) > 1:
        from .parallel import ordered_map

        return ordered_map(partial(_plan_topology, req), req.topologies, workers,
                           "plan (topologies)", progress)
    return [_plan_topology(req, t, progress) for t in req.topologies]


def _plan_topology(req: PlanRequest, topology: str,
                   progress: Callable[[Iterable[Any], int, str], Iterable[Any]] | None = None
                   ) -> TopologyPlan:
    """The search of one topology: its sizes from the smallest up, every layout screened."""
    from .cost import energy_MWh, time_to_train
    from .run import run
    from .screen import ranked, screen_size

    track = progress or (lambda it, n, d: it)
    global_batch = req.global_batch
    sizes, probe, size_layouts = _search_space(req, topology)
    chip = probe.cluster.chip
    gpu = not chip.is_tpu
    tp_plan = _topology_plan(req, topology, probe)
    price = tp_plan.usd_per_chip_hour
    for chips in track(sizes, len(sizes), f"plan {topology}"):
        screened, reasons, topo, net = screen_size(
            size_layouts(chips), partial(_scenario, req, topology, chips, global_batch=global_batch, gpu=gpu))
        tp_plan.layouts_screened += len(screened)
        if not screened:
            tp_plan.refused[chips] = _why_none(reasons)
            continue
        cands = [Candidate(chips, dict(t.layout), t.step_s, t.wl.tokens_per_step / t.step_s,
                           t.wl.model_flops_per_step / (t.step_s * chips * chip.bf16_flops),
                           t.mem.total_B / 2**30) for t in ranked(screened, net)]
        tp_plan.by_size[chips] = cands
        best = cands[0]
        # Confirm with the simpy engine (the screening path equals it without stragglers).
        scn = scenario_from_dict(_scenario(req, topology, chips, best.layout, global_batch, gpu),
                                 "plan")
        step = run(scn, topo=topo, net=net).step
        by_recovery = _goodput_by_recovery(req, scn, step.step_time_s, topology)
        goodput = by_recovery[req.recovery]
        train = time_to_train(req.tokens, step.tokens_per_s, goodput)
        chip_hours = chips * train.seconds / 3600
        tp_plan.best[chips] = Candidate(chips, best.layout, step.step_time_s, step.tokens_per_s,
                                        step.mfu, best.memory_GiB, goodput, train.days,
                                        chip_hours, None if price is None else chip_hours * price,
                                        energy_MWh(chip, chip_hours), by_recovery,
                                        dict(step.breakdown_s))
        met = [_spend(c) for c in tp_plan.meeting()]
        if len(met) >= 3 and met[-1] > met[-2] > met[-3]:
            break            # cost rose twice in a row past the deadline: larger costs more
    return tp_plan


def _goodput_by_recovery(req: PlanRequest, scn: Any, step_s: float, topology: str) -> dict[str, float]:
    """Goodput over the deadline under every recovery strategy the layout can use (replica
    recovery needs replicas that each hold the whole state); the requested one must be among
    them."""
    from .config import FailuresConfig
    from .goodput import scenario_failures
    from .recovery import RECOVERIES

    out = {}
    for strategy in RECOVERIES:
        try:
            fails = scenario_failures(scn, step_s, 0, FailuresConfig(horizon_days=req.days,
                                                                     recovery=strategy),
                                      runs=GOODPUT_RUNS)
        except ConfigError:            # a strategy this layout cannot use
            continue
        out[strategy] = fails.goodput()[0]
    if req.recovery not in out:
        raise ConfigError(f"--recovery: {req.recovery} cannot run on {topology}'s layouts "
                          f"({scn.cluster.chips} chips); valid there: {', '.join(out)}")
    return out


def _topology_plan(req: PlanRequest, topology: str, probe: Any) -> TopologyPlan:
    """An empty plan for *topology* with the price its probe scenario resolved (``--price``, else
    the catalogue's, else none, which the plan's source then says)."""
    from .cost import no_price_note

    chip, price = probe.cluster.chip, probe.cost.usd_per_chip_hour
    source = ("--price" if topology in req.prices else chip.price_source if price is not None
              else no_price_note(chip, f"give --price {topology}=USD"))
    return TopologyPlan(topology, chip.name, price, source, req.days)


def _spend(c: Candidate) -> float:
    """What a size spends: its cost, or without a price its chip-hours (cost / price)."""
    return c.cost_usd if c.cost_usd is not None else c.chip_hours


def _why_none(reasons: Sequence[str]) -> str:
    if not reasons:
        return "no layout divides the model and the batch"
    oom = [r for r in reasons if "GiB per chip" in r]
    return ("no layout fits in memory (best: " + min(oom, key=len).split(": ", 1)[-1][:120] + ")"
            if oom else reasons[0][:160])
