"""One collective algorithm as one record: where it applies, the flows it runs, what it costs.

``Algorithm`` is the contract each algorithm of the registry (``sim.collectives.algorithms``)
fills, in one class:

- applicability: the operations it implements (``ops``), the platforms it runs on (``on_gpu``,
  ``on_tpu``), its own conditions on the group and the library (``applies``: NVLink SHARP, one
  GPU per node, an NCCL release, ...) and the reason it is not offered (``refusal``: what
  ``clustersim collective --algo`` prints when it is forced where it does not apply);
- phases: ``stages`` turns (operation, group, bytes) into flows on the graph
  (``sim.collectives.stages``);
- cost on GPUs: NCCL's tuning model for it (``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``): its
  latency (``latency_s``), its protocols and the share of the bandwidth each delivers
  (``protocol_factor``), its graph channels and those a call of a given size runs on
  (``channels``, ``channels_used``), its bus-bandwidth ceilings (``busbw_cap_GBps``), and the
  hooks ``sim.collectives.nccl.call_time_s`` composes into a call's time (NVLS efficiency, the
  tuner's correction, pipeline fill, proxy waits). The defaults here are NCCL's generic
  behaviour; an algorithm overrides what NCCL does differently for it.

Constants are NVIDIA/nccl's own, read from ``src/graph/tuning.cc`` (+ ``topo.h``, ``search.cc``) @
5067397c2676d5aed50042fc39e5c8ee96eb0027 as quoted in ../shared/reference/FACTS.md section 3b
(NCCL-TUNE), or from NCCL logs where named (channel counts); the size rules (threads and bytes
per thread before a channel is added, chunk sizes) from NVIDIA/nccl ``src/enqueue.cc``
(``topoGetAlgoInfo``, ``calcCollChunking``) and ``src/graph/tuning.cc`` of the 2.19-2.28
releases, where they are unchanged. They are the library's numbers, not fits: the simulator uses
them for what they describe (software latency per step, protocol overheads and the empirical
bandwidth ceilings NCCL assumes) and takes the physics (link rates, sharing) from the flow model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ..topology import Topology
from .platform import PROTOCOLS, Platform
from .stages import NET_GRAPH_CHANNELS, NET_RAILS, GroupInfo, Phase, Stage

__all__ = ["PROTO_INDEX", "PROXY_CHANNELS", "REFERENCE_WIRES", "REFERENCE_WIRE_US", "Algorithm", "Call", "Wires",
           "latency_terms_us", "net_step_us", "proxy_channels"]

# NCCL's protocol order: the column of its [LL, LL128, Simple] tables
PROTO_INDEX = {p: i for i, p in enumerate(PROTOCOLS)}

# Path latency of one step on the bundled dgx-a100 / dgx-h100 graphs (GPU-NVSwitch-GPU 2 x 0.25 us;
# GPU-PCIe-NIC-leaf-...-NIC-PCIe-GPU 1.6 us): the hardware NCCL's hwLat constants are taken to
# describe. ``Wires`` adds only a topology's difference from it.
REFERENCE_WIRE_US = {"intra": 0.5, "inter": 1.6}

# llMaxBws [row][col] GB/s (tuning.cc @ 5067397c): single node row = GPU arch, col 0; multi-node
# row = CPU (Intel = 0), col 1 (2 nodes) or 2 (>= 3 nodes)
_LL_MAX = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
_ARCH_ROW = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}

# Threads per channel and bytes per thread NCCL wants before it adds a channel (tuning.cc:
# NCCL_LL_MAX_NTHREADS 512, NCCL_LL128_MAX_NTHREADS 640, NCCL_SIMPLE_MAX_NTHREADS 512;
# NCCL_LL_THREAD_THRESHOLD 8 (x nRanks on rings), NCCL_LL128_THREAD_THRESHOLD 8,
# NCCL_SIMPLE_THREAD_THRESHOLD 64).
_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
_THREAD_BYTES = {"LL": 8, "LL128": 8, "Simple": 64}


def column(nodes: int) -> int:
    """The column of NCCL's per-channel tables: one node, two nodes, three or more."""
    return 0 if nodes == 1 else (1 if nodes == 2 else 2)


@dataclass(frozen=True, slots=True)
class Call:
    """One GPU call as NCCL's cost model sees it: *op* of *size* bytes (as nccl-tests counts them)
    on protocol *proto*, over *ranks* ranks on *nodes* nodes."""

    op: str
    proto: str
    size: int
    ranks: int
    nodes: int

    @property
    def ppn(self) -> int:
        """Ranks per node."""
        return max(1, self.ranks // max(self.nodes, 1))


@dataclass(frozen=True, slots=True)
class Wires:
    """Path latency of one step inside a node (*intra_s*) and one between nodes (*inter_s*) on the
    topology graph. NCCL's hwLat constants hold for the reference systems the bundled DGX
    topologies describe (``REFERENCE_WIRE_US``: their path latencies); a topology whose links are
    slower or faster moves each step by the difference."""

    intra_s: float = REFERENCE_WIRE_US["intra"] * 1e-6
    inter_s: float = REFERENCE_WIRE_US["inter"] * 1e-6

    def intra_us(self, hw_us: float) -> float:
        """NCCL's hardware latency of a step inside a node, on this topology's wires, us."""
        return max(0.0, hw_us + self.intra_s * 1e6 - REFERENCE_WIRE_US["intra"])

    def inter_us(self, hw_us: float) -> float:
        """NCCL's hardware latency of a step between nodes, on this topology's wires, us."""
        return max(0.0, hw_us + self.inter_s * 1e6 - REFERENCE_WIRE_US["inter"])


REFERENCE_WIRES = Wires()


def net_step_us(row: tuple[float, float, float], proto: str,
                net_us: tuple[float, float] | None) -> float:
    """An algorithm's network hardware latency on *proto*: its row of NCCL's hwLat[NET] table, or,
    where the transport's net plugin models its own (*net_us*, ``Platform.net_us``: aws-ofi-nccl
    on EFA, 20 us, +3 us completion overhead for Simple), (latency, Simple overhead)."""
    return row[PROTO_INDEX[proto]] if net_us is None else net_us[0] + (net_us[1] if proto == "Simple" else 0.0)


def latency_terms_us(base_row: tuple[float, float, float], nvlink_row: tuple[float, float, float],
                     net_row: tuple[float, float, float], call: Call, wires: Wires,
                     net_us: tuple[float, float] | None) -> tuple[float, float, float]:
    """(base latency, latency per step inside a node, per step between nodes), us, of an algorithm
    whose rows of NCCL's baseLatencies, hwLatencies[NVLINK] and hwLatencies[NET] are given, on the
    call's protocol and the topology's *wires* (``net_step_us`` for *net_us*)."""
    p = PROTO_INDEX[call.proto]
    return (base_row[p], wires.intra_us(nvlink_row[p]),
            wires.inter_us(net_step_us(net_row, call.proto, net_us)))


def proxy_channels(net_channels: int | None = None, nics: int = NET_RAILS) -> int:
    """Channels a NIC's proxy serves at full width: the graph's channels across nodes
    (``Algorithm.channels``) over the *nics* they run on (``Platform.net_nics``), doubled at run
    time (``Algorithm.channels_used``): 4 on 8-NIC nodes with 16, 2 on Snellius's 4 NICs with 4."""
    return max(1, 2 * (NET_GRAPH_CHANNELS if net_channels is None else net_channels) // max(1, nics))


PROXY_CHANNELS = proxy_channels()


class Algorithm:
    """One collective algorithm: applicability, phases and NCCL's cost model for it (module doc).

    Subclasses set the class attributes and override ``stages`` and, where the algorithm runs on
    GPUs, ``latency_s``; the other methods default to NCCL's generic behaviour.
    """

    name: ClassVar[str]
    ops: ClassVar[frozenset[str]]                 # the operations it implements
    on_gpu: ClassVar[bool] = True                 # offered on GPU clusters
    on_tpu: ClassVar[bool] = False                # offered on TPU slices
    # On GPUs: only where every node holds as many of the group's ranks (trees, NVLS, ...)
    needs_even_nodes: ClassVar[bool] = True
    # On TPU slices: listed after the slice's own algorithms (the first of equal times is picked)
    tpu_fallback: ClassVar[bool] = False
    # On GPUs: run only when forced (NCCL's tuner has no such algorithm of its own)
    forced_only_on_gpu: ClassVar[bool] = False
    nccl_protocols: ClassVar[tuple[str, ...]] = ("Simple",)   # the protocols it runs on GPUs
    # Graph channels NCCL's tuning model counts for it, inside one node and across nodes (before
    # the runtime doubling); 16 where NCCL's logs show no other count
    channels_one_node: ClassVar[int] = NET_GRAPH_CHANNELS
    channels_across: ClassVar[int] = NET_GRAPH_CHANNELS
    follows_net_channels: ClassVar[bool] = False  # the topology's fabric.net_channels replaces ^
    drops_channels: ClassVar[bool] = False        # a small call runs on fewer (channels_used)
    # Its NVLink SHARP traffic is priced apart (the NVLS efficiency stretches only that part)
    switch_part: ClassVar[bool] = False

    # ----------------------------------------------------------------- applicability

    def offers(self, op: str, gi: GroupInfo, hw: Platform) -> bool:
        """Whether the hardware and the library offer this algorithm for *op* on *gi*."""
        if op not in self.ops or not (self.on_tpu if hw.tpu else self.on_gpu):
            return False
        if not hw.tpu and self.needs_even_nodes and not gi.even:
            return False
        return self.applies(op, gi, hw)

    def applies(self, op: str, gi: GroupInfo, hw: Platform) -> bool:
        """The algorithm's own conditions beyond its operations and platform (default: none)."""
        return True

    def refusal(self, op: str, hw: Platform) -> str:
        """Why a forced call of *op* cannot run it here (the CLI prints it after ``--algo NAME:``)."""
        return f"does not implement {op} here"

    def protocols(self, tpu: bool) -> tuple[str, ...]:
        """The protocols it runs: its NCCL ones on GPUs; none but Simple on TPU slices."""
        return ("Simple",) if tpu else self.nccl_protocols

    # ----------------------------------------------------------------- phases

    def stages(self, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
        """Its flows for *op* of *size* bytes on *gi* (the caller has checked that it is offered)."""
        raise NotImplementedError(self.name)

    def bulk_phases(self, op: str, groups: Sequence[Sequence[int]], size: float,
                    topo: Topology) -> list[Phase] | None:
        """The phases of *op* run by every group of *groups* at once, each what ``merge_phases``
        makes of that phase of every group's own ``stages`` (stage by stage, phase by phase),
        where the algorithm can find them for all groups in one pass; None (the default) where
        it cannot, and the caller merges ``stages`` group by group."""
        return None

    # ----------------------------------------------------------------- NCCL's cost model

    def latency_s(self, call: Call, wires: Wires = REFERENCE_WIRES,
                  net_us: tuple[float, float] | None = None, exposed_net: bool = True,
                  net_channels: int | None = None) -> float:
        """NCCL's modelled latency of one call (``ncclTopoTuneModel`` + plateau), seconds, with the
        topology's own links in it (*wires*). *net_us*: the transport's own network latency
        (``net_step_us``); *exposed_net*: the NCCL release prices one-rank-per-node network steps
        as fully exposed (2.23 on); *net_channels*: the topology's channels across nodes."""
        raise NotImplementedError(self.name)

    def protocol_factor(self, proto: str, nodes: int) -> float:
        """Fraction of the link bandwidth a protocol delivers (NCCL: LL 1/2 - half of each 8-byte
        store is a flag; LL128 0.92)."""
        if proto == "Simple":
            return 1.0
        return 0.5 if proto == "LL" else 0.92

    def channels(self, single_node: bool, net_channels: int | None = None) -> int:
        """Graph channels NCCL's tuning model counts for it; *net_channels* (the topology's
        ``fabric.net_channels``) replaces the count across nodes of the algorithms that follow it
        where a system's NCCL log shows another (4 on Snellius's 4-GPU nodes with 4 NICs)."""
        if net_channels is not None and not single_node and self.follows_net_channels:
            return net_channels
        return self.channels_one_node if single_node else self.channels_across

    def thread_bytes_scale(self, proto: str, ranks: int) -> int:
        """How many times NCCL's bytes-per-thread threshold a channel of it wants (default 1)."""
        return 1

    def channels_used(self, proto: str, size: int, ranks: int, nodes: int,
                      net_channels: int | None = None) -> tuple[int, int]:
        """(channels a call of *size* bytes runs on, the communicator's channels): NCCL starts from
        all of them and, for the algorithms that drop channels, drops one while ``size < nc x
        threads x bytes-per-thread`` (enqueue.cc ``topoGetAlgoInfo``); the others keep theirs.
        The communicator has twice the channels the topology search found (``ncclTopoPostset``
        duplicates them)."""
        full = 2 * self.channels(nodes == 1, net_channels)
        if not self.drops_channels or proto not in _THREADS:
            return full, full
        per_channel = _THREADS[proto] * _THREAD_BYTES[proto] * self.thread_bytes_scale(proto, ranks)
        nc = full
        while nc >= 2 and size < nc * per_channel:
            nc -= 1
        return nc, full

    def channel_ceiling_GBps(self, proto: str, arch: str, col: int, nch: int) -> float:
        """Its own ceiling on bus bandwidth over *nch* channels (NCCL's per-channel tables; *col*:
        ``column(nodes)``), infinite where NCCL has none."""
        return math.inf

    def busbw_cap_GBps(self, proto: str, arch: str, nodes: int,
                       net_channels: int | None = None) -> float:
        """NCCL's empirical ceilings on bus bandwidth (GB/s) for this algorithm and protocol: LL's
        (llMaxBw) and its own per channel, times the channels (*net_channels*: see ``channels``)."""
        col = column(nodes)
        single = nodes == 1
        nch = self.channels(single, net_channels)
        cap = math.inf
        if proto == "LL":
            row = _ARCH_ROW.get(arch, 2) if single else 0
            cap = _LL_MAX[row][col]
        return min(cap, self.channel_ceiling_GBps(proto, arch, col, nch))

    def ceiling_whole_call(self, proto: str) -> bool:
        """Whether its ceiling bounds the whole call whatever its channels (default: the ceiling is
        shared by the channels, so a call on fewer gets their share of it)."""
        return False

    def switch_times_s(self, base_s: float, nvls_s: float | None, call: Call,
                       hw: Platform) -> tuple[float, float]:
        """(what the tuner believes, what the call takes) of its transfer at the protocol's rate
        *base_s*, where NVLink SHARP's efficiency stretches it (default: neither is stretched)."""
        return base_s, base_s

    def tuner_correction(self, call: Call) -> float:
        """The tuner's bandwidth correction of the call (default 1: none)."""
        return 1.0

    def slowdown(self, call: Call, used: int, full: int) -> float:
        """How much longer than on all its channels the call's transfer takes: the channels it
        runs on (*used* of *full*)."""
        return full / used

    def pipeline_fill_s(self, call: Call, net_Bps: float) -> float:
        """Time its pipeline takes to fill before it streams (default 0); *net_Bps*: one GPU's rate
        into the scale-out network, 0 for none."""
        return 0.0

    def network_steps(self, call: Call) -> float | None:
        """Its steps across the network that wait on the proxies (``proxy_wait_s``); None where
        NCCL's proxies are not modelled for it."""
        return None

    def peer_cost_s(self, call: Call, peer_us: tuple[float, float] | None) -> float:
        """What the call's remote peers cost beyond its latency (send/recv-based algorithms
        only); 0 here."""
        return 0.0

    def proxy_wait_s(self, call: Call, step_s: float, net_channels: int | None = None,
                     nics: int = NET_RAILS) -> float:
        """What an LL128 call across nodes waits on its GPUs' network proxies beyond NCCL's latency
        model: at each of its network steps (``network_steps``) the proxy gets round its channels
        one step each (*step_s*, see ``sim.calibration.PROXY_STEP_US``), ``proxy_channels`` of
        them at full width and that share of them for a call on fewer channels. Not part of the
        tuner's cost, as it is not of NCCL's."""
        if call.proto != "LL128" or call.nodes < 2 or step_s <= 0:
            return 0.0
        steps = self.network_steps(call)
        if steps is None:
            return 0.0
        used, full = self.channels_used(call.proto, call.size, call.ranks, call.nodes, net_channels)
        return steps * proxy_channels(net_channels, nics) * used / full * step_s
