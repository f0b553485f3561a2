"""NCCL's tuner: which algorithms and protocols a call may use, what each costs, the fastest.

The choice, in one place: ``offered`` lists the algorithms the hardware and the library offer for
an operation on a group (NVLS only with NVLink SHARP, CollNet only with InfiniBand SHARP, trees and
hierarchical only with as many ranks on every node; on TPU slices the torus inside a slice and
hierarchical across slices, as XLA runs them), ``protocols`` the protocols each algorithm runs,
``choices`` the (algorithm, protocol) pairs weighed for a call (a forced algorithm checked against
what is offered) and ``fastest`` the pick: the smallest cost by NCCL's own model, the way NCCL's
tuner picks. ``call_time_s`` is that cost model's part of a GPU call's time (latency
per step, protocol overheads, bandwidth ceilings); the flow model in ``sim.collectives`` gives the
rest.

Three size mechanisms shape the curve between the latency floor and the bandwidth plateau, all
NCCL's own: the tuner's choice of protocol (LL, LL128, Simple: latency against bandwidth) and
algorithm; the channels a call runs on (NCCL drops channels while a call has too few bytes per
thread, ``channels_used``; bandwidth scales with them); and NVLS's chunk size, which NCCL shrinks
for smaller calls, each chunk paying a fixed synchronisation cost (``nvls_efficiency``), and
NVLSTree's pipeline, which fills one chunk per network stage before it streams
(``nvls_tree_fill_s``). Trees lose bandwidth at medium sizes by NCCL's treeCorrectionFactor or,
where the tree is deep, by more: on Simple a tree moves whole chunks stage to stage, and a call
with few chunks per channel for its depth waits for its pipeline to fill (``tree_fill_factor``). The
tuner itself prices calls on all channels, with NVLS's fixed efficiency and its tree correction,
so it can pick what is not fastest, as NCCL does.

Every constant is read from NVIDIA/nccl ``src/graph/tuning.cc`` (+ ``topo.h``, ``search.cc``) @
5067397c2676d5aed50042fc39e5c8ee96eb0027 as quoted in ../shared/reference/FACTS.md section 3b, or
from NCCL logs where named (channel counts); the size rules (threads and bytes per thread before a
channel is added, the tree correction, NVLS chunk sizes, PAT) from NVIDIA/nccl ``src/enqueue.cc``
(``topoGetAlgoInfo``, ``calcCollChunking``) and ``src/graph/tuning.cc`` of the 2.19-2.28 releases,
where they are unchanged. These are the library's own numbers, not fits: the
simulator uses them for what they describe (software latency per step, protocol overheads and the
empirical bandwidth ceilings NCCL assumes) and takes the physics (link rates, sharing) from the
flow model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..calibration import NET_LATENCY_US, PROXY_STEP_US
from ..errors import ConfigError
from ..topology import GpuFabric, Topology
from ..topology_spec import NCCL_PROTOCOLS, GpuClusterSpec
from .algorithms import ALGORITHMS, NET_RAILS, GroupInfo
from .plugin_tuner import plugin_choice

__all__ = ["PROTOCOLS", "Platform", "busbw_cap_GBps", "call_time_s", "channels", "channels_used",
           "choices", "fastest", "latency_s", "nvls_chunk_bytes", "nvls_efficiency", "nvls_tree_fill_s",
           "tree_chunk_bytes", "tree_depth", "tree_fill_factor",
           "offered", "plugin_pick", "platform", "proxy_channels", "proxy_wait_s", "protocol_factor",
           "protocols", "tree_correction"]

PROTOCOLS = NCCL_PROTOCOLS
_P = {p: i for i, p in enumerate(PROTOCOLS)}

# baseLatencies [LL, LL128, Simple], microseconds
_BASE = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0),
         "nvls_tree": (0.0, 0.0, 0.0), "collnet": (0.0, 0.0, 0.0), "pat": (8.0, 8.0, 8.0)}
# hwLatencies[NVLINK] and [NET], microseconds
_NVLINK = {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0), "nvls": (0.0, 0.0, 25.0),
           "nvls_tree": (0.0, 0.0, 25.0), "collnet": (0.0, 0.0, 3.7)}
_NET = {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0), "nvls": (0.0, 0.0, 18.0),
        "nvls_tree": (0.0, 0.0, 20.9), "collnet": (0.0, 0.0, 31.0)}
_NET_OVERHEAD_US = 1.0          # getNetOverhead, Intel x86 host; x3 for Simple
# Path latency of one step on the bundled dgx-a100 / dgx-h100 graphs (GPU-NVSwitch-GPU 2 x 0.25 us;
# GPU-PCIe-NIC-leaf-...-NIC-PCIe-GPU 1.6 us): the hardware NCCL's hwLat constants are taken to
# describe. ``latency_s`` adds only a topology's difference from it.
REFERENCE_WIRE_US = {"intra": 0.5, "inter": 1.6}

# llMaxBws [row][col] GB/s: single node row = GPU arch, col 0; multi-node row = CPU (Intel = 0),
# col 1 (2 nodes) or 2 (>= 3 nodes)
_LL_MAX = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
_ARCH_ROW = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}
_RING_LL128_PER_CH = {"ampere": 20.0, "hopper": 36.7, "blackwell": 40.0}
_TREE_PER_CH = {"ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0),
                "blackwell": (70.0, 42.8, 24.0)}
_TREE_LL128_PER_CH = {"ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 29.0),
                      "blackwell": (55.6, 31.67, 20.0)}
_NVLS_TREE_PER_CH = {"hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 80.0)}
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}

# Channels the tuning model counts (graph channels, before the runtime doubling): 12 for ring/tree
# on an 8-GPU NVSwitch node (NCCL logs: "Pattern 4, nChannels 12, bw 20/20" on A100, "nChannels 12,
# bw 30/30" on DGX H100); NVLS 8 (DGX H100 log in NVIDIA/nccl#1197); 16 multi-node rings/trees
# (8 NICs, two channels each).
_CHANNELS = {("ring", True): 12, ("ring", False): 16, ("tree", False): 16, ("nvls", True): 8,
             ("nvls", False): 8, ("nvls_tree", False): 8, ("collnet", False): 8}


def channels(algo: str, single_node: bool, net_channels: int | None = None) -> int:
    """Graph channels NCCL's tuning model counts for *algo*; *net_channels* (the topology's
    ``fabric.net_channels``) replaces the 16 of rings and trees across nodes where a system's
    NCCL log shows another count (4 on Snellius's 4-GPU nodes with 4 NDR200 NICs)."""
    if net_channels is not None and not single_node and algo in ("ring", "tree"):
        return net_channels
    return _CHANNELS.get((algo, single_node), 16)


# NCCL's treeCorrectionFactor (tuning.cc, ncclTopoGetAlgoTime): the tree all-reduce's bandwidth
# at sizes 64 B x 2^k, k = 0..22, as a fraction of its model ("Trees are not perfectly sticking
# to the model for medium sizes"), per protocol LL, LL128, Simple; 1 outside the table.
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)


def tree_correction(proto: str, size: int) -> float:
    """NCCL's bandwidth correction of the tree all-reduce at *size* bytes (``log2i(size >> 6)``)."""
    k = (int(size) >> 6).bit_length() - 1
    return _TREE_CORRECTION[_P[proto]][k] if 0 <= k < 23 else 1.0


# Threads per channel and bytes per thread NCCL wants before it adds a channel (tuning.cc:
# NCCL_LL_MAX_NTHREADS 512, NCCL_LL128_MAX_NTHREADS 640, NCCL_SIMPLE_MAX_NTHREADS 512;
# NCCL_LL_THREAD_THRESHOLD 8 (x nRanks on rings), NCCL_LL128_THREAD_THRESHOLD 8,
# NCCL_SIMPLE_THREAD_THRESHOLD 64).
_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
_THREAD_BYTES = {"LL": 8, "LL128": 8, "Simple": 64}


def channels_used(algo: str, proto: str, size: int, ranks: int, nodes: int,
                  net_channels: int | None = None) -> tuple[int, int]:
    """(channels a call of *size* bytes runs on, the communicator's channels): NCCL starts from
    all of them and drops one while ``size < nc x threads x bytes-per-thread`` (enqueue.cc
    ``topoGetAlgoInfo``); NVLS, NVLSTree and CollNet keep theirs. The communicator has twice the
    channels the topology search found (``ncclTopoPostset`` duplicates them)."""
    full = 2 * channels(algo, nodes == 1, net_channels)
    if algo not in ("ring", "tree", "pat") or proto not in _THREADS:
        return full, full
    per_channel = _THREADS[proto] * _THREAD_BYTES[proto] * (ranks if algo == "ring" and proto == "LL" else 1)
    nc = full
    while nc >= 2 and size < nc * per_channel:
        nc -= 1
    return nc, full


# NVLink SHARP moves each channel's data in chunks of at most nvlsChunkSize (128 KiB, NCCL's
# default) and smaller ones for smaller calls (enqueue.cc ``calcCollChunking``); each of its
# channels works on one chunk per local rank ("head") at a time.
NVLS_CHUNK_MAX = 128 * 1024


def nvls_chunk_bytes(algo: str, size: int, ranks: int, nodes: int) -> int:
    """The chunk NCCL's NVLS / NVLSTree all-reduce moves for a call of *size* bytes: it shrinks
    while the call is small for its concurrent operations, channels x NVLS heads (enqueue.cc
    ``calcCollChunking``: nChannels x nvls.nHeads). Across nodes the heads are the GPUs with the
    NICs the tree runs on (``NET_RAILS`` at most); inside one node every GPU."""
    heads = max(1, ranks // max(nodes, 1))
    if algo == "nvls_tree":
        heads = min(heads, NET_RAILS)
    ops = 2 * channels(algo, nodes == 1) * heads
    if algo == "nvls":
        c = NVLS_CHUNK_MAX
        for mult, floor in ((64, 65536), (8, 32768), (2, 16384)):
            if size < mult * ops * c and c > floor:
                c = floor
        return c
    c = NVLS_CHUNK_MAX if nodes < 4 else 65536               # NVLSTree: 64 KiB from 4 nodes on
    for mult, floor in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
        if size < mult * ops * c and c > floor:
            c = floor
    return c


def nvls_efficiency(arch: str, chunk: int) -> float:
    """Fraction of the NVLink rate NVLS reaches with chunks of *chunk* bytes: every chunk costs a
    fixed synchronisation overhead, worth ``c0`` bytes of transfer, so ``chunk / (chunk + c0)``.
    NCCL's nvlsEfficiency is that fraction at its largest chunk (128 KiB), which fixes
    ``c0 = 128 KiB x (1 / nvlsEfficiency - 1)`` (22.6 KiB on Hopper)."""
    eff = NVLS_EFFICIENCY.get(arch, 0.85)
    c0 = NVLS_CHUNK_MAX * (1 / eff - 1)
    return chunk / (chunk + c0)


def nvls_tree_fill_s(size: int, ranks: int, nodes: int, net_Bps: float) -> float:
    """Pipeline fill of an NVLSTree all-reduce: Simple moves whole chunks, so the first chunk of
    each channel crosses the pipeline's stages one after another before the stream runs full:
    NVLS reduce in the node, log2(nodes) network hops up the tree and as many down (the network
    stages set the pace: every channel of a GPU shares its NIC, *net_Bps*), the multicast at the
    end counted with the last hop; 2 log2(nodes) + 1 chunk times at one channel's network rate."""
    stages = 2 * math.log2(max(nodes, 1)) + 1
    chunk = nvls_chunk_bytes("nvls_tree", size, ranks, nodes)
    return stages * chunk / (net_Bps / (2 * channels("nvls_tree", False)))


# The Simple protocol's step: its buffer (NCCL_BUFFSIZE, 4 MiB by default) over NCCL_STEPS (8)
TREE_SIMPLE_STEP = 4 * 2**20 // 8


def tree_depth(ranks: int, nodes: int) -> int:
    """NCCL's tree depth: the node's chain plus log2(nodes) hops between nodes
    (src/graph/connect.cc ``connectTrees``: nRanks/nNodes - 1 + log2i(nNodes))."""
    return max(1, ranks // max(nodes, 1)) - 1 + max(0, int(math.log2(max(nodes, 1))))


def tree_chunk_bytes(size: int, channels_: int, depth: int) -> int:
    """The chunk NCCL's tree all-reduce moves per step on the Simple protocol: one buffer step,
    halved while the call gives each channel few chunks for the tree's depth (enqueue.cc
    ``calcCollChunking``: fewer than depth x 8 down to 128 KiB, depth x 4 down to 64 KiB, depth
    down to 32 KiB)."""
    c = TREE_SIMPLE_STEP
    for mult, floor in ((8, 131072), (4, 65536), (1, 32768)):
        while size / (channels_ * c) < depth * mult and c > floor:
            c //= 2
    return c


def tree_fill_factor(size: int, ranks: int, nodes: int, channels_: int) -> float:
    """How much longer than its streaming time a tree all-reduce on Simple takes because it moves
    whole chunks from stage to stage: a channel's first chunk crosses every stage of the tree (its
    depth, the node's chain and the hops between nodes, up and back down) before the pipeline
    runs full, so a channel's n chunks take n + 2 depth - 1 chunk times: 1 + (2 depth - 1) / n.
    Each stage moves a channel's chunk at about one channel's rate, NVLink hop or network hop:
    a channel is one thread block copying and reducing, whichever link it feeds."""
    depth = tree_depth(ranks, nodes)
    chunk = tree_chunk_bytes(size, channels_, depth)
    n = max(1.0, size / (channels_ * chunk))
    return 1 + (2 * depth - 1) / n


def _col(nodes: int) -> int:
    return 0 if nodes == 1 else (1 if nodes == 2 else 2)


def latency_s(algo: str, proto: str, op: str, ranks: int, nodes: int, bytes_: float,
              wire_intra_s: float = REFERENCE_WIRE_US["intra"] * 1e-6,
              wire_inter_s: float = REFERENCE_WIRE_US["inter"] * 1e-6, exposed_net: bool = True,
              net_us: tuple[float, float] | None = None, net_channels: int | None = None) -> float:
    """NCCL's modelled latency of one collective call (``ncclTopoTuneModel`` + plateau), seconds,
    with the topology's own links in it: *wire_intra_s* / *wire_inter_s* are the path latencies of
    one step inside a node / between nodes on the topology graph. NCCL's hwLat constants hold for
    the reference systems the bundled DGX topologies describe (REFERENCE_WIRE_US: their path
    latencies); a topology whose links are slower or faster moves each step by the difference.
    *exposed_net*: with one rank per node NCCL (2.23 on) prices rings' network steps at the tree's
    network latency ("latencies are fully exposed").

    *net_us* (``Platform.net_us``): a transport whose NCCL net plugin models its own per-step
    network latency (aws-ofi-nccl on EFA: 20 us, +3 us completion overhead for Simple) replaces
    NCCL's NET table (InfiniBand) with (latency, Simple overhead)."""
    p = _P[proto]
    base = _BASE.get(algo, _BASE["ring"])[p]
    intra = max(0.0, _NVLINK.get(algo, _NVLINK["ring"])[p]
                + wire_intra_s * 1e6 - REFERENCE_WIRE_US["intra"])
    ppn = max(1, ranks // max(nodes, 1))
    # "With ppn=1 latencies are fully exposed, use the Tree network latency" (tuning.cc, 2.23+)
    net_algo = "tree" if exposed_net and ppn == 1 and algo in ("ring", "tree") else algo
    net_hw = (_NET.get(net_algo, _NET["ring"])[p] if net_us is None
              else net_us[0] + (net_us[1] if proto == "Simple" else 0.0))
    inter = max(0.0, net_hw + wire_inter_s * 1e6 - REFERENCE_WIRE_US["inter"])
    if algo == "ring":
        nsteps = 2 * (ranks - 1) if op == "allreduce" else (ranks - 1 if op in
                                                             ("allgather", "reducescatter") else ranks)
        n_inter = (2 * (nodes - 1) if op == "allreduce" else nodes - 1) if nodes > 1 else 0
        if nodes > 1:
            intra = max(intra, _NET_OVERHEAD_US * (3 if proto == "Simple" else 1))
        lat = base + (nsteps - n_inter) * intra + n_inter * inter
        nch = channels("ring", nodes == 1, net_channels)
        if nodes > 1 and op == "allreduce" and proto == "Simple" and bytes_ / (nch * ranks) >= 64:
            lat *= 1.4
    elif algo == "tree":
        lat = base + 2 * ((ppn - 1) * intra + math.log2(max(nodes, 1)) * inter)
    elif algo == "nvls":
        lat = intra + (inter if nodes > 1 else 0.0)
    elif algo == "nvls_tree":
        lat = base + intra + 2 * math.log2(max(nodes, 1)) * inter
    elif algo == "collnet":
        lat = base + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * 0.4) + inter
    elif algo == "pat":
        # 8 us + log2(nodes) network steps at a 3.5th of the tree's network latency each (PAT
        # aggregates them) + 2.8 us per rank, "still a linear part" (tuning.cc, NCCL >= 2.23)
        net = max(0.0, _NET["tree"][p] + wire_inter_s * 1e6 - REFERENCE_WIRE_US["inter"])
        lat = base + math.log2(max(nodes, 1)) * net / 3.5 + 2.8 * ranks
    else:
        raise AssertionError(algo)
    return lat * 1e-6


def protocol_factor(algo: str, proto: str, nodes: int) -> float:
    """Fraction of the link bandwidth a protocol delivers (NCCL: LL 1/2 - half of each 8-byte
    store is a flag; LL128 0.92; tree LL 1/3.8; tree LL128 7/9 on one node, 120/128 across; PAT
    (Simple) 0.75)."""
    if algo == "pat":
        return 0.75                   # tuning.cc: PAT busBw x .75
    if proto == "Simple":
        return 1.0
    if algo == "tree":
        if proto == "LL":
            return 1 / 3.8
        return 7 / 9 if nodes == 1 else 120 / 128
    return 0.5 if proto == "LL" else 0.92


def busbw_cap_GBps(algo: str, proto: str, arch: str, nodes: int,
                   net_channels: int | None = None) -> float:
    """NCCL's empirical ceilings on bus bandwidth (GB/s) for this algorithm and protocol: per
    channel, times the channels (*net_channels*: see ``channels``)."""
    col = _col(nodes)
    single = nodes == 1
    nch = channels(algo, single, net_channels)
    cap = math.inf
    if proto == "LL":
        row = _ARCH_ROW.get(arch, 2) if single else 0
        cap = _LL_MAX[row][col]
    if algo == "ring" and proto == "LL128":
        cap = min(cap, nch * _RING_LL128_PER_CH.get(arch, 36.7))
    if algo == "tree":
        if proto == "LL128":
            cap = min(cap, nch * _TREE_LL128_PER_CH.get(arch, _TREE_LL128_PER_CH["hopper"])[col])
        cap = min(cap, nch * _TREE_PER_CH.get(arch, _TREE_PER_CH["hopper"])[col])
    if algo == "nvls_tree":
        cap = min(cap, nch * _NVLS_TREE_PER_CH.get(arch, _NVLS_TREE_PER_CH["hopper"])[col])
    return cap


# --------------------------------------------------------------------------- the tuner

@dataclass(frozen=True, slots=True)
class Platform:
    """What one topology offers the collective library, read once from its fabric."""

    topology: str                # name, for messages
    chip: str                    # catalogue chip name, for messages
    arch: str                    # "ampere", "hopper", ... (the rows of NCCL's tables)
    tpu: bool                    # TPU slices: XLA collectives on the ICI torus, no NCCL protocols
    nvls: bool                   # NVLink SHARP in the NVSwitches (NVLS, NVLSTree)
    sharp: bool                  # InfiniBand SHARP in the fabric's switches (CollNet)
    nccl: tuple[int, int] | None = None   # NCCL (major, minor) the calls run; None: a current one
    # The scale-out transport's own per-step network latency and Simple-protocol overhead (us),
    # where its net plugin models one (``latency_s``); None: NCCL's NET table.
    net_us: tuple[float, float] | None = None
    # Protocols a call across nodes may use (the topology's ``fabric.net_protocols``)
    net_protocols: tuple[str, ...] = PROTOCOLS
    # The net plugin's tuner table (``fabric.tuner_plugin``; sim.collectives.plugin_tuner)
    tuner_plugin: str | None = None
    # The proxy's time per channel step of an LL128 call across nodes (sim.calibration.PROXY_STEP_US)
    proxy_step_s: float = PROXY_STEP_US * 1e-6
    # Rings' and trees' graph channels across nodes (``channels``: the topology's
    # ``fabric.net_channels`` or NCCL's default) and the NICs a node's channels run on
    net_channels: int = channels("ring", False)
    net_nics: int = NET_RAILS

    def since(self, major: int, minor: int) -> bool:
        """Whether the NCCL release has what (major, minor) introduced (unknown: yes)."""
        return self.nccl is None or self.nccl >= (major, minor)


def platform(topo: Topology, nccl_version: tuple[int, int] | None = None,
             net_latency_us: dict[str, float] | None = None,
             proxy_step_us: float | None = None) -> Platform:
    """The platform of *topo*: its chip and, on GPU clusters, the fabric's in-network reduction
    and the transport's network latency (the topology file's ``net_latency_us``, else the value
    fitted for the transport in ``sim.calibration.NET_LATENCY_US`` or the *net_latency_us* table
    that replaces it, else NCCL's table); *nccl_version* (major, minor) where the release matters
    (PAT: 2.23), None for a current one; *proxy_step_us* replaces
    ``sim.calibration.PROXY_STEP_US`` (for its fit)."""
    table = NET_LATENCY_US if net_latency_us is None else net_latency_us
    step_us = PROXY_STEP_US if proxy_step_us is None else proxy_step_us
    fab = topo.fabric
    nvls, sharp = (fab.nvls, fab.sharp) if isinstance(fab, GpuFabric) else (False, False)
    net_us: tuple[float, float] | None = None
    net_protocols: tuple[str, ...] = PROTOCOLS
    tuner_plugin = None
    spec = topo.spec
    if isinstance(spec, GpuClusterSpec):
        net_protocols = spec.net_protocols
        tuner_plugin = spec.tuner_plugin
        if spec.net_latency_s is not None:
            net_us = (spec.net_latency_s * 1e6, spec.net_simple_overhead_s * 1e6)
        elif spec.transport in table:
            net_us = (table[spec.transport], spec.net_simple_overhead_s * 1e6)
    net_channels, net_nics = channels("ring", False), NET_RAILS
    if isinstance(spec, GpuClusterSpec):
        net_channels, net_nics = channels("ring", False, spec.net_channels), min(spec.rails, NET_RAILS)
    return Platform(topo.name, topo.spec.chip.name, topo.spec.chip.arch, topo.is_tpu, nvls, sharp,
                    nccl_version, net_us, net_protocols, tuner_plugin, step_us * 1e-6,
                    net_channels, net_nics)


def offered(op: str, gi: GroupInfo, hw: Platform) -> list[str]:
    """Algorithms the hardware and the library offer for *op* on the group *gi*."""
    if op == "alltoall":
        return ["pairwise"]
    if op == "sendrecv":
        return ["p2p"]
    if hw.tpu:
        if len(gi.by_pod) > 1:
            return ["hierarchical", "ring"] if op == "allreduce" and gi.even_pods else ["ring"]
        return ["torus", "ring"]
    algos = ["ring"]
    if not gi.even:                 # trees, NVLS and hierarchical need as many ranks per node
        return algos
    multi = gi.nodes > 1
    if op == "allreduce" and multi:
        algos.append("tree")
    if hw.nvls and gi.ppn > 1 and op in ("allreduce", "allgather", "reducescatter") and not multi:
        algos.append("nvls")
    if hw.nvls and multi and gi.ppn > 1 and op == "allreduce":
        algos.append("nvls_tree")
    if hw.sharp and multi and op == "allreduce":
        algos.append("collnet")
    if op == "allreduce" and multi and gi.ppn > 1:
        algos.append("hierarchical")
    if op in ("allgather", "reducescatter") and multi and gi.ppn == 1 and hw.since(2, 23):
        algos.append("pat")           # NCCL >= 2.23: one GPU per node only (ncclPatEnable)
    return algos


def protocols(algo: str, tpu: bool) -> tuple[str, ...]:
    """Protocols *algo* runs: LL, LL128 and Simple for ring and tree; Simple only for NVLS,
    NVLSTree, CollNet, the send/recv-based algorithms and hierarchical, and for everything on TPU
    slices (no NCCL protocols there)."""
    if tpu or algo in ("nvls", "nvls_tree", "collnet", "pat", "pairwise", "p2p", "hierarchical"):
        return ("Simple",)
    return PROTOCOLS


def choices(op: str, gi: GroupInfo, hw: Platform, algo: str | None = None) -> list[tuple[str, str]]:
    """The (algorithm, protocol) pairs the tuner weighs for one call of *op* on *gi*: those of the
    forced *algo* (an error if it is unknown or not offered here) or of every offered algorithm.
    On GPUs hierarchical is only run when forced: NCCL has no such algorithm of its own."""
    avail = offered(op, gi, hw)
    # These two name the CLI flag, not the field: tests/test_collectives.py pins their text.
    if algo is not None:
        if algo not in ALGORITHMS:
            raise ConfigError(f"--algo: unknown algorithm {algo!r}; valid: {', '.join(ALGORITHMS)}")
        if algo not in avail:
            raise ConfigError(_why_not(algo, op, hw, avail))
        algos = [algo]
    else:
        algos = [a for a in avail if a != "hierarchical" or hw.tpu]
    pairs = [(a, p) for a in algos for p in protocols(a, hw.tpu)]
    if gi.nodes > 1 and not hw.tpu:
        # across nodes only what the net plugin and the GPU-NIC path allow (fabric.net_protocols)
        pairs = [(a, p) for a, p in pairs if p in hw.net_protocols]
    return pairs


class _Timed(Protocol):
    @property
    def time_s(self) -> float: ...


R = TypeVar("R", bound=_Timed)


def proxy_channels(net_channels: int | None = None, nics: int = NET_RAILS) -> int:
    """Channels a NIC's proxy serves at full width: the graph's channels across nodes
    (``channels``) over the *nics* they run on (``Platform.net_nics``), doubled at run time
    (``channels_used``): 4 on 8-NIC nodes with 16, 2 on Snellius's 4 NICs with 4."""
    return max(1, 2 * channels("tree", False, net_channels) // max(1, nics))


PROXY_CHANNELS = proxy_channels()


def proxy_wait_s(op: str, algo: str, proto: str, size: int, ranks: int, nodes: int,
                 step_s: float, net_channels: int | None = None, nics: int = NET_RAILS) -> float:
    """What an LL128 ring or tree call across nodes waits on its GPUs' network proxies beyond
    NCCL's latency model: at each of its network steps (a tree's 2 log2(nodes) hops, a ring's
    steps between nodes) the proxy gets round its channels one step each (*step_s*, see
    ``sim.calibration.PROXY_STEP_US``), ``proxy_channels`` of them at full width and that share
    of them for a call on fewer channels. Not part of the tuner's cost, as it is not of NCCL's."""
    if proto != "LL128" or nodes < 2 or algo not in ("ring", "tree") or step_s <= 0:
        return 0.0
    if algo == "tree":
        steps = 2 * math.log2(nodes)
    else:
        steps = 2 * (nodes - 1) if op == "allreduce" else nodes - 1
    used, full = channels_used(algo, proto, size, ranks, nodes, net_channels)
    return steps * proxy_channels(net_channels, nics) * used / full * step_s


def plugin_pick(op: str, gi: GroupInfo, hw: Platform, size: int) -> tuple[str, str] | None:
    """The (algorithm, protocol) the net plugin's tuner forces on this call, if any: only with a
    tuner table for the fabric, across nodes, and on NCCL 2.19 or later (tuner plugins' first
    release)."""
    if hw.tuner_plugin is None or gi.nodes < 2 or not hw.since(2, 19):
        return None
    return plugin_choice(hw.tuner_plugin, op, size, gi.n, gi.nodes)


def fastest(predictions: Iterable[R], cost: Callable[[R], float] | None = None) -> R:
    """The prediction with the smallest *cost* (default its ``time_s``; the first of equal ones)."""
    best: R | None = None
    best_cost = math.inf
    for r in predictions:
        c = r.time_s if cost is None else cost(r)
        if best is None or c < best_cost:
            best, best_cost = r, c
    assert best is not None, "no algorithm to choose from"
    return best


def _why_not(algo: str, op: str, hw: Platform, avail: list[str]) -> str:
    where = f"{hw.topology} ({hw.chip})"
    reason = {
        "nvls": f"needs NVLink SHARP (NVSwitch gen 3+) inside one node; {where} "
                f"{'has none' if not hw.nvls else 'is used across nodes here'}",
        "nvls_tree": f"needs NVLink SHARP and several nodes; {where} "
                     f"{'has no NVLS' if not hw.nvls else 'group is on one node'}",
        "collnet": "needs InfiniBand SHARP switches (cluster.sharp: true) and several nodes",
        "tree": "is an all-reduce across several nodes",
        "torus": "is for TPU slices",
        "pat": ("is NCCL's all-gather / reduce-scatter across nodes with one GPU per node, "
                "from NCCL 2.23" + (f" (this run: {hw.nccl[0]}.{hw.nccl[1]})" if hw.nccl else "")),
    }.get(algo, f"does not implement {op} here")
    return f"--algo {algo}: {reason}; available for {op}: {', '.join(avail)}"


def call_time_s(op: str, algo: str, proto: str, size: int, ranks: int, nodes: int, arch: str,
                line_s: float, busbw_factor: float, wire_intra_s: float, wire_inter_s: float,
                net_Bps: float = 0.0, since_2_23: bool = True,
                net_us: tuple[float, float] | None = None,
                nvls_s: float | None = None, proxy_step_s: float = 0.0,
                nvls: bool = True, net_channels: int | None = None,
                nics: int = NET_RAILS) -> tuple[float, float, float]:
    """(latency, transfer, tuner) seconds of one GPU call of *size* bytes.

    *line_s* is the transfer time at the links' rates (the flow model's); the protocol's share of
    the bandwidth, NVLS's efficiency and NCCL's bus-bandwidth ceilings (*busbw_factor*: nccl-tests'
    busbw / algbw) stretch it. Latency is NCCL's per-algorithm model with the topology's wire
    latencies; send/recv-based algorithms (no entry in NCCL's model) cost one ring Simple step and
    hierarchical the ring all-reduce's latency.

    What the call takes (latency + transfer) and what NCCL's tuner believes it takes (*tuner*, the
    cost it picks algorithm and protocol by) differ the way they do in NCCL: the tuner prices every
    call on all channels, NVLS at its fixed nvlsEfficiency and trees with its treeCorrectionFactor
    (``ncclTopoGetAlgoTime``); the call then runs on the channels its size earns
    (``channels_used``) and, on NVLS, with the chunks its size gets (``nvls_chunk_bytes``); an
    NVLSTree call also fills its pipeline first (``nvls_tree_fill_s``; *net_Bps*: one GPU's rate
    into the scale-out network, 0 for none; *since_2_23*: the NCCL release has 2.23's latency
    rules).

    NVLS's efficiency is its switches' (NCCL: intraBw = bwIntra x nvlsEfficiency, then the smaller
    of that and the network's bandwidth): *nvls_s*, the transfer time of the NVLS traffic alone at
    the links' rates, is what it stretches; a call whose network part (*line_s* is the whole,
    both parts at once) takes longer than the stretched NVLS part runs at the network's pace.
    None: all of *line_s* is NVLS traffic. CollNet's node-local part is NVLS traffic only where
    the NVSwitches reduce (*nvls*); elsewhere the GPUs' own reduce-scatter and all-gather carry it
    at the links' rate. *net_channels* / *nics*: the topology's channels across nodes and the NICs
    they run on (``channels``, ``proxy_channels``).
    """
    base = line_s / protocol_factor(algo, proto, nodes)
    tuned = transfer = base
    if algo in ("nvls", "nvls_tree") or (algo == "collnet" and nvls):
        switch = base if nvls_s is None or algo == "collnet" else nvls_s
        tuned = max(base, switch / NVLS_EFFICIENCY.get(arch, 0.85))
        transfer = tuned
        if algo != "collnet":
            transfer = max(base, switch / nvls_efficiency(arch, nvls_chunk_bytes(algo, size, ranks,
                                                                                  nodes)))
    cap = busbw_cap_GBps(algo, proto, arch, nodes, net_channels)
    floor = 0.0
    # A ring LL call bounds its whole self by LL's ceiling (llMaxBw) whatever its channels: NCCL
    # gives each ring LL channel nRanks times the bytes of any other before it adds one, and the
    # few channels a small call runs on each stream at their links' share; elsewhere the ceiling
    # is shared by the channels, so a call on fewer gets their share of it.
    whole_call = algo == "ring" and proto == "LL"
    if math.isfinite(cap) and size > 0:
        floor = busbw_factor * size / (cap * 1e9)          # NCCL's ceiling on bus bandwidth
        tuned = max(tuned, floor)
        if not whole_call:
            transfer = max(transfer, floor)
    used, full = channels_used(algo, proto, size, ranks, nodes, net_channels)
    slowdown = full / used
    if algo == "tree" and op == "allreduce":
        # NCCL's tree correction is what its developers measured trees to lose at medium sizes,
        # channel shortfall and pipeline fill included: the largest of the losses, counted once
        tuned /= tree_correction(proto, size)
        slowdown = max(slowdown, 1 / tree_correction(proto, size))
        if proto == "Simple" and nodes > 1:
            # its pipeline fill: the same medium-size loss where a deep tree makes it larger
            slowdown = max(slowdown, tree_fill_factor(size, ranks, nodes, used))
    transfer *= slowdown
    if whole_call:
        transfer = max(transfer, floor)
    if algo == "nvls_tree" and net_Bps > 0:
        transfer += nvls_tree_fill_s(size, ranks, nodes, net_Bps)
    if algo in ("pairwise", "p2p"):
        lat = latency_s("ring", proto, "sendrecv", 2, min(nodes, 2), size, wire_intra_s, wire_inter_s,
                        net_us=net_us)
    else:
        lat_algo = algo if algo in ("ring", "tree", "nvls", "nvls_tree", "collnet", "pat") else "ring"
        lat_op = op if algo != "hierarchical" else "allreduce"
        lat = latency_s(lat_algo, proto, lat_op, ranks, nodes, size, wire_intra_s, wire_inter_s,
                        exposed_net=since_2_23, net_us=net_us, net_channels=net_channels)
    wait = proxy_wait_s(op, algo, proto, size, ranks, nodes, proxy_step_s, net_channels, nics)
    return lat + wait, transfer, lat + tuned
