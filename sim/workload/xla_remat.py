"""XLA's own rematerialization: a program over the chip's memory is recomputed until it fits.

XLA compiles a step against the device's memory. When the values a step keeps for its backward do
not fit, its HLO rematerialization pass (``xla/service/hlo_rematerialization.cc``, run by the TPU
and GPU compilers with the device's memory as the limit) recomputes some of them in the backward
instead of keeping them, cheapest per byte first, and the program runs, slower. A MaxText run
whose remat policy keeps more than fits therefore runs; it is not refused (the JAX/MaxText stacks,
``SoftwareProfile.runs_on_tpu``).

``xla_fit`` models that pass on the per-tensor policy of ``sim.config.remat``: the policy the
scenario names (a ``training.remat_policy``, or the one ``training.recompute`` means on that
stack: ``selective`` is its ``minimal_flash`` recipe, ``none`` keeps every named tensor) with its
kept tensors turned to ``remat`` one at a time until the estimate fits, as the pass chooses:
each round the tensor whose recomputation adds the fewest FLOPs among those that make the step
fit, else the one that frees the most bytes per FLOP it adds. The step then pays each recomputed
GEMM (``sim.workload.transformer``'s per-tensor recompute). Whole tensors of every layer: the
scan keeps each as one stacked buffer, so no finer choice is modelled (an upper bound on the
recomputation where less would fit).
Where even every tensor recomputed does not fit, the scenario is refused as before.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

from ..config.remat import REMAT_PRESETS, REMAT_TENSORS, XLA_REMAT_TAG, RematPolicy
from ..config.schema import Scenario
from .memory import MemoryBreakdown, memory_per_chip
from .transformer import Workload, build_workload

__all__ = ["XLA_REMAT_CANDIDATES", "xla_fit", "xla_refits"]

# The tensors XLA may recompute (every per-tensor name but the scan's checkpoint, the layer input).
XLA_REMAT_CANDIDATES = tuple(t for t in REMAT_TENSORS if t != "decoder_layer_input")


def _policy_of(scn: Scenario) -> RematPolicy | None:
    """The scenario's kept set as a per-tensor policy (None where nothing is left to recompute)."""
    tr = scn.training
    if tr.remat_policy:
        return tr.remat_policy
    if tr.recompute == "full" or tr.recompute_modules:
        return None
    if tr.recompute == "selective":
        if scn.software.selective_recompute != "minimal_flash":
            return None
        kept: tuple[str, ...] = REMAT_PRESETS["minimal_flash"][0]
    else:
        kept = REMAT_TENSORS
    return tuple((t, "device" if t in kept or t == "decoder_layer_input" else "remat")
                 for t in REMAT_TENSORS)


class _Trial(NamedTuple):
    """*scn* with one more tensor recomputed: its workload, memory and recomputed FLOPs."""

    scn: Scenario
    wl: Workload
    mem: MemoryBreakdown
    flops: float


def _trial(scn: Scenario, loc: dict[str, str], name: str) -> _Trial:
    """*scn* under the per-tensor locations *loc*, its policy named *name*."""
    training = replace(scn.training, remat_policy=tuple((t, loc[t]) for t in REMAT_TENSORS),
                       remat_policy_name=name)
    fitted = replace(scn, training=training)
    wl = build_workload(fitted)
    return _Trial(fitted, wl, memory_per_chip(wl), _recompute_flops(wl))


def xla_refits(scn: Scenario, mem: MemoryBreakdown) -> bool:
    """Whether ``xla_fit`` changes the scenario: its estimate *mem* is over the chip's memory on
    XLA's stack, and recomputing every candidate tensor it keeps would fit."""
    return _start(scn, mem) is not None


def _start(scn: Scenario, mem: MemoryBreakdown) -> dict[str, str] | None:
    """The per-tensor locations XLA's pass starts from where it makes *scn* fit, else None."""
    if mem.total_B <= scn.cluster.chip.usable_hbm_bytes or not scn.software.runs_on_tpu:
        return None
    # PERF: the plan screen asks ``xla_refits`` and, for a layout it times, ``xla_fit`` of the same
    # scenario: its all-candidates trial is run once (the entry holds both objects, so a reused
    # id cannot hit; a copy is handed out, as xla_fit changes it)
    hit = _STARTS.get(id(scn))
    if hit is not None and hit[0] is scn and hit[1] is mem:
        return None if hit[2] is None else dict(hit[2])
    loc = _fresh_start(scn)
    if len(_STARTS) >= 4096:
        _STARTS.clear()
    _STARTS[id(scn)] = (scn, mem, loc)
    return None if loc is None else dict(loc)


_STARTS: dict[int, tuple[Scenario, MemoryBreakdown, dict[str, str] | None]] = {}


def _fresh_start(scn: Scenario) -> dict[str, str] | None:
    """``_start`` of a scenario over the chip's memory on XLA's stack, worked out."""
    policy = _policy_of(scn)
    if policy is None:
        return None
    loc = dict(policy)
    base = scn.training.remat_policy_name or f"recompute {scn.training.recompute}"
    kept = [t for t in XLA_REMAT_CANDIDATES if loc.get(t) == "device"]
    if not kept or (_trial(scn, {**loc, **dict.fromkeys(kept, "remat")}, base).mem.total_B
                    > scn.cluster.chip.usable_hbm_bytes):
        return None                                  # nothing XLA recomputes makes it fit
    return loc


def xla_fit(scn: Scenario, wl: Workload, mem: MemoryBreakdown
            ) -> tuple[Scenario, Workload, MemoryBreakdown]:
    """(*scn*, *wl*, *mem*) unchanged where the estimate fits the chip's memory, the stack is not
    XLA's, or even every candidate tensor recomputed does not fit; else the scenario XLA's pass
    would run (module docstring), its policy named ``<name> + XLA remat: <tensors>``."""
    loc = _start(scn, mem)
    if loc is None:
        return scn, wl, mem
    cap = scn.cluster.chip.usable_hbm_bytes
    base = scn.training.remat_policy_name or f"recompute {scn.training.recompute}"
    dropped: list[str] = []
    current = _Trial(scn, wl, mem, _recompute_flops(wl))
    while True:
        trials = {t: _trial(scn, {**loc, t: "remat"}, base + XLA_REMAT_TAG + ", ".join([*dropped, t]))
                  for t in XLA_REMAT_CANDIDATES if loc.get(t) == "device"}
        fits = [t for t, x in trials.items() if x.mem.total_B <= cap]
        if fits:
            best = min(fits, key=lambda t: (trials[t].flops, t))
            return trials[best].scn, trials[best].wl, trials[best].mem
        best = max(trials, key=lambda t: ((current.mem.total_B - trials[t].mem.total_B)
                                          / max(trials[t].flops - current.flops, 1.0), t))
        loc[best] = "remat"
        dropped.append(best)
        current = trials[best]


def _recompute_flops(wl: Workload) -> float:
    """FLOPs a step's backward repeats per micro-batch: every layer's recomputed work."""
    # PERF: the trials of a plan's layouts share their (interned) layers and the model's stack
    key = (tuple(map(id, wl.kinds)), id(wl.layer_kinds))
    hit = _FLOPS.get(key)
    if hit is not None and hit[0] == wl.kinds and hit[1] is wl.layer_kinds:
        return hit[2]
    per_kind = [sum(getattr(o, "flops", 0.0) for o in k.recompute) for k in wl.kinds]
    flops = float(sum(per_kind[i] for i in wl.layer_kinds))
    if len(_FLOPS) >= 4096:
        _FLOPS.clear()
    _FLOPS[key] = (wl.kinds, wl.layer_kinds, flops)
    return flops


_FLOPS: dict[tuple[tuple[int, ...], int], tuple[Any, Any, float]] = {}
