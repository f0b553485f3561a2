"""What a ``CollectiveModel`` keeps of the phases it has played: each plain phase's routed flows
(by their endpoints) and one step's makespan (by its flows: endpoints and bytes).

PERF: a TPU torus collective plays D x D phases whose flows run over D axes' links (one routing
per axis, not per phase), and its reduce-scatter plays the very phases of its all-gather in the
reverse order, as a ring's does; the plan search solves both for every group of every layout
(benchmarks/test_bench_plan.py, tpu-v5p: ~0.4 s of 866 solves before). A hit returns what the same
flows gave before (routing and ``play_flows`` are pure functions of the flows and the model's
links), so every time summed from it is the same number.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..network.fluid import FlowSet, play_flows
from .stages import Phase

__all__ = ["PhaseCache"]

_MAX = 20_000                      # entries of each table (a plan's size needs a few hundred)


def _key(*arrays: np.ndarray) -> tuple[Any, ...]:
    """The arrays' contents, dtype and all (equal keys: equal arrays)."""
    return tuple(x for a in arrays for x in (a.dtype.str, a.shape, a.tobytes()))


class PhaseCache:
    """Routed flows by their endpoints and makespans by flows, for plain phases: flows between
    devices alone (no switch, pseudo-endpoint or all-to-all flows)."""

    def __init__(self) -> None:
        self._flows: dict[tuple[Any, ...], FlowSet] = {}
        self._makespans: dict[tuple[Any, ...], float] = {}

    @staticmethod
    def plain(phase: Phase) -> bool:
        return (phase.to_switch is None and phase.from_switch is None and not phase.extra
                and not phase.uniform)

    def flowset(self, phase: Phase, build: Callable[[Phase], FlowSet]) -> FlowSet:
        """``build(phase)``: its flows routed. A plain phase's routes are built once per flow
        endpoints (src, dst) and handed its own bytes (``FlowSet.with_bytes``): its flows are
        the pairs alone, so routing reads nothing else."""
        if not self.plain(phase):
            return build(phase)
        key = _key(phase.src, phase.dst)
        hit = self._flows.get(key)
        if hit is None:
            hit = build(phase)
            if len(self._flows) >= _MAX:
                self._flows.clear()
            self._flows[key] = hit
            return hit
        return hit.with_bytes(phase.nbytes)      # a plain phase's bytes: its flows' alone

    def makespan(self, phase: Phase, flowset: Callable[[Phase], FlowSet], capacity_Bps: np.ndarray
                 ) -> float:
        """One step's makespan on the fluid model (``play_flows`` of ``flowset(phase)``), once
        per flows where the phase is plain."""
        if not self.plain(phase):
            return play_flows(flowset(phase), capacity_Bps)[0]
        key = _key(phase.src, phase.dst, phase.nbytes)
        hit = self._makespans.get(key)
        if hit is None:
            hit = play_flows(flowset(phase), capacity_Bps)[0]
            if len(self._makespans) >= _MAX:
                self._makespans.clear()
            self._makespans[key] = hit
        return hit
