"""TPU slices as networkx graphs: 3-D tori of cubes joined by OCS, or 2-D pods joined by DCN.

Node ids: chips are ints 0..N-1 in rank order (row-major over the slice coordinates, pod after pod);
``host/p/i`` are host CPUs, ``ocs/<axis>/<face position>`` the optical circuit switches and ``dcn``
the data-center network between pods. An ICI link that leaves a cube is an ``optical`` edge whose
``ocs`` attribute names the OCS that holds its circuit: an OCS is a patch panel of light paths, not a
routing hop, so circuits are chip-to-chip edges and the OCS node only records which circuits fail
with it (``fail_ocs`` in tests/graph_edits.py).
"""

from __future__ import annotations

import itertools
import math

import networkx as nx

from ..config import ClusterConfig
from ..topology_spec import SliceShape, TpuPodSpec
from ..units import Bps_to_GBps, s_to_us
from .fabric import TpuFabric
from .writes import graph_writers


def build_tpu_pod(cluster: ClusterConfig) -> tuple[nx.Graph, TpuFabric]:
    """Graph of the slice(s) of ``cluster`` and the fabric facts of the Topology record."""
    spec = cluster.topology
    assert isinstance(spec, TpuPodSpec) and cluster.shape is not None
    shape = cluster.shape
    g = nx.Graph()
    per_pod = math.prod(shape)
    wraps = spec.wraps(shape)
    link_GBps = Bps_to_GBps(spec.chip.scaleup_link_Bps)
    ici_us = s_to_us(spec.ici_latency_s)
    host_block = _host_block(shape, spec.chips_per_host)
    coords = list(itertools.product(*(range(d) for d in shape)))
    index = {c: i for i, c in enumerate(coords)}
    twist = _twists(shape) if cluster.twisted else {}
    hosts_per_pod = 0
    node, edge = graph_writers(g)
    # PERF: what does not depend on the pod worked out once, and each ICI neighbour found by
    # its offset in the row-major numbering instead of through a coordinate tuple (the TPU v4
    # pod: 4,096 chips, 12,288 ICI links; benchmarks/release.py run-tpu-v4); the same nodes,
    # edges and attribute dicts in the same order
    pcie_GBps, pcie_us = Bps_to_GBps(spec.pcie_Bps), s_to_us(spec.pcie_latency_s)
    host_of = [tuple(x // b for x, b in zip(c, host_block)) for c in coords]
    strides = [math.prod(shape[a + 1:]) for a in range(len(shape))]
    cube = spec.cube if spec.ndims == 3 else 0
    for pod in range(cluster.pods):
        base = pod * per_pod
        host_ids: dict[SliceShape, tuple[str, int]] = {}
        for i, c in enumerate(coords):
            host = host_ids.get(host_of[i])
            if host is None:
                host = host_ids[host_of[i]] = (f"host/{pod}/{len(host_ids)}", len(host_ids))
                node(host[0], kind="host", pod=pod)
            node(base + i, kind="tpu", pod=pod, coords=c, node=pod * 10**6 + host[1])
            edge(base + i, host[0], bandwidth_GBps=pcie_GBps, latency_us=pcie_us, kind="pcie",
                 cables=1)
        hosts_per_pod = len(host_ids)
        for i, c in enumerate(coords):
            u = base + i
            for axis, length in enumerate(shape):
                if length == 1:
                    continue
                k = c[axis]
                if k + 1 < length:
                    v = u + strides[axis]
                elif wraps[axis] and length > 2:
                    v = u - k * strides[axis]
                    if axis in twist:
                        nb = list(c)
                        nb[axis] = 0
                        for other, shift in twist[axis].items():
                            nb[other] = (nb[other] + shift) % shape[other]
                        v = base + index[tuple(nb)]
                else:
                    continue
                if cube and (k + 1) % cube == 0:
                    face = tuple(x % cube for j, x in enumerate(c) if j != axis)
                    ocs = f"ocs/{'xyz'[axis]}/{face[0] * cube + face[1]}"
                    if ocs not in g:
                        node(ocs, kind="ocs")
                    edge(u, v, bandwidth_GBps=link_GBps, latency_us=ici_us, cables=1, axis=axis,
                         kind="optical", ocs=ocs)
                else:
                    edge(u, v, bandwidth_GBps=link_GBps, latency_us=ici_us, cables=1, axis=axis,
                         kind="ici")
    if cluster.pods > 1:
        assert spec.chip.dcn_Bps is not None
        g.add_node("dcn", kind="dcn")
        dcn_us = s_to_us(spec.dcn_latency_s) / 2          # host->dcn and dcn->host add to one DCN trip
        for h in [n for n, k in g.nodes(data="kind") if k == "host"]:
            chips_on_host = sum(1 for nb in g[h] if g.nodes[nb]["kind"] == "tpu")
            g.add_edge(h, "dcn", bandwidth_GBps=Bps_to_GBps(chips_on_host * spec.chip.dcn_Bps),
                       latency_us=dcn_us, kind="dcn", cables=1)
    return g, TpuFabric(shape=shape, wraps=wraps, pods=cluster.pods, hosts=hosts_per_pod * cluster.pods,
                        twisted=cluster.twisted)


def _host_block(shape: SliceShape, chips_per_host: int) -> SliceShape:
    """Chips of one host as a block of the slice: 2x2x1 trays (SB-TPU) or 4x2 for 8-chip hosts."""
    block = (2, 2, 1) if len(shape) == 3 else ((4, 2) if chips_per_host == 8 else (2, 2))
    return tuple(min(b, d) for b, d in zip(block, shape))


def _twists(shape: SliceShape) -> dict[int, dict[int, int]]:
    """Twisted-torus wrap shifts: {axis: {other_axis: shift}} (see topologies/README.md)."""
    longest = max(shape)
    out: dict[int, dict[int, int]] = {}
    longs = [i for i, d in enumerate(shape) if d == longest]
    for axis, d in enumerate(shape):
        if d < longest:
            out[axis] = {o: shape[o] // 2 for o in longs}
    return out
