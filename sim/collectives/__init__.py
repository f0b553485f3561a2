"""How long a collective takes on a topology: algorithm choice, flows on the graph, NCCL latencies.

``CollectiveModel(topo)`` holds the link table and router of one topology and answers
``time(op, size_bytes, group=None, algo=None)`` with a ``CollectiveResult``. Bandwidth comes from
the flow model (max-min fair sharing of the routed flows of the algorithm's steps; identical steps
are solved once, and the per-byte cost of each algorithm is cached, so a size sweep costs one
solve per algorithm). Latency is NCCL's tuning model for GPUs and the per-hop ICI latency for TPU
tori. Which algorithms and protocols a call may use and the pick among them (the smallest cost
by NCCL's own model, as NCCL's tuner picks; on TPU slices the smallest predicted time) are the
tuner's, in ``sim.collectives.nccl``; this module predicts each candidate's time and that cost.
Each algorithm is one record of ``sim.collectives.algorithms.REGISTRY`` (its applicability,
phases and NCCL cost model).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..calibration import LINK_EFFICIENCY
from ..errors import ConfigError
from ..network.fluid import FlowSet
from ..network.links import LinkTable
from ..network.routing import make_router
from ..topology import Topology
from . import nccl
from .algorithm import Call, Wires
from .algorithms import ALGORITHMS, BY_NAME, build
from .nccl import busbw_factor
from .phase_cache import PhaseCache
from .platform import platform
from .stages import (
    GroupInfo,
    Phase,
    Stage,
    fabric_class,
    first_gpus,
    group_info,
    island_of_devices,
    merge_phases,
    one_node_class,
)

__all__ = ["OPS", "ALGORITHMS", "CollectiveModel", "CollectiveResult", "busbw_factor",
           "DTYPE_BYTES"]

OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv")
DTYPE_BYTES = {"int8": 1, "uint8": 1, "half": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "float": 4,
               "float32": 4, "int32": 4, "double": 8, "float64": 8, "int64": 8}


@dataclass(frozen=True, slots=True)
class CollectiveResult:
    op: str
    algo: str
    proto: str
    size_bytes: int
    ranks: int
    time_s: float
    latency_s: float
    transfer_s: float

    @property
    def algbw_GBps(self) -> float:
        return self.size_bytes / self.time_s / 1e9 if self.time_s > 0 else math.inf

    @property
    def busbw_GBps(self) -> float:
        return self.algbw_GBps * busbw_factor(self.op, self.ranks)


class CollectiveModel:
    """Collective timings on one topology (build once, ask many times)."""

    def __init__(self, topo: Topology, efficiency: dict[str, float] | None = None,
                 nccl_version: tuple[int, int] | None = None,
                 net_latency_us: dict[str, float] | None = None,
                 proxy_step_us: float | None = None,
                 peer_us: dict[str, tuple[float, float]] | None = None) -> None:
        self.topo = topo
        self.links = LinkTable(topo, LINK_EFFICIENCY if efficiency is None else efficiency)
        self.router = make_router(topo, self.links)
        self._per_byte: dict[tuple, tuple[float, int]] = {}
        # PERF: the plan search asks for the same (op, size, group) many times across layouts
        # (benchmarks/test_bench_plan.py); a result is a pure function of them.
        self._results: dict[tuple[Any, ...], CollectiveResult] = {}
        # what the tuner may offer here (nccl.offered); *nccl_version* (major, minor) where the
        # release changes it, None for a current NCCL; *net_latency_us* replaces
        # sim.calibration.NET_LATENCY_US (for its fit)
        self.hw = platform(topo, nccl_version, net_latency_us, proxy_step_us, peer_us)
        ici = self.links.latency_s[self.links.kind == "ici"]
        self._ici_hop_s = float(ici.max()) if len(ici) else 1e-6
        self._wire: Wires | None = None
        self._net: float | None = None
        # (op, algo, groups) -> (link ids, bytes per byte of size): ``sim.collectives.traffic``
        self.link_bytes_cache: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}
        self._a2a_bytes: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}   # all-to-all groups
        self._island_of: dict[int, int] | None = None     # device -> node (slice), read once
        # PERF: a size sweep or a training step asks for the same groups call after call
        self._everyone: GroupInfo | None = None            # the group of all chips
        self._groups: dict[tuple[int, ...], GroupInfo] = {}
        self._phases = PhaseCache()      # PERF: routes and makespans by flows (phase_cache)

    # ------------------------------------------------------------------ public

    def algorithms(self, op: str, gi: GroupInfo) -> list[str]:
        """Algorithms the hardware and library offer for *op* on this group (``nccl.offered``)."""
        return nccl.offered(op, gi, self.hw)

    def time(self, op: str, size_bytes: int, group: Sequence[int] | None = None,
             algo: str | None = None) -> CollectiveResult:
        """Predicted time of one collective call (``size_bytes`` as nccl-tests counts it)."""
        key = (op, size_bytes, None if group is None else tuple(group), algo)
        hit = self._results.get(key)
        if hit is not None:
            return hit
        result = self._time(op, size_bytes, group, algo)
        if len(self._results) < 200_000:
            self._results[key] = result
        return result

    def _time(self, op: str, size_bytes: int, group: Sequence[int] | None,
              algo: str | None) -> CollectiveResult:
        if op not in OPS:
            # Named as the CLI flag, not the field: tests/test_collectives.py pins this text.
            raise ConfigError(f"--op: unknown collective {op!r}; valid: {', '.join(OPS)}")
        if isinstance(size_bytes, bool) or not isinstance(size_bytes, (int, np.integer)) or size_bytes <= 0:
            raise ConfigError(f"size: must be a positive integer number of bytes, got {size_bytes!r}")
        gi = self._group(group)
        pairs = nccl.choices(op, gi, self.hw, algo)          # checks a forced algorithm
        if gi.n == 1:
            return CollectiveResult(op, "none", "none", int(size_bytes), 1, 0.0, 0.0, 0.0)
        # NCCL picks by its own cost model (nccl.call_time_s's third value), which can differ from
        # the time the call then takes; the candidates stay alive here, so their ids are unique
        tuner: dict[int, float] = {}
        cands = [self._predict(op, int(size_bytes), gi, a, proto, tuner=tuner) for a, proto in pairs]
        # a net plugin's tuner picks first where its table covers the call (and NCCL offers it)
        pick = nccl.plugin_pick(op, gi, self.hw, int(size_bytes)) if algo is None else None
        forced = [r for r in cands if (r.algo, r.proto) == pick]
        if forced:
            return forced[0]
        return nccl.fastest(cands, lambda r: tuner.get(id(r), r.time_s))

    def time_concurrent(self, op: str, size_bytes: int, groups: Sequence[Sequence[int]],
                        algo: str | None = None) -> CollectiveResult:
        """*op* run by several disjoint groups at the same time, e.g. every shard position of a
        hybrid-sharded gradient all-reduce across TPU slices, whose flows share each host's DCN
        uplink. The first group's algorithm and latency; its transfer time stretched by the ratio
        of all groups' flows played together on the fluid model to its own flows alone."""
        first = self.time(op, size_bytes, groups[0], algo)
        if len(groups) == 1 or first.ranks <= 1 or first.transfer_s <= 0:
            return first
        gi = self._group(groups[0])
        key = ("concurrent", op, first.algo, tuple(tuple(map(int, g)) for g in groups))
        if key not in self._per_byte:
            ref = 1e6
            built = [build(first.algo, op, self._group(g), ref, self.topo) for g in groups]
            shapes = {tuple(len(stage) for stage in b) for b in built}
            if len(shapes) != 1:
                raise ConfigError(f"concurrent {op}: the {len(groups)} groups do not run the same "
                                  f"{first.algo} stages (groups of different shapes)")
            total = 0.0
            for j, stage in enumerate(built[0]):
                total += max(self.phase_time_s(merge_phases([b[j][k] for b in built]))
                             for k in range(len(stage)))
            alone, _ = self._cost(op, gi, first.algo)
            self._per_byte[key] = (max(total / ref, alone), 0)
        # the shared per-byte cost goes through the same protocol factors and caps as one group's
        return self._predict(op, int(size_bytes), gi, first.algo, first.proto,
                             per_byte=self._per_byte[key][0])

    def group_info(self, group: Sequence[int] | None) -> GroupInfo:
        """The ranks of *group* and how they sit on the machine (checked)."""
        return self._group(group)

    # ------------------------------------------------------------------ internals

    def _group(self, group: Sequence[int] | None) -> GroupInfo:
        devs = self.topo.devices
        if self._island_of is None:
            self._island_of = island_of_devices(self.topo)
        if group is None:
            if self._everyone is None:
                self._everyone = group_info(self.topo, devs, self._island_of)
            return self._everyone
        key = tuple(group)
        hit = self._groups.get(key)
        if hit is not None:
            return hit
        members = list(group)
        if len(members) > len(devs):
            raise ConfigError(f"group: {len(members)} ranks but the topology has {len(devs)} chips")
        if members and (len(set(members)) != len(members) or min(members) < 0
                        or max(members) >= len(devs)):
            raise ConfigError(f"group: ranks must be distinct chips in 0..{len(devs) - 1}")
        gi = group_info(self.topo, members, self._island_of)
        if len(self._groups) < 10_000:
            self._groups[key] = gi
        return gi

    def _predict(self, op: str, size: int, gi: GroupInfo, algo: str, proto: str,
                 per_byte: float | None = None, tuner: dict[int, float] | None = None) -> CollectiveResult:
        """One (algorithm, protocol) candidate: the flow model's transfer time (*per_byte* replaces
        the algorithm's own cost, see ``time_concurrent``) with ICI latency per hop on TPU slices,
        or priced by NCCL's model (``nccl.call_time_s``) on GPUs; *tuner*, when given, receives
        the cost NCCL's tuner sees for it (keyed by the result's id)."""
        alone, hops = self._cost(op, gi, algo)
        per_byte = alone if per_byte is None else per_byte
        transfer = per_byte * size
        if self.hw.tpu:
            lat = hops * self._ici_hop_s + self._dcn_latency_s(op, gi)
            return CollectiveResult(op, algo, "ici", size, gi.n, lat + transfer, lat, transfer)
        nvls_s = self._nvls_part(op, gi, algo) * size if BY_NAME[algo].switch_part else None
        lat, transfer, tuned = nccl.call_time_s(algo, Call(op, proto, size, gi.n, gi.nodes), self.hw,
                                                transfer, self._wire_latency_s(), self._net_Bps(),
                                                nvls_s)
        res = CollectiveResult(op, algo, proto, size, gi.n, lat + transfer, lat, transfer)
        if tuner is not None:
            tuner[id(res)] = tuned
        return res

    def _dcn_latency_s(self, op: str, gi: GroupInfo) -> float:
        """TPU Multislice: the data-center network trips of a group spread over several slices:
        one slice-to-slice path (PCIe, host NIC, DCN; the topology's latencies) per ring step
        between slices, twice as many for an all-reduce."""
        pods = sorted(gi.by_pod)
        if len(pods) < 2:
            return 0.0
        a, b = gi.by_pod[pods[0]][0], gi.by_pod[pods[1]][0]
        trips = (len(pods) - 1) * (2 if op == "allreduce" else 1)
        return trips * self.router.path_latency_s(a, b)

    def _net_Bps(self) -> float:
        """One GPU's rate into the scale-out network: the bottleneck of the route from the first
        GPU to a GPU of another node (its NIC, on the bundled GPU topologies); 0 on one node."""
        if self._net is None:
            first, _, other = first_gpus(self.topo)
            self._net = 0.0
            if other is not None:
                ids, fr = self.router.route(first, other)
                self._net = float(np.min(self.links.capacity_Bps[ids] / np.maximum(fr, 1e-12)))
        return self._net

    def _wire_latency_s(self) -> Wires:
        """Path latency of one step inside a node and one between nodes (GPU topologies): the
        routed links' latencies (NVLink and NVSwitch; PCIe, NIC and InfiniBand switches)."""
        if self._wire is None:
            first, intra, inter = first_gpus(self.topo)
            self._wire = Wires(self.router.path_latency_s(first, intra) if intra is not None else 0.0,
                               self.router.path_latency_s(first, inter) if inter is not None else 0.0)
        return self._wire

    def _cost(self, op: str, gi: GroupInfo, algo: str) -> tuple[float, int]:
        """(transfer seconds per byte of ``size``, latency-bearing steps) of an algorithm; cached.

        The fluid model is scale-free (every flow's bytes scale with ``size``, so every completion
        time does), so one solve at 1 MB gives the per-byte cost for every size.
        """
        key = (op, self._class_of(gi), algo)
        if key not in self._per_byte:
            self._per_byte[key] = self._solve_cost(op, gi, algo)
        return self._per_byte[key]

    def _solve_cost(self, op: str, gi: GroupInfo, algo: str) -> tuple[float, int]:
        """``_cost`` worked out for *gi* itself (no symmetry class)."""
        ref = 1e6
        total, steps = 0.0, 0
        for stage in build(algo, op, gi, ref, self.topo):
            total += max(self.phase_time_s(p) for p in stage)
            steps += max(p.steps * p.hops_per_step for p in stage)
        return total / ref, steps

    def _class_of(self, gi: GroupInfo) -> Any:
        """The symmetry class of *gi* for the per-byte caches (``one_node_class``,
        ``fabric_class``), else its ranks. PERF: a plan's layouts, a step's stages and a
        validation suite's runs ask for the same tensor-parallel group on many nodes, and for
        data-parallel groups each stage's alike on its own nodes."""
        if self.hw.tpu or self.topo.edited:
            return gi.devices
        if len(gi.by_node) == 1:
            return one_node_class(self.topo, gi)
        return fabric_class(self.topo, gi) or gi.devices

    def _nvls_part(self, op: str, gi: GroupInfo, algo: str) -> float:
        """Transfer seconds per byte of an NVLS / NVLSTree call's NVLink SHARP traffic alone (its
        flows to and from the NVSwitches, without the network tree's); cached."""
        key = ("nvls-part", op, self._class_of(gi), algo)
        if key not in self._per_byte:
            ref = 1e6
            empty = np.zeros(0, np.int64)
            total = 0.0
            for stage in build(algo, op, gi, ref, self.topo):
                total += max(self.phase_time_s(Phase(p.name, p.steps, empty, empty, np.zeros(0),
                                                     to_switch=p.to_switch, from_switch=p.from_switch))
                             for p in stage)
            self._per_byte[key] = (total / ref, 0)
        return self._per_byte[key][0]

    def flowset(self, phase: Phase) -> FlowSet:
        """The phase's one-step flows routed on the graph (fast bulk routing where it applies);
        PERF: a plain phase's routes worked out once per endpoints (``PhaseCache.flowset``)."""
        return self._phases.flowset(phase, self._routed)

    def _routed(self, phase: Phase) -> FlowSet:
        rows, cols, vals = self.router.routes_coo(phase.src, phase.dst)
        k = len(phase.nbytes)
        r2, c2, v2 = [rows], [cols], [vals]
        sizes = [phase.nbytes]
        for spec, up in ((phase.to_switch, True), (phase.from_switch, False)):
            if spec is not None:
                devs, vol = spec
                r, c, v = self.router.switch_routes_coo(devs, up, col0=k)
                r2.append(r)
                c2.append(c)
                v2.append(v)
                sizes.append(np.full(len(devs), vol))
                k += len(devs)
        for j, (s, d, _) in enumerate(phase.extra):
            ids, fr = self.router.route(s, d)
            r2.append(ids)
            c2.append(np.full(len(ids), k + j))
            v2.append(fr)
        nbytes = np.concatenate(sizes + [np.asarray([b for _, _, b in phase.extra], float)])
        return FlowSet(len(self.links), np.concatenate(r2), np.concatenate(c2), np.concatenate(v2),
                       nbytes)

    def phase_link_bytes(self, phase: Phase) -> tuple[np.ndarray, np.ndarray]:
        """(links, bytes each carries) in one step of *phase*: its flows routed, plus its
        all-to-all groups counted by the router (``Router.all_to_all_link_bytes``)."""
        ids, b = np.zeros(0, np.int64), np.zeros(0)
        if phase.has_flows:
            fs = self.flowset(phase)
            ids, b = fs.links, fs.link_bytes()
        if not phase.uniform:
            return ids, b
        total = np.zeros(len(self.links))
        total[ids] += b
        for devs, per_pair in phase.uniform:
            a2a_ids, a2a_bytes = self._a2a_per_pair(devs)
            total[a2a_ids] += a2a_bytes * per_pair
        keep = np.flatnonzero(total > 0)
        return keep, total[keep]

    def _a2a_per_pair(self, devs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(links, bytes) of one byte between every ordered pair of *devs*; cached."""
        key = np.asarray(devs, np.int64).tobytes()
        hit = self._a2a_bytes.get(key)
        if hit is None:
            dense = self.router.all_to_all_link_bytes(devs)
            ids = np.flatnonzero(dense > 0)
            hit = (ids, dense[ids])
            if len(self._a2a_bytes) < 10_000:
                self._a2a_bytes[key] = hit
        return hit

    def phase_time_s(self, phase: Phase) -> float:
        """Fast path: one step played to completion on the fluid model, times ``steps``.

        A phase of all-to-all groups alone ends when its busiest link (relative to its capacity)
        has carried its bytes: the flows of an all-to-all are alike, and under max-min sharing
        that link stays full until its last flow ends; no flow crosses a link loaded more
        (tests/test_all_to_all_scale.py plays the flows and finds the same time).
        """
        if phase.uniform and not phase.has_flows:
            ids, b = self.phase_link_bytes(phase)
            return phase.steps * float(np.max(b / self.links.capacity_Bps[ids])) if len(ids) else 0.0
        if phase.uniform:
            phase = phase.explicit()
        if not phase.has_flows:
            return 0.0
        return phase.steps * self._phases.makespan(phase, self.flowset, self.links.capacity_Bps)


def stages_for(model: CollectiveModel, op: str, size: float, group: Sequence[int] | None,
               algo: str) -> list[Stage]:
    """The stages an algorithm runs (for the event engine and tests)."""
    return build(algo, op, model._group(group), size, model.topo)
