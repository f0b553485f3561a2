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
    for pod in range(cluster.pods):
        base = pod * per_pod
        host_ids: dict[SliceShape, str] = {}
        for c in coords:
            dev = base + index[c]
            hkey = tuple(x // b for x, b in zip(c, host_block))
            if hkey not in host_ids:
                host_ids[hkey] = f"host/{pod}/{len(host_ids)}"
                node(host_ids[hkey], kind="host", pod=pod)
            host_index = int(host_ids[hkey].rsplit("/", 1)[1])
            node(dev, kind="tpu", pod=pod, coords=c, node=pod * 10**6 + host_index)
            edge(dev, host_ids[hkey], bandwidth_GBps=Bps_to_GBps(spec.pcie_Bps),
                       latency_us=s_to_us(spec.pcie_latency_s), kind="pcie", cables=1)
        hosts_per_pod = len(host_ids)
        for c in coords:
            for axis, length in enumerate(shape):
                if length == 1:
                    continue
                k = c[axis]
                if k + 1 < length:
                    nb = list(c)
                    nb[axis] = k + 1
                elif wraps[axis] and length > 2:
                    nb = list(c)
                    nb[axis] = 0
                    for other, shift in twist.get(axis, {}).items():
                        nb[other] = (nb[other] + shift) % shape[other]
                else:
                    continue
                u, v = base + index[c], base + index[tuple(nb)]
                attrs: dict[str, object] = {"bandwidth_GBps": link_GBps, "latency_us": ici_us,
                                            "cables": 1, "axis": axis}
                if spec.ndims == 3 and (k + 1) % spec.cube == 0:
                    face = tuple(x % spec.cube for i, x in enumerate(c) if i != axis)
                    ocs = f"ocs/{'xyz'[axis]}/{face[0] * spec.cube + face[1]}"
                    if ocs not in g:
                        node(ocs, kind="ocs")
                    attrs.update(kind="optical", ocs=ocs)
                else:
                    attrs.update(kind="ici")
                edge(u, v, **attrs)
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
