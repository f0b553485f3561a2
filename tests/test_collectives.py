"""Collectives: closed forms on uncontended regular cases, fast path = event path, choice, errors."""

from __future__ import annotations

import math

import pytest
import simpy
from reference_engines import FluidNetwork, run_stages

from sim.collectives import CollectiveModel, busbw_factor, stages_for
from sim.config import load_cluster, load_topology_spec
from sim.config.topology_specs import bundled_topologies
from sim.errors import ConfigError
from sim.topology import build_topology

FULL_RATE: dict[str, float] = {}          # every link at its line rate, for closed-form checks
GiB = 2**30


def model(name: str, chips: int | None = None, efficiency=FULL_RATE, **kw) -> CollectiveModel:
    return CollectiveModel(build_topology(load_cluster(name, chips, **kw)), efficiency)


def transfer_s(m: CollectiveModel, op: str, size: int, algo: str, group=None) -> float:
    per_byte, _ = m._cost(op, m._group(group), algo)
    return per_byte * size


# --------------------------------------------------------------------------- closed forms

@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_allreduce_on_a_switch_is_the_alpha_beta_form(n: int) -> None:
    # Ring all-reduce moves 2(n-1)/n of the buffer through each GPU's link (Thakur et al. 2005);
    # an H100 has 18 x 25 GB/s of NVLink per direction.
    m = model("dgx-h100", 8)
    t = transfer_s(m, "allreduce", GiB, "ring", group=list(range(n)))
    assert t == pytest.approx(2 * (n - 1) / n * GiB / 450e9, rel=1e-9)


@pytest.mark.parametrize("name, switch_reduces", [("dgx-a100", False), ("dgx-h100", True)])
def test_collnet_node_traffic_follows_the_switches(name: str, switch_reduces: bool) -> None:
    # SHARP all-reduce over 4 nodes, whose NICs are not the bottleneck: without NVLink SHARP the
    # node's part is the GPUs' own reduce-scatter + all-gather, 2 (ppn-1)/ppn of the buffer each
    # way through each GPU's NVLinks (12 x 25 GB/s on A100); with it the switch reduces and
    # multicasts, S + S/ppn each way (18 x 25 GB/s on H100).
    m = model(name, 32, sharp=True)
    nvlink_Bps = {"dgx-a100": 300e9, "dgx-h100": 450e9}[name]
    vol = GiB * (1 + 1 / 8) if switch_reduces else 2 * GiB * 7 / 8
    assert transfer_s(m, "allreduce", GiB, "collnet") == pytest.approx(vol / nvlink_Bps, rel=1e-9)


def test_ring_allgather_across_nodes_is_node_egress_bound() -> None:
    # SB-GPU: cross-node all-gather ~ B / W_node_egress = B / (8 x 50 GB/s) for large n; exact for
    # the rail rings: each node sends (n-1)/n of the buffer over its 8 NICs.
    m = model("dgx-h100", 64)
    t = transfer_s(m, "allgather", GiB, "ring")
    assert t == pytest.approx(63 / 64 * GiB / 400e9, rel=0.02)


@pytest.mark.parametrize("name, slice_, link_GBps", [
    ("tpu-v4", "16x16x16", 45), ("tpu-v4", "8x8x8", 45), ("tpu-v4", "4x4x4", 45),
    ("tpu-v5p", "16x16x16", 100), ("tpu-v5e", "16x16", 50), ("tpu-v6e", "16x16", 100)])
def test_torus_allgather_matches_scaling_book(name: str, slice_: str, link_GBps: float) -> None:
    # SB-SHARD: AllGather over D axes T = V / (W_ici_bidi * D) when bandwidth bound;
    # T_min * sum(X_i) / 2 when latency bound (T_min = 1 us per hop).
    m = model(name, slice_=slice_)
    dims = [int(x) for x in slice_.split("x")]
    w_bidi = 2 * link_GBps * 1e9
    big = 4 * GiB
    t = m.time("allgather", big, algo="torus")
    assert t.transfer_s == pytest.approx(big / (w_bidi * len(dims)), rel=0.05)
    small = m.time("allgather", 3 * 4096, algo="torus")
    assert small.latency_s == pytest.approx(1e-6 * sum(dims) / 2, rel=0.05)


def test_torus_allreduce_is_twice_allgather() -> None:
    m = model("tpu-v4", 4096)
    ag = m.time("allgather", GiB, algo="torus").transfer_s
    ar = m.time("allreduce", GiB, algo="torus").transfer_s
    assert ar == pytest.approx(2 * ag, rel=1e-6)                 # SB-SHARD: AR = RS + AG


def test_one_axis_allgather_on_a_2d_pod() -> None:
    # 16 chips along one wrapped axis of a v5e pod. SB-SHARD: each hop moves a V/X chunk both ways,
    # T_hop = 2V / (X W_ici_bidi); SB counts X/2 hops (T = V / W_ici_bidi) where the last of them
    # carries half chunks, i.e. (X-1)/2 hops' worth of data: T = V (X-1) / (X W_ici_bidi).
    m = model("tpu-v5e", 256)
    t = m.time("allgather", GiB, group=list(range(16)), algo="torus")
    assert t.transfer_s == pytest.approx(GiB * 15 / 16 / 100e9, rel=1e-9)
    assert t.transfer_s == pytest.approx(GiB / 100e9, rel=0.07)         # SB's rounded form


def test_no_wraparound_doubles_the_time() -> None:
    # SB-TPU: without wraparound "typically doubles the time"; exactly 2x for a line vs a ring of 4.
    wrapped = model("tpu-v4", slice_="4x4x4")
    line = model("tpu-v4", slice_="2x4x4")
    g_wrap = [d for d in range(64) if d // 16 == 0 and (d // 4) % 4 == 0]      # 4 chips along z
    g_line = [d for d in range(32) if d // 16 == 0 and (d // 4) % 4 == 0]
    a = wrapped.time("allgather", GiB, group=g_wrap, algo="torus").transfer_s
    b = line.time("allgather", GiB, group=g_line, algo="torus").transfer_s
    assert b / a == pytest.approx(2.0, rel=1e-6)


def test_busbw_factors_are_nccl_tests() -> None:
    assert busbw_factor("allreduce", 8) == pytest.approx(1.75)
    assert busbw_factor("allgather", 8) == busbw_factor("reducescatter", 8) == pytest.approx(0.875)
    assert busbw_factor("sendrecv", 8) == busbw_factor("broadcast", 8) == 1.0


# --------------------------------------------------------------------------- fast = general path

CASES = [
    ("dgx-h100", 16, {}, "allreduce", "ring"),
    ("dgx-h100", 24, {}, "allgather", "ring"),
    ("dgx-h100", 32, {}, "allreduce", "tree"),
    ("dgx-h100", 8, {}, "allreduce", "nvls"),
    ("dgx-h100", 16, {}, "allreduce", "nvls_tree"),
    ("dgx-h100", 32, {"sharp": True}, "allreduce", "collnet"),
    ("dgx-h100", 32, {}, "allreduce", "hierarchical"),
    ("dgx-h100", 16, {}, "alltoall", "pairwise"),
    ("dgx-a100", 16, {}, "sendrecv", "p2p"),
    ("tpu-v4", 64, {}, "allreduce", "torus"),
    ("tpu-v4", 32, {}, "reducescatter", "torus"),
    ("tpu-v5e", 512, {}, "allreduce", "hierarchical"),
]


@pytest.mark.parametrize("name, chips, kw, op, algo", CASES)
def test_fast_path_equals_event_simulation(name, chips, kw, op, algo) -> None:
    """The fast path solves one step and multiplies; the simpy engine plays every step."""
    m = model(name, chips, efficiency=None, **kw)
    size = 2**24
    env = simpy.Environment()
    net = FluidNetwork(env, m.links, m.router)
    env.process(run_stages(env, net, stages_for(m, op, size, None, algo)))
    env.run()
    assert env.now == pytest.approx(transfer_s(m, op, size, algo), rel=1e-9)


def test_two_collectives_sharing_nics_each_take_twice_as_long() -> None:
    m = model("dgx-h100", 32, efficiency=None)
    group = [0, 8, 16, 24]                 # one GPU per node: every byte crosses its rail-0 NIC
    size = 2**26
    solo = transfer_s(m, "allreduce", size, "ring", group)
    env = simpy.Environment()
    net = FluidNetwork(env, m.links, m.router)
    ends: list[float] = []

    def call():
        yield env.process(run_stages(env, net, stages_for(m, "allreduce", size, group, "ring")))
        ends.append(env.now)

    env.process(call())
    env.process(call())
    env.run()
    assert ends == pytest.approx([2 * solo, 2 * solo], rel=0.01)


def test_concurrent_replica_allreduces_share_each_hosts_dcn_uplink() -> None:
    """Two v5p slices: every chip all-reduces with its twin in the other slice at once. Alone, a
    pair is bound by the chip's PCIe link (16 GB/s); together, the 4 chips of a host share the
    host's 4 x 6.25 GB/s DCN uplink, so each moves at 6.25 GB/s (GCP-v5p: 50 Gb/s per chip)."""
    m = model("tpu-v5p", 128, slices=2)
    size = 2**28
    groups = [[d, d + 64] for d in range(64)]
    alone = m.time("allreduce", size, groups[0])
    together = m.time_concurrent("allreduce", size, groups)
    assert alone.transfer_s == pytest.approx(size / 16e9, rel=1e-6)
    assert together.transfer_s == pytest.approx(size / 6.25e9, rel=1e-6)
    assert together.latency_s == alone.latency_s and together.algo == alone.algo
    # disjoint groups on links of their own do not slow each other down
    ici = m.time_concurrent("allgather", size, [[0, 1], [2, 3]])
    assert ici.time_s == pytest.approx(m.time("allgather", size, [0, 1]).time_s)


# --------------------------------------------------------------------------- algorithm choice

def test_protocols_by_size_like_nccl() -> None:
    m = model("dgx-h100", 8, efficiency=None)
    assert m.time("allreduce", 1024).proto == "LL"                 # latency regime
    big = m.time("allreduce", GiB)
    assert (big.algo, big.proto) == ("nvls", "Simple")             # NVLink SHARP on Hopper
    a100 = model("dgx-a100", 8, efficiency=None).time("allreduce", GiB)
    assert (a100.algo, a100.proto) == ("ring", "Simple")           # no NVLS on A100


def test_multi_node_uses_trees_for_small_messages() -> None:
    m = model("dgx-h100", 64, efficiency=None)
    assert m.time("allreduce", 4096).algo == "tree"
    assert m.time("allreduce", 4096, algo="ring").time_s > m.time("allreduce", 4096).time_s


def test_latency_grows_with_scale_and_bandwidth_saturates() -> None:
    small = [model("dgx-h100", n, efficiency=None).time("allreduce", 8).time_s for n in (16, 128, 1024)]
    assert small == sorted(small)
    m = model("dgx-h100", 16, efficiency=None)
    bw = [m.time("allreduce", s).busbw_GBps for s in (2**20, 2**24, 2**28, 2**32)]
    assert bw == sorted(bw)


# --------------------------------------------------------------------------- bad input

def test_bad_input_messages() -> None:
    m = model("dgx-a100", 8, efficiency=None)
    with pytest.raises(ConfigError, match=r"--op: unknown collective 'allreduc'; valid: allreduce"):
        m.time("allreduc", 1024)
    with pytest.raises(ConfigError, match=r"--algo nvls: needs NVLink SHARP .* available for allreduce: ring"):
        m.time("allreduce", 1024, algo="nvls")
    with pytest.raises(ConfigError, match=r"--algo: unknown algorithm 'magic'"):
        m.time("allreduce", 1024, algo="magic")
    with pytest.raises(ConfigError, match=r"group: 16 ranks but the topology has 8 chips"):
        m.time("allreduce", 1024, group=list(range(16)))
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ConfigError, match="size: must be a positive integer"):
            m.time("allreduce", bad)


# What `clustersim collective --algo A` prints where A is not offered (each record's refusal),
# byte for byte as before the algorithms became records.
_REFUSALS = {
    "tree": "is an all-reduce across several nodes",
    "nvls": "needs NVLink SHARP (NVSwitch gen 3+) inside one node; dgx-h100 (H100-SXM) is used "
            "across nodes here",
    "nvls_tree": "needs NVLink SHARP and several nodes; dgx-h100 (H100-SXM) group is on one node",
    "collnet": "needs InfiniBand SHARP switches (cluster.sharp: true) and several nodes",
    "hierarchical": "does not implement allgather here",
    "torus": "is for TPU slices",
    "pairwise": "does not implement allgather here",
    "p2p": "does not implement allgather here",
    "pat": "is NCCL's all-gather / reduce-scatter across nodes with one GPU per node, from NCCL 2.23 "
           "(this run: 2.22)",
}


@pytest.mark.parametrize("algo", sorted(_REFUSALS))
def test_forced_algorithm_refusals_say_why(algo: str) -> None:
    m = CollectiveModel(build_topology(load_cluster("dgx-h100", 16)), nccl_version=(2, 22))
    with pytest.raises(ConfigError) as e:
        m.time("allgather", 1024, algo=algo)
    assert str(e.value) == f"--algo {algo}: {_REFUSALS[algo]}; available for allgather: ring"
    a100 = model("dgx-a100", 8)
    for name, why in (("nvls", "has none"), ("nvls_tree", "has no NVLS")):
        with pytest.raises(ConfigError, match=rf"^--algo {name}: needs NVLink SHARP .*"
                                              rf"dgx-a100 \(A100-SXM-80GB\) {why}; available for allreduce: ring$"):
            a100.time("allreduce", 1024, algo=name)


def test_every_registered_algorithm_is_one_complete_record() -> None:
    """The registry's contract (sim.collectives.algorithm): unique names in the --algo list, known
    operations, a platform, stages for every operation it is offered for, and on GPUs NCCL's
    latency for it; what the tuner offers is always a registered name."""
    from sim.collectives import OPS
    from sim.collectives.algorithm import Call
    from sim.collectives.algorithms import ALGORITHMS, BY_NAME, REGISTRY

    assert ALGORITHMS == tuple(a.name for a in REGISTRY) and len(set(ALGORITHMS)) == len(REGISTRY)
    for a in REGISTRY:
        assert a.ops and a.ops <= set(OPS) and (a.on_gpu or a.on_tpu), a.name
        assert BY_NAME[a.name] is a
    seen = set()
    for name, chips, kw in (("dgx-h100", 32, {"sharp": True}), ("dgx-h100", 128, {}), ("tpu-v5p", 256, {"slices": 2}),
                            ("tpu-v4", 64, {})):
        m = model(name, chips, **kw)
        n = m.topo.chips
        for group in (None, list(range(0, n, 8)), list(range(8))):
            gi = m.group_info(group)
            for op in OPS:
                for algo in m.algorithms(op, gi):
                    seen.add(algo)
                    a = BY_NAME[algo]
                    assert a.stages(op, gi, 1e6, m.topo), (algo, op)
                    if not m.hw.tpu:
                        for proto in a.protocols(False):
                            lat = a.latency_s(Call(op, proto, 2**20, gi.n, gi.nodes))
                            assert math.isfinite(lat) and lat >= 0, (algo, op, proto)
    assert seen == set(ALGORITHMS)


def test_single_rank_group_costs_nothing() -> None:
    assert model("dgx-h100", 8).time("allreduce", GiB, group=[3]).time_s == 0.0
    assert math.isfinite(model("tpu-v4", 64).time("alltoall", GiB).time_s)


def test_model_errors_name_fields_not_flags() -> None:
    """Errors raised inside the model name the call's fields (the CLI re-words them as flags)."""
    from sim.collectives.hierarchical import hierarchical
    from sim.collectives.stages import GroupInfo

    topo = build_topology(load_cluster("dgx-h100", 16))
    with pytest.raises(ConfigError, match=r"^algo hierarchical: only for allreduce, got allgather"):
        hierarchical("allgather", GroupInfo(tuple(range(16))), 1.0, topo, [[0, 1], [8, 9]])


def test_trees_are_nccls_in_order_double_binary_tree() -> None:
    """The tree NCCL builds over 14 nodes (the diagram in NVIDIA/nccl src/graph/trees.cc): root 0
    above 8, 8 above 4 and 12, leaves 1, 3, 5, ... under their rank-order neighbours; the second
    tree mirrors it for an even count and shifts it by one for an odd count."""
    from sim.collectives.tree import tree_edges
    t0, t1 = tree_edges(14)
    parent = dict(t0)
    assert parent == {8: 0, 4: 8, 12: 8, 2: 4, 6: 4, 10: 12, 13: 12,
                      1: 2, 3: 2, 5: 6, 7: 6, 9: 10, 11: 10}
    assert dict(t1) == {13 - c: 13 - p for c, p in t0}
    odd0, odd1 = tree_edges(5)
    assert dict(odd0) == {1: 2, 2: 4, 3: 2, 4: 0}
    assert dict(odd1) == {(c + 1) % 5: (p + 1) % 5 for c, p in odd0}
    # every node but the root has one parent and no node more than two children, in each tree
    for n in (2, 7, 64, 540):
        for t in tree_edges(n):
            up = dict(t)
            assert len(up) == len(t) == n - 1                 # one parent each but the root
            (root,) = set(range(n)) - set(up)
            for c in up:                                       # every node reaches the root
                seen = 0
                while c != root and seen <= n:
                    c, seen = up[c], seen + 1
                assert c == root
            assert max(sum(1 for _, p in t if p == q) for q in range(n)) <= 2


def test_trees_keep_most_edges_under_one_switch() -> None:
    """In rank order, half a tree's edges join neighbours: on Polaris's dragonfly (8 nodes a
    switch) a 128-node tree all-reduce runs at its NICs' rate, as the ring does, instead of piling
    its edges onto the switches' local links."""
    m = CollectiveModel(build_topology(load_cluster("polaris", 512)))
    tree, ring = m.time("allreduce", 2**30, algo="tree"), m.time("allreduce", 2**30, algo="ring")
    assert tree.busbw_GBps > 0.9 * ring.busbw_GBps


GPU_TOPOLOGIES = [t for t in bundled_topologies() if not load_topology_spec(t).chip.is_tpu]


@pytest.mark.parametrize("name", GPU_TOPOLOGIES)
def test_a_group_on_one_node_costs_the_same_on_every_node(name: str) -> None:
    """The per-byte cache keys a one-node group by its ranks' places on the node
    (CollectiveModel._class_of): worked out afresh on the first node, a middle one and the last,
    every algorithm NCCL offers such a group gives the same transfer time and step count, to
    the bit."""
    gpn = load_topology_spec(name).gpus_per_node
    m = model(name, gpn * (4 if gpn > 8 else 40), efficiency=None)   # past one scalable unit
    nodes = len(m.topo.devices) // gpn
    assert nodes > 2
    for local in ([0, 1], list(range(gpn)), list(range(0, gpn, 2))):
        if len(local) < 2 or max(local) >= gpn:
            continue
        for op in ("allreduce", "allgather", "reducescatter"):
            first = m._group(local)
            for algo in m.algorithms(op, first):
                want = m._solve_cost(op, first, algo)
                for node in {nodes // 2, nodes - 1}:
                    other = m._group([node * gpn + r for r in local])
                    assert m._solve_cost(op, other, algo) == want, (name, local, op, algo, node)
                    assert m._class_of(other) == m._class_of(first)


FAT_TREES = [t for t in GPU_TOPOLOGIES if load_topology_spec(t).layout == "fat-tree"]


def _relabelled(rng, nodes: int, su_nodes: int, pod_sus: int, picked: list[int]) -> dict[int, int]:
    """A map of the *picked* nodes onto others in id order: their pods onto pods, their scalable
    units onto units of the image pod, their nodes onto nodes of the image unit (what
    ``fabric_class`` calls alike); {} where the cluster has too few to pick from."""
    def su(n: int) -> int:
        return n // su_nodes

    def pod(u: int) -> int:
        return u // pod_sus if pod_sus else 0
    units = sorted({su(n) for n in picked})
    pods = sorted({pod(u) for u in units})
    all_units = range(su(nodes - 1) + 1)
    pod_map = dict(zip(pods, sorted(rng.sample(range(pod(all_units[-1]) + 1), len(pods)))))
    unit_map: dict[int, int] = {}
    for p in pods:
        mine = [u for u in units if pod(u) == p]
        there = [u for u in all_units if pod(u) == pod_map[p]]
        if len(there) < len(mine):
            return {}
        unit_map.update(zip(mine, sorted(rng.sample(there, len(mine)))))
    out: dict[int, int] = {}
    for u in units:
        mine = [n for n in picked if su(n) == u]
        there = range(unit_map[u] * su_nodes, min(nodes, (unit_map[u] + 1) * su_nodes))
        if len(there) < len(mine):
            return {}
        out.update(zip(mine, sorted(rng.sample(there, len(mine)))))
    return out


@pytest.mark.parametrize("name, units", [(t, 2.5) for t in FAT_TREES]
                         + [("dgx-h100", 10.5), ("h100-3tier", 30.5)])     # three tiers; pods
def test_groups_alike_on_a_fat_tree_cost_the_same(name: str, units: float) -> None:
    """The per-byte cache keys a group across nodes by ``fabric_class``: its ranks' pods, units
    and nodes ranked in id order and their places on their nodes. Random groups (uneven, ranks
    in any order) and their images under random such relabellings, each timed by a model of its
    own, cost the same to the bit under every algorithm; a dragonfly has no such class."""
    import random

    from sim.collectives.stages import fabric_class

    spec = load_topology_spec(name)
    gpn, nodes = spec.gpus_per_node, int(spec.su_nodes * units)
    topo = build_topology(load_cluster(name, nodes * gpn))
    rng = random.Random(7)
    compared = 0
    for _ in range(8):
        picked = sorted(rng.sample(range(nodes), rng.randint(2, 5)))
        image = _relabelled(rng, nodes, spec.su_nodes, spec.pod_sus, picked)
        if not image:
            continue
        places = [sorted(rng.sample(range(gpn), rng.randint(1, min(3, gpn)))) for _ in picked]
        pairs = [(n * gpn + p, image[n] * gpn + p) for n, ps in zip(picked, places) for p in ps]
        rng.shuffle(pairs)
        a, b = [x for x, _ in pairs], [y for _, y in pairs]
        ma, mb = CollectiveModel(topo), CollectiveModel(topo)
        assert fabric_class(topo, ma._group(a)) == fabric_class(topo, mb._group(b)) is not None
        for op in ("allreduce", "allgather", "reducescatter", "broadcast"):
            for size in (1 << 16, 1 << 28):
                assert ma.time(op, size, a) == mb.time(op, size, b), (name, op, size, a, b)
                compared += 1
    assert compared >= 32
    dragonfly = build_topology(load_cluster("slingshot-dragonfly", 64))
    assert fabric_class(dragonfly, CollectiveModel(dragonfly)._group([0, 8, 16])) is None


# --------------------------------------------------------------------------- torus groups in bulk

def _groups_by_stride(chips: int, size: int, stride: int) -> list[list[int]]:
    """*chips* split into groups of *size* chips *stride* apart (blocks of size x stride)."""
    out = []
    for block in range(0, chips, size * stride):
        for first in range(block, block + stride):
            out.append([first + k * stride for k in range(size)])
    return out


@pytest.mark.parametrize("name, chips, size, stride", [
    ("tpu-v4", 64, 4, 1),            # along the fastest axis, a full wrapped ring
    ("tpu-v4", 64, 4, 4),            # along the middle axis
    ("tpu-v4", 64, 16, 4),           # two axes at once
    ("tpu-v4", 64, 2, 2),            # every other chip: no two members are neighbours
    ("tpu-v4", 512, 8, 64),          # across cubes (optical links) along the slowest axis
    ("tpu-v5p", 128, 8, 1),          # a line of 8 on an axis of 8
    ("tpu-v5e", 256, 16, 16),        # a 2-D pod's column, wrapped
    ("tpu-v5e", 512, 4, 1),          # two pods over the DCN, each group on one
    ("tpu-v6e", 64, 8, 1),           # 8x8 without wraparound
])
@pytest.mark.parametrize("op", ["allgather", "reducescatter", "allreduce", "broadcast"])
def test_torus_in_bulk_is_every_groups_torus_merged(name: str, chips: int, size: int,
                                                    stride: int, op: str) -> None:
    """``torus_bulk`` (one numpy pass over all groups) gives, phase by phase, what merging each
    group's own ``torus`` stages gives: the same flows in the same order, bit for bit."""
    import numpy as np

    from sim.collectives import merge_phases
    from sim.collectives.stages import group_info
    from sim.collectives.torus import torus, torus_bulk
    t = build_topology(load_cluster(name, chips))
    groups = _groups_by_stride(chips, size, stride)
    bulk = torus_bulk(op, groups, 1e6, t)
    built = [torus(op, group_info(t, g), 1e6, t) for g in groups]
    want = [merge_phases([b[j][k] for b in built])
            for j, stage in enumerate(built[0]) for k in range(len(stage))]
    assert bulk is not None and len(bulk) == len(want)
    for a, b in zip(bulk, want):
        assert (a.name, a.steps, a.extra, a.hops_per_step, a.uniform) == \
            (b.name, b.steps, b.extra, b.hops_per_step, b.uniform)
        for f in ("src", "dst", "nbytes"):
            x, y = getattr(a, f), getattr(b, f)
            assert x.dtype == y.dtype and np.array_equal(x, y), (f, a.name)


def test_torus_in_bulk_declines_what_it_cannot_merge() -> None:
    """Groups of unequal sizes or extents, shared chips, groups over two pods or of one chip
    take the per-group path (``torus_bulk`` answers None)."""
    from sim.collectives.torus import torus_bulk
    t = build_topology(load_cluster("tpu-v5e", 512))
    assert torus_bulk("allgather", [[0, 1], [2, 3, 4]], 1e6, t) is None
    assert torus_bulk("allgather", [[0, 1, 2, 3], [4, 5, 20, 21]], 1e6, t) is None   # 4x1, 2x2
    assert torus_bulk("allgather", [[0, 1], [1, 2]], 1e6, t) is None
    assert torus_bulk("allgather", [[0, 256], [1, 257]], 1e6, t) is None
    assert torus_bulk("allgather", [[0], [1]], 1e6, t) is None
    assert torus_bulk("allgather", [[0, 1], [2, 3]], 1e6, t) is not None


@pytest.mark.parametrize("name, chips, groups", [
    ("dgx-h100", 64, [[8 * k + j for j in range(8)] for k in range(8)]),        # one node each
    ("dgx-h100", 64, [[t + 8 * k for k in range(8)] for t in range(8)]),        # one GPU a node
    ("dgx-h100", 64, [[b + t + 16 * k for k in range(4) for t in (0, 8)] for b in range(4)]),
    ("dgx-h100", 64, [[16 * k + j for j in range(16)] for k in range(4)]),      # two nodes each
    ("dgx-h100", 64, [[2 * k, 2 * k + 1] for k in range(32)]),                  # pairs
    ("hgx-h100-4gpu", 16, [[4 * k + j for j in range(4)] for k in range(4)]),   # NVLink mesh
    ("tpu-v4", 64, [[4 * k + j for j in range(4)] for k in range(16)]),         # TPU fallback
])
@pytest.mark.parametrize("op", ["allgather", "reducescatter", "allreduce", "broadcast"])
def test_rings_in_bulk_are_every_groups_rings_merged(name: str, chips: int,
                                                     groups: list[list[int]], op: str) -> None:
    """``Ring.bulk_phases`` (the first group's rings, shifted to each group) gives, phase by
    phase, what merging each group's own rings gives: the same flows in the same order, bit for
    bit."""
    import numpy as np

    from sim.collectives import merge_phases
    from sim.collectives.algorithms import BY_NAME
    from sim.collectives.stages import group_info
    t = build_topology(load_cluster(name, chips))
    ring = BY_NAME["ring"]
    bulk = ring.bulk_phases(op, groups, 1e6, t)
    built = [ring.stages(op, group_info(t, g), 1e6, t) for g in groups]
    want = [merge_phases([b[j][k] for b in built])
            for j, stage in enumerate(built[0]) for k in range(len(stage))]
    assert bulk is not None and len(bulk) == len(want)
    for a, b in zip(bulk, want):
        assert (a.name, a.steps, a.extra, a.hops_per_step, a.uniform, a.to_switch, a.from_switch) == \
            (b.name, b.steps, b.extra, b.hops_per_step, b.uniform, b.to_switch, b.from_switch)
        for f in ("src", "dst", "nbytes"):
            x, y = getattr(a, f), getattr(b, f)
            assert x.dtype == y.dtype and np.array_equal(x, y), (f, a.name)


def test_rings_in_bulk_decline_groups_that_are_not_one_group_shifted() -> None:
    """Groups of unequal sizes, groups whose ranks are not the first's shifted, groups whose ranks
    sit on nodes differently (a shift across a node boundary) and a single group take the
    per-group path (``bulk_phases`` answers None)."""
    from sim.collectives.algorithms import BY_NAME
    t = build_topology(load_cluster("dgx-h100", 64))
    ring = BY_NAME["ring"]
    assert ring.bulk_phases("allgather", [[0, 1], [2, 3, 4]], 1e6, t) is None
    assert ring.bulk_phases("allgather", [[0, 1], [2, 4]], 1e6, t) is None
    assert ring.bulk_phases("allgather", [[6, 7, 8, 9], [7, 8, 9, 10]], 1e6, t) is None
    assert ring.bulk_phases("allgather", [[0, 8]], 1e6, t) is None
    assert ring.bulk_phases("allgather", [[6, 7, 8, 9], [14, 15, 16, 17]], 1e6, t) is not None


def test_large_groups_take_the_same_torus_stages_from_the_bulk_grid(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A group of more than ``_FEW_CHIPS`` chips takes its grid and links from ``_bulk_grid``
    (numpy): the same phases, flows in the same order and bytes as the per-chip walk, on whole
    and partial slices, wrapped or not, and on a strided group."""
    import numpy as np

    import sim.collectives.torus as tor
    from sim.collectives.stages import group_info

    cases = [("tpu-v4", 4096, range(0, 4096, 4)), ("tpu-v4", 4096, range(4096)),
             ("tpu-v4", 4096, range(1024)), ("tpu-v5e", 256, range(256)),
             ("tpu-v5e", 256, range(128)), ("tpu-v5p", 1024, range(512)),
             ("tpu-v6e", 256, range(0, 256, 2))]
    for name, chips, group in cases:
        t = build_topology(load_cluster(name, chips))
        gi = group_info(t, list(group))
        for op in ("allgather", "reducescatter", "allreduce"):
            fast = tor.torus(op, gi, 1e6, t)
            with monkeypatch.context() as m:
                m.setattr(tor, "_FEW_CHIPS", 10**9)          # the walk, for every size
                walk = tor.torus(op, gi, 1e6, t)
            assert [[(p.name, p.steps, p.hops_per_step) for p in s] for s in fast] == \
                [[(p.name, p.steps, p.hops_per_step) for p in s] for s in walk], (name, op)
            for fs, ws in zip(fast, walk):
                for f, w in zip(fs, ws):
                    assert np.array_equal(f.src, w.src) and np.array_equal(f.dst, w.dst)
                    assert np.array_equal(f.nbytes, w.nbytes), (name, op, f.name)


def test_a_group_strided_along_a_torus_axis_sends_over_the_chips_between_its_own() -> None:
    """A data-parallel group of every 4th chip along v5e's wrapped 16-chip axis (beside 4-way
    tensor parallelism) is a ring closed over the wraparound whose transfers cross 4 links each:
    alone as fast as a wrapped ring (half the open line's time), 4 links of latency a step, and
    the 4 interleaved groups at once 4x slower (every link carries a transfer of each)."""
    from sim.collectives.stages import group_info
    from sim.collectives.torus import torus

    t = build_topology(load_cluster("tpu-v5e", 256))
    net = CollectiveModel(t)
    strided = [0, 4, 8, 12]
    stages = torus("allgather", group_info(t, strided), 1e6, t)
    assert [(p.steps, p.hops_per_step, len(p.src)) for s in stages for p in s] == [(2, 4, 8)]
    lone = net.time("allgather", 10**8, strided)
    line = net.time("allgather", 10**8, [0, 1, 2, 3])
    assert lone.transfer_s == pytest.approx(line.transfer_s / 2)
    assert lone.latency_s == pytest.approx(2 * 4 * 1e-6)          # 2 steps of 4 links, 1 us each
    together = net.time_concurrent("allgather", 10**8, [[c + o for c in strided] for o in range(4)])
    assert together.transfer_s == pytest.approx(4 * lone.transfer_s)
