"""The collective model across sizes: NCCL's latency floor, protocol switches, channels, NVLS
chunks and PAT, each against a closed form written from NCCL's constants (FACTS.md section 3b,
NVIDIA/nccl tuning.cc and enqueue.cc), not from the program's output."""

from __future__ import annotations

import math

import pytest

from sim.collectives import CollectiveModel, busbw_factor, nccl, stages_for
from sim.collectives.algorithm import PROXY_CHANNELS, Call, Wires, proxy_channels
from sim.collectives.platform import Platform
from sim.collectives.ring import RING
from sim.collectives.sharp import NVLS, NVLS_TREE, nvls_efficiency
from sim.collectives.tree import TREE, tree_chunk_bytes, tree_correction, tree_depth, tree_fill_factor
from sim.config import load_cluster
from sim.errors import ConfigError
from sim.topology import build_topology

KiB, MiB, GiB = 2**10, 2**20, 2**30


def model(name: str, chips: int) -> CollectiveModel:
    return CollectiveModel(build_topology(load_cluster(name, chips)))


def _gpu(arch: str) -> Platform:
    """A GPU platform with NVLink SHARP, a current NCCL, NCCL's own network latencies and no proxy
    wait: NCCL's model alone."""
    return Platform("test", "test-gpu", arch, tpu=False, nvls=True, sharp=False, proxy_step_s=0.0)


# --------------------------------------------------------------------------- latency floor

def test_small_allreduce_on_one_node_is_ring_ll_latency() -> None:
    # Ring LL on 8 NVSwitch-connected GPUs: baseLat 6.6 us + 2(n-1) = 14 steps x hwLat NVLink 0.6 us;
    # the bundled DGX graphs have NCCL's reference wire latency, so nothing is added.
    r = model("dgx-h100", 8).time("allreduce", 8)
    assert (r.algo, r.proto) == ("ring", "LL")
    assert r.latency_s == pytest.approx((6.6 + 14 * 0.6) * 1e-6, rel=1e-9)
    assert r.time_s == pytest.approx(r.latency_s, rel=1e-3)        # 8 bytes: transfer negligible


def test_small_allreduce_across_nodes_is_tree_ll_latency() -> None:
    # Tree LL, 2 nodes x 8: baseLat 6.8 + 2 ((ppn-1) x 0.6 NVLink + log2(2) x 5.0 NET) = 25.2 us
    r = model("dgx-h100", 16).time("allreduce", 8)
    assert (r.algo, r.proto) == ("tree", "LL")
    assert r.latency_s == pytest.approx((6.8 + 2 * (7 * 0.6 + 1 * 5.0)) * 1e-6, rel=1e-9)
    # 8 nodes: three tree levels
    r8 = model("dgx-h100", 64).time("allreduce", 8)
    assert r8.latency_s == pytest.approx((6.8 + 2 * (7 * 0.6 + 3 * 5.0)) * 1e-6, rel=1e-9)


@pytest.mark.parametrize(("proto", "base", "hw"), [("LL", 6.6, 0.6), ("LL128", 14.0, 1.9), ("Simple", 8.4, 3.4)])
def test_forced_ring_latency_per_protocol(proto: str, base: float, hw: float) -> None:
    # every protocol's latency on one node: base + 14 steps x its NVLink hwLat
    assert RING.latency_s(Call("allreduce", proto, 8, 8, 1)) == pytest.approx((base + 14 * hw) * 1e-6)
    # all-gather: n-1 steps
    assert RING.latency_s(Call("allgather", proto, 8, 8, 1)) == pytest.approx((base + 7 * hw) * 1e-6)


# --------------------------------------------------------------------------- channels by size

def test_channels_drop_for_small_calls_like_nccl() -> None:
    # 24 channels on one node (12 found by the search, doubled); Simple wants 512 threads x 64 B
    # = 32 KiB per channel, ring LL 512 x 8 B x nRanks, LL128 640 x 8 B.
    assert RING.channels_used("Simple", GiB, 8, 1) == (24, 24)
    assert RING.channels_used("Simple", 64 * KiB, 8, 1) == (2, 24)
    assert RING.channels_used("Simple", 100 * KiB, 8, 1) == (3, 24)      # 96K <= 100K < 128K
    assert RING.channels_used("Simple", 1024, 8, 1) == (1, 24)
    assert RING.channels_used("LL", 64 * KiB, 8, 1) == (2, 24)           # 512 x 8 x 8 = 32K
    assert RING.channels_used("LL", 64 * KiB, 16, 2) == (1, 32)          # x 16 ranks = 64K
    assert RING.channels_used("LL128", 64 * KiB, 8, 1) == (12, 24)       # 5 KiB each
    assert TREE.channels_used("LL", 64 * KiB, 16, 2) == (16, 32)         # trees: no x nRanks
    assert NVLS.channels_used("Simple", 1024, 8, 1) == (16, 16)          # NVLS keeps its own


def test_channels_across_nodes_follow_the_topology() -> None:
    # Snellius's 2-node NCCL log: "8 coll channels" on 4 NDR200 NICs (4 graph channels, doubled);
    # the DGX default is 16 graph channels on 8 NICs
    m = model("hgx-h100-4gpu", 8)
    assert (m.hw.net_channels, m.hw.net_nics) == (4, 4)
    assert (model("dgx-h100", 16).hw.net_channels, model("dgx-h100", 16).hw.net_nics) == (16, 8)
    assert TREE.channels_used("Simple", GiB, 8, 2, 4) == (8, 8)
    assert TREE.channels_used("Simple", GiB, 16, 2) == (32, 32)
    assert RING.channels(True, 4) == 12                     # one node: NVLink's own
    # a NIC's proxy serves 2 run-time channels there, 4 on the DGX
    assert proxy_channels(4, 4) == 2 and proxy_channels() == PROXY_CHANNELS == 4
    # NCCL's per-channel ceilings count them: tree LL128 on Hopper across 2 nodes, 36.7 GB/s each
    assert TREE.busbw_cap_GBps("LL128", "hopper", 2, 4) == pytest.approx(4 * 36.7)
    assert TREE.busbw_cap_GBps("LL128", "hopper", 2) == pytest.approx(16 * 36.7)


def test_fewer_channels_mean_proportionally_less_bandwidth() -> None:
    # Between 32 KiB and 768 KiB a ring LL call on 8 GPUs adds one channel per 32 KiB, so its
    # transfer time stays flat: NCCL sizes the channels to keep each one's work constant.
    m = model("dgx-h100", 8)
    t = [m.time("allreduce", s, algo="ring").transfer_s for s in (64 * KiB, 128 * KiB, 256 * KiB)]
    assert t[1] == pytest.approx(t[0], rel=1e-6) and t[2] == pytest.approx(t[0], rel=1e-6)
    # with all 24 channels it grows with the size again (same protocol, Simple)
    big = [m.time("allreduce", s, algo="ring") for s in (256 * MiB, 512 * MiB)]
    assert {r.proto for r in big} == {"Simple"}
    assert big[1].transfer_s / big[0].transfer_s == pytest.approx(2, rel=1e-6)


def test_ring_ll_ceiling_bounds_the_call_not_each_channel() -> None:
    """LL's ceiling (llMaxBw, 141 GB/s on one Hopper node) bounds a ring LL call as a whole: at
    768 KiB on 24 channels the call runs at the ceiling; at 64 KiB its 2 channels run at their
    links' share, which is more than 2/24 of the ceiling (what charging each channel a share of
    it gave). Trees keep the channels' share: 64 KiB tree LL over 16 of 32 channels takes
    twice its time at the 2-node LL ceiling (39 GB/s)."""
    m = model("dgx-h100", 8)
    full = m.time("allreduce", 768 * KiB, algo="ring")
    assert full.proto == "LL"
    assert busbw_factor("allreduce", 8) * 768 * KiB / full.transfer_s / 1e9 == pytest.approx(141.0, rel=1e-6)
    small = m.time("allreduce", 64 * KiB, algo="ring")
    assert small.proto == "LL"
    assert busbw_factor("allreduce", 8) * 64 * KiB / small.transfer_s / 1e9 > 2 / 24 * 141.0 * 1.2
    tree = model("dgx-h100", 16).time("allreduce", 64 * KiB, algo="tree")
    assert tree.proto == "LL"
    ceiling_s = busbw_factor("allreduce", 16) * 64 * KiB / 39e9
    assert tree.transfer_s == pytest.approx(2 * ceiling_s, rel=1e-6)


# --------------------------------------------------------------------------- NVLS chunks

def test_nvls_chunks_shrink_with_the_call_like_nccl() -> None:
    # 16 NVLS channels x 8 heads = 128 chunks in flight; 128 KiB chunks from 64 x 128 x 128 KiB
    # = 1 GiB, 64 KiB from 8 x 128 x 64 KiB = 64 MiB, 32 KiB from 2 x 128 x 32 KiB = 8 MiB.
    sizes = {16 * GiB: 128 * KiB, GiB: 128 * KiB, GiB - 1: 64 * KiB, 64 * MiB: 64 * KiB,
             64 * MiB - 1: 32 * KiB, 8 * MiB: 32 * KiB, 8 * MiB - 1: 16 * KiB, 1024: 16 * KiB}
    for size, chunk in sizes.items():
        assert NVLS.chunk_bytes(size, 8, 1) == chunk, size
    # NVLSTree on 2 nodes: 128 KiB from 4 x 128 x 128 KiB = 64 MiB, 32 KiB below 8 MiB; from 4
    # nodes on at most 64 KiB
    assert NVLS_TREE.chunk_bytes(64 * MiB, 16, 2) == 128 * KiB
    assert NVLS_TREE.chunk_bytes(16 * MiB, 16, 2) == 64 * KiB
    assert NVLS_TREE.chunk_bytes(4 * MiB, 16, 2) == 32 * KiB
    assert NVLS_TREE.chunk_bytes(16 * GiB, 32, 4) == 64 * KiB


def test_nvls_efficiency_is_nccls_at_its_largest_chunk() -> None:
    assert nvls_efficiency("hopper", 128 * KiB) == pytest.approx(0.85)
    c0 = 128 * KiB * (1 / 0.85 - 1)
    for c in (16 * KiB, 32 * KiB, 64 * KiB):
        assert nvls_efficiency("hopper", c) == pytest.approx(c / (c + c0))
    # so a 16 MiB NVLS all-reduce (32 KiB chunks) reaches 0.586 / 0.85 of the bandwidth a 2 GiB one does
    m = model("dgx-h100", 8)
    small, big = m.time("allreduce", 16 * MiB), m.time("allreduce", 2 * GiB)
    assert (small.algo, big.algo) == ("nvls", "nvls")
    ratio = (small.transfer_s / small.size_bytes) / (big.transfer_s / big.size_bytes)
    assert ratio == pytest.approx((32 / (32 + c0 / KiB)) ** -1 * 0.85, rel=1e-6)


# --------------------------------------------------------------------------- protocol switches

def test_protocols_follow_size_on_one_node() -> None:
    m = model("dgx-h100", 8)
    picks = [(s, m.time("allreduce", s)) for s in (2**k for k in range(3, 35))]
    order = {"LL": 0, "LL128": 1, "Simple": 2}
    protos = [order[r.proto] for _, r in picks]
    assert protos == sorted(protos)                       # LL, then LL128, then Simple, never back
    assert picks[0][1].proto == "LL" and picks[-1][1].algo == "nvls"


def test_ll_to_ll128_switch_is_where_nccls_costs_cross() -> None:
    """Forced ring on 8 GPUs: LL costs 6.6 + 14 x 0.6 = 15 us at busbw min(141, 0.5 B); LL128 costs
    14 + 14 x 1.9 = 40.6 us at 0.92 B (B the ring's bus bandwidth on all channels). The tuner
    moves from LL to LL128 where 15 + S f / bw_LL = 40.6 + S f / bw_LL128."""
    m = model("dgx-h100", 8)
    f = busbw_factor("allreduce", 8)
    line = m._cost("allreduce", m._group(None), "ring")[0] * GiB          # seconds per GiB, Simple
    B = f * GiB / line / 1e9                                              # the ring's busbw, GB/s
    bw_ll, bw_ll128 = min(141.0, 0.5 * B), min(0.92 * B, 12 * 36.7)
    cross = (40.6 - 15.0) * 1e-6 / (f / (bw_ll * 1e9) - f / (bw_ll128 * 1e9))
    below = m.time("allreduce", int(cross / 1.5), algo="ring")
    above = m.time("allreduce", int(cross * 1.5), algo="ring")
    assert (below.proto, above.proto) == ("LL", "LL128")
    # a slower wire (more latency per step) moves the switch: LL's 14 steps cost as much as LL128's
    slow = RING.latency_s(Call("allreduce", "LL", 8, 8, 1), Wires(intra_s=1.5e-6))
    assert slow == pytest.approx((6.6 + 14 * (0.6 + 1.0)) * 1e-6)


def test_tuner_prices_trees_with_nccls_correction() -> None:
    # treeCorrectionFactor: index log2(size / 64); Simple at 1 MiB (index 14) 0.5, at 256 MiB 0.9
    assert tree_correction("Simple", MiB) == 0.5
    assert tree_correction("LL128", 4 * MiB) == 0.8
    assert tree_correction("LL", 64) == 1.0
    assert tree_correction("Simple", 256 * MiB) == 0.9
    assert tree_correction("Simple", 512 * MiB) == 1.0                 # past the table


# --------------------------------------------------------------------------- PAT

def test_pat_only_with_one_gpu_per_node() -> None:
    m = model("dgx-h100", 128)
    one_per_node = list(range(0, 128, 8))
    assert "pat" in m.algorithms("allgather", m.group_info(one_per_node))
    assert "pat" in m.algorithms("reducescatter", m.group_info(one_per_node))
    assert "pat" not in m.algorithms("allreduce", m.group_info(one_per_node))
    assert "pat" not in m.algorithms("allgather", m.group_info(list(range(16))))      # 8 per node
    with pytest.raises(ConfigError, match="--algo pat: is NCCL's all-gather"):
        m.time("allgather", MiB, list(range(16)), algo="pat")


def test_pat_latency_and_rounds() -> None:
    m = model("dgx-h100", 128)
    g = list(range(0, 128, 8))                             # 16 nodes, one rank each
    r = m.time("allgather", 1024, g, algo="pat")
    # 8 us + log2(16) x 14 us (tree NET, Simple) / 3.5 + 2.8 us x 16 ranks
    assert r.latency_s == pytest.approx((8 + 4 * 14 / 3.5 + 2.8 * 16) * 1e-6, rel=1e-9)
    stages = stages_for(m, "allgather", GiB, g, "pat")
    assert len(stages) == 4                                # log2(16) rounds
    sent = sum(float(ph.nbytes[0]) for st in stages for ph in st)
    assert sent == pytest.approx(15 / 16 * GiB)            # (n-1)/n of the buffer per rank, as a ring
    assert [float(st[0].nbytes[0]) for st in stages_for(m, "reducescatter", GiB, g, "pat")] == \
        [float(st[0].nbytes[0]) for st in stages][::-1]


def test_pat_wins_small_allgathers_at_scale_and_ring_large_ones() -> None:
    m = model("dgx-h100", 512)
    g = list(range(0, 512, 8))                             # 64 nodes
    assert m.time("allgather", 64 * KiB, g).algo == "pat"  # log2(64) rounds against 63 ring steps
    assert m.time("allgather", 4 * GiB, g).algo == "ring"  # PAT runs at 0.75 of the bandwidth
    assert math.isfinite(m.time("reducescatter", 64 * KiB, g).time_s)


# --------------------------------------------------------------------------- pipelines

def test_nvls_tree_fills_its_pipeline_one_chunk_per_stage() -> None:
    # 2 nodes: 3 stages (NVLS reduce, network up, network down) of one 128 KiB chunk at one
    # channel's share of the GPU's NIC (16 NVLS channels on a 400 Gb/s NIC at 64/66)
    m = model("dgx-h100", 16)
    net = m._net_Bps()
    assert net == pytest.approx(50e9 * 64 / 66, rel=1e-6)
    fill = NVLS_TREE.fill_s(GiB, 16, 2, net)
    assert fill == pytest.approx(3 * 128 * KiB / (net / 16), rel=1e-9)
    # 8 nodes: 2 log2(8) + 1 = 7 stages of (at most) 64 KiB chunks
    assert NVLS_TREE.fill_s(GiB, 64, 8, net) == pytest.approx(7 * 64 * KiB / (net / 16), rel=1e-9)
    # it is part of the call's time: a fixed cost once the chunks are at their largest
    a, b = (m.time("allreduce", s, algo="nvls_tree") for s in (GiB, 2 * GiB))
    assert 2 * a.transfer_s - b.transfer_s == pytest.approx(fill, rel=1e-6)
    assert model("dgx-h100", 8)._net_Bps() == 0.0                     # one node: no network


def test_trees_lose_nccls_correction_at_medium_sizes() -> None:
    # 4 MiB tree LL128 across 2 nodes: every channel is busy (640 x 8 B = 5 KiB each), so the
    # loss is NCCL's tree correction (0.8 at log2(4 MiB / 64) = 16): 1/0.8 of the full-channel time
    m = model("dgx-h100", 16)
    size = 4 * MiB
    assert TREE.channels_used("LL128", size, 16, 2) == (32, 32)
    lat, transfer, _ = nccl.call_time_s("tree", Call("allreduce", "LL128", size, 16, 2), _gpu("hopper"), 1e-4,
                                        Wires(0.5e-6, 1.6e-6))
    full = 1e-4 / (120 / 128)
    assert transfer == pytest.approx(full / 0.8, rel=1e-9)
    # 64 KiB tree LL: 16 of 32 channels (512 x 8 B = 4 KiB each) cost more than the correction (0.6)
    _, t_small, _ = nccl.call_time_s("tree", Call("allreduce", "LL", 64 * KiB, 16, 2), _gpu("hopper"), 1e-5,
                                     Wires(0.5e-6, 1.6e-6))
    assert t_small == pytest.approx(1e-5 * 3.8 * 2, rel=1e-9)           # below the LL ceiling
    assert m.time("allreduce", size).time_s > 0


def test_deep_trees_on_simple_wait_for_their_pipeline_to_fill() -> None:
    # NCCL's tree depth: ppn - 1 + log2i(nodes) (connect.cc); 540 Polaris nodes x 4 GPUs: 3 + 9
    assert tree_depth(2160, 540) == 12
    assert tree_depth(16, 2) == 8
    # Simple chunks (enqueue.cc calcCollChunking): a 512 KiB step, halved while a channel gets fewer
    # than depth x 8 chunks (floor 128 KiB), depth x 4 (64 KiB), depth (32 KiB)
    assert tree_chunk_bytes(GiB, 16, 12) == 512 * KiB          # 128 chunks >= 96
    assert tree_chunk_bytes(64 * MiB, 16, 12) == 64 * KiB      # 32 < 48 at 128 KiB; 64 at 64 KiB
    assert tree_chunk_bytes(4 * MiB, 16, 12) == 32 * KiB       # 8 chunks of 32 KiB < 12
    # a channel's n chunks take n + 2 depth - 1 chunk times
    assert tree_fill_factor(4 * MiB, 2160, 540, 16) == pytest.approx(1 + 23 / 8)
    assert tree_fill_factor(GiB, 2160, 540, 16) == pytest.approx(1 + 23 / 128)
    # in the call: the larger of it and NCCL's tree correction (0.7 at log2(4 MiB / 64) = 16 for
    # Simple), on Simple only, and not in what the tuner believes
    used, _ = TREE.channels_used("Simple", 4 * MiB, 2160, 540)
    fill = tree_fill_factor(4 * MiB, 2160, 540, used)
    assert fill > 1 / 0.7
    _, transfer, tuned = nccl.call_time_s("tree", Call("allreduce", "Simple", 4 * MiB, 2160, 540),
                                          _gpu("ampere"), 1e-4, Wires(0.5e-6, 1.6e-6))
    assert transfer == pytest.approx(1e-4 * fill, rel=1e-9)
    assert tuned - transfer < 0
    # two nodes of 8: depth 8, so a 1 GiB call on 32 channels (64 chunks of 512 KiB) loses 15/64,
    # more than NCCL's correction there (1.0)
    # (at 10 ms, under NCCL's bandwidth ceilings)
    _, t2, _ = nccl.call_time_s("tree", Call("allreduce", "Simple", GiB, 16, 2), _gpu("hopper"), 1e-2,
                                Wires(0.5e-6, 1.6e-6))
    assert t2 == pytest.approx(1e-2 * (1 + 15 / 64), rel=1e-9)


def test_pat_needs_nccl_2_23() -> None:
    topo = build_topology(load_cluster("dgx-h100", 128))
    g = list(range(0, 128, 8))
    old, new = CollectiveModel(topo, nccl_version=(2, 22)), CollectiveModel(topo, nccl_version=(2, 23))
    assert "pat" not in old.algorithms("allgather", old.group_info(g))
    assert "pat" in new.algorithms("allgather", new.group_info(g))
    with pytest.raises(ConfigError, match=r"from NCCL 2.23 \(this run: 2.22\)"):
        old.time("allgather", MiB, g, algo="pat")
    # before 2.23 a ring at one rank per node prices its network steps at the ring's own latency
    current_ring = CollectiveModel(topo).time("allgather", 1024, g, algo="ring")
    assert old.time("allgather", 1024, g).latency_s < current_ring.latency_s


def test_ll128_across_nodes_waits_for_the_proxy_per_network_step() -> None:
    """Each network step of an LL128 call waits for the NIC's proxy to serve its channels, 4 at
    full width (sim.calibration.PROXY_STEP_US each): a 4 MiB tree all-reduce on 2 nodes (all 32
    channels) pays 2 hops x 4 x the step, a ring all-reduce its 2 steps between nodes, a call on
    half the channels half as much; other protocols and one node pay nothing, and NCCL's tuner
    (the pick) does not see it."""
    from sim.calibration import PROXY_STEP_US
    step = PROXY_STEP_US * 1e-6
    assert TREE.proxy_wait_s(Call("allreduce", "LL128", 4 * MiB, 16, 2), step) == pytest.approx(2 * 4 * step)
    assert RING.proxy_wait_s(Call("allreduce", "LL128", 4 * MiB, 16, 2), step) == pytest.approx(2 * 4 * step)
    assert RING.proxy_wait_s(Call("allgather", "LL128", 4 * MiB, 32, 4), step) == pytest.approx(3 * 4 * step)
    used, full = TREE.channels_used("LL128", 80 * KiB, 16, 2)
    assert (used, full) == (16, 32)
    assert TREE.proxy_wait_s(Call("allreduce", "LL128", 80 * KiB, 16, 2), step) == pytest.approx(2 * 2 * step)
    assert TREE.proxy_wait_s(Call("allreduce", "LL", 4 * MiB, 16, 2), step) == 0.0
    assert RING.proxy_wait_s(Call("allreduce", "LL128", 4 * MiB, 8, 1), step) == 0.0
    t = build_topology(load_cluster("dgx-h100", 16))
    with_wait, without = CollectiveModel(t), CollectiveModel(t, proxy_step_us=0.0)
    a, b = with_wait.time("allreduce", 4 * MiB), without.time("allreduce", 4 * MiB)
    assert (a.algo, a.proto) == (b.algo, b.proto) == ("tree", "LL128")
    assert a.latency_s - b.latency_s == pytest.approx(2 * 4 * step)
