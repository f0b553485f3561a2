"""Stragglers' draws: compute jitter, persistent slow devices and degraded links (played and
attributed by ``sim.straggler_step``).

Synchronous training waits for its slowest member: a tensor-parallel collective for the slowest of
its TP group, the gradient reduction for the slowest data-parallel replica. The simulation runs
every data-parallel replica's pipeline (stages as processes) with its own draws:
- jitter: every compute segment (the kernels between two collectives) of a stage is multiplied by
  a log-normal factor exp(sigma Z) (median 1). A stage stands for its TP x CP ranks, which meet at
  every collective, so the factor drawn is the largest of m = tp x cp independent ones, sampled
  exactly from its order statistic: Z = Phi^-1(U^(1/m)).
- slow devices: a fraction of the chips, drawn once per seed, run ``slow_factor`` times slower;
  a stage whose TP x CP group holds one runs at that pace.
- degraded links: a fraction of the InfiniBand NIC links run at ``link_bandwidth_factor`` of
  their rate (a graph edit), which slows every collective routed through them.
The step ends when the slowest replica has finished (gradients are reduced across all of them);
``straggler_wait`` is how long the median replica waited for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from .config import Scenario, StragglersConfig
from .topology import Topology
from .workload.layout import Layout

__all__ = ["ReplicaDraws", "draw_slow_devices", "replica_draws", "jitter_for", "replica_jitter",
           "degrade_links"]


def draw_slow_devices(cfg: StragglersConfig, chips: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted ids of the persistently slow chips (round(fraction x chips) of them)."""
    n = int(round(cfg.slow_fraction * chips)) if cfg.slow_factor > 1 else 0
    return np.sort(rng.choice(chips, size=min(n, chips), replace=False)) if n else np.zeros(0, int)


@dataclass(frozen=True)
class ReplicaDraws:
    """What makes one data-parallel replica slow: per stage, a slowdown and its slow chips."""

    replica: int
    stage_slowdown: tuple[float, ...]
    slow_chips: tuple[int, ...]


def replica_draws(scn: Scenario, slow: np.ndarray) -> list[ReplicaDraws]:
    par, cfg = scn.parallelism, scn.stragglers
    assert cfg is not None
    lay = Layout.of(par)
    slow_set = set(int(x) for x in slow)
    out = []
    for d in range(par.dp):
        factors, chips = [], []
        for s in range(par.pp):
            members = [lay.device(t, c, d, s) for t in range(par.tp) for c in range(par.cp)]
            hit = [m for m in members if m in slow_set]
            factors.append(cfg.slow_factor if hit else 1.0)
            chips += hit
        out.append(ReplicaDraws(d, tuple(factors), tuple(chips)))
    return out


def jitter_for(draws: ReplicaDraws, sigma: float, group: int, rng: np.random.Generator,
               keep: Callable[[int, str], bool] | None = None) -> Callable[[int, int], float]:
    """The engine's jitter(rank, k) for one replica (rank = stage in replica mode). Each stage
    draws from its own stream, in the order of its compute segments, so the factors do not depend
    on how the engine interleaves stages (or batches a stage's segments).

    *keep(stage, cause)*, cause ``"jitter"`` or ``"slow_chips"``: which of the replica's straggler
    sources act (all when None); the others run at 1. The draws are the same either way, so a
    subset of the stragglers is exactly the full run's with the rest removed (attribution)."""
    streams = rng.spawn(len(draws.stage_slowdown))

    def jitter(stage: int, k: int) -> float:
        f = draws.stage_slowdown[stage]
        if keep is not None and not keep(stage, "slow_chips"):
            f = 1.0
        if sigma > 0:
            u = streams[stage].random()
            if keep is None or keep(stage, "jitter"):
                z = ndtri(u ** (1.0 / group)) if group > 1 else ndtri(u)
                f *= float(np.exp(sigma * z))
        return f
    return jitter


def replica_jitter(scn: Scenario, draws: ReplicaDraws, seed: int,
                   keep: Callable[[int, str], bool] | None = None) -> Callable[[int, int], float]:
    """``jitter_for`` of one replica of *scn* from the step's *seed*: every play of that replica
    (the step, its timeline, each attribution subset) draws the same factors."""
    cfg = scn.stragglers
    assert cfg is not None
    return jitter_for(draws, cfg.compute_jitter_sigma, scn.parallelism.tp * scn.parallelism.cp,
                      np.random.default_rng([seed, 2, draws.replica]), keep)


def degrade_links(topo: Topology, cfg: StragglersConfig, seed: int) -> Topology:
    """The topology with ``link_degrade_fraction`` of its network links (InfiniBand NIC-leaf links
    on GPU clusters, ICI links on TPU slices) at ``link_bandwidth_factor`` of their rate."""
    from .topology import NET_KINDS
    from .topology.edits import degrade_link

    if cfg.link_degrade_fraction <= 0 or cfg.link_bandwidth_factor >= 1:
        return topo
    g = topo.graph
    kinds = ("ici", "optical")
    cands = sorted(((u, v) for u, v, k in g.edges(data="kind")
                    if (k in NET_KINDS and (g.nodes[u]["kind"] == "nic" or g.nodes[v]["kind"] == "nic"))
                    or k in kinds), key=str)
    rng = np.random.default_rng([seed, 3])
    n = int(round(cfg.link_degrade_fraction * len(cands)))
    picks = rng.choice(len(cands), size=n, replace=False) if n else np.zeros(0, int)
    out = topo
    for i in sorted(int(x) for x in picks):
        u, v = cands[i]
        out = degrade_link(out, u, v, cfg.link_bandwidth_factor)
    return out
