"""A floor under each pipeline stage's passes, for the plan screen's pipeline fill and drain
(``sim.engine.step_floor``'s *passes*): what a stage's forward and backward of one chunk take at
least, from their kernels alone, whatever their collectives, transfers and waits add."""

from __future__ import annotations

from typing import Any

from .stages import StackEfficiency, compute_model
from .workload.transformer import Item, Op, Workload

__all__ = ["pass_floors"]

# PERF: a plan's layouts share their (interned) layers: each layer's kernels per compute model
# once, keyed by identity, each entry holding what it was worked out for.
_KERNELS: dict[tuple[int, int], tuple[Any, ...]] = {}
_KERNELS_MAX = 8192


def pass_floors(wl: Workload, stack_efficiency: StackEfficiency | None = None
                ) -> tuple[tuple[float, float], ...]:
    """Per stage, a floor under any one forward and any one backward step of its chunks in
    ``plan_stages``' plans: its fewest layers in a chunk times its mean layer's kernels alone
    (each kind's ops as one stretch on the stream: a pass splits them around its collectives
    into stretches that take no less, and its transfers, offload and waits only add). The plan
    screen's pipeline fill and drain (``sim.engine.step_floor``'s *passes*)."""
    par = wl.scenario.parallelism
    cm = compute_model(wl.scenario, stack_efficiency)

    def ops(items: tuple[Item, ...]) -> list[Op]:
        return [i for i in items if isinstance(i, Op)]

    def mean_layer(stage: int) -> tuple[float, float]:
        f = b = 0.0
        for layer, weight in wl.stage_mix(stage):
            key = (id(layer), id(cm))
            hit = _KERNELS.get(key)
            if hit is None or hit[0] is not layer or hit[1] is not cm:
                if len(_KERNELS) >= _KERNELS_MAX:
                    _KERNELS.clear()
                hit = _KERNELS[key] = (layer, cm, cm.stream_time_s(ops(layer.forward)),
                                       cm.stream_time_s(ops(layer.recompute + layer.backward)))
            lw = hit[2:]
            f += weight * lw[0]
            b += weight * lw[1]
        return f, b
    if len(wl.kinds) == 1 and wl.mtp_kind is None and not par.uneven:
        f, b = mean_layer(par.pp - 1)           # every stage's: one kind, as many layers
        return ((wl.layers_per_chunk * f, wl.layers_per_chunk * b),) * par.pp
    out = []
    for stage in range(par.pp):
        f, b = mean_layer(stage)
        fewest = min(par.stage_chunk_layers(stage)) if par.uneven else wl.layers_per_chunk
        out.append((fewest * f, fewest * b))
    return tuple(out)
