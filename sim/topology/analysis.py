"""What ``clustersim topo show`` reports, computed from the graph: counts, bisection, diameter.

Bisection bandwidth is the smallest max-flow between the two device halves of each of the
topology's natural halvings (whole nodes / scalable units for fat-trees; the middle of each torus
axis; whole pods over DCN), one direction, by the max-flow min-cut theorem. The diameter is the
largest number of links between two devices on the paths traffic uses (see ``diameter_hops``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_flow

from ..topology_spec import TRANSPORT_NAMES, GpuClusterSpec
from . import Topology, TpuFabric

__all__ = ["bisection_GBps", "diameter_hops", "halvings", "summarize"]

SWITCH_KINDS = ("nvswitch", "leaf", "spine", "core", "ocs", "dcn")
_CAP_UNIT_GBps = 0.01        # max-flow needs integer capacities: work in units of 10 MB/s


def summarize(topo: Topology) -> dict[str, Any]:
    """The fields of ``topo show`` (JSON names as in DESIGN.md, plus a few descriptive ones)."""
    g = topo.graph
    kinds = Counter(k for _, k in g.nodes(data="kind"))
    cables: Counter[str] = Counter()
    for _, _, d in g.edges(data=True):
        cables[d["kind"]] += d.get("cables", 1)
    out: dict[str, Any] = {
        "topology": topo.name,
        "chip": topo.spec.chip.name,
        "chips": topo.chips,
        "nodes": topo.nodes,
        "switches": {k: kinds[k] for k in SWITCH_KINDS if kinds[k]},
        "links": {k: _whole(v) for k, v in sorted(cables.items())},
        "bisection_GBps": round(bisection_GBps(topo), 3),
        "diameter_hops": diameter_hops(topo),
    }
    f = topo.fabric
    if isinstance(f, TpuFabric):
        out["slice"] = "x".join(map(str, f.shape))
        out["pods"] = f.pods
        out["wraparound"] = list(f.wraps)
        out["twisted"] = f.twisted
    else:
        out["fabric_tiers"] = f.tiers
        out["scalable_units"] = f.scalable_units
        out["oversubscription"] = f.oversubscription
        spec = topo.spec
        if isinstance(spec, GpuClusterSpec):
            out["transport"] = spec.transport
            out["transport_name"] = TRANSPORT_NAMES[spec.transport]
            out["net_protocols"] = list(spec.net_protocols)
    return out


def _whole(x: float) -> float | int:
    return int(round(x)) if abs(x - round(x)) < 1e-6 else round(x, 3)


def halvings(topo: Topology) -> list[tuple[list[int], list[int]]]:
    """The natural balanced halvings of the devices (each a pair of device lists)."""
    g, devs = topo.graph, topo.devices
    out: list[tuple[list[int], list[int]]] = []
    if not isinstance(topo.fabric, TpuFabric):           # GPU cluster: halves of whole nodes
        n = topo.nodes
        if n > 1:
            half = n // 2
            out.append(([d for d in devs if g.nodes[d]["node"] < half],
                        [d for d in devs if g.nodes[d]["node"] >= half]))
        else:                                            # one node: half of its GPUs
            out.append((list(devs[: len(devs) // 2]), list(devs[len(devs) // 2:])))
        return out
    pods, shape = topo.fabric.pods, topo.fabric.shape
    if pods > 1:
        out.append(([d for d in devs if g.nodes[d]["pod"] < pods // 2],
                    [d for d in devs if g.nodes[d]["pod"] >= pods // 2]))
    for axis, length in enumerate(shape):
        if length >= 2 and length % 2 == 0:
            a = [d for d in devs if g.nodes[d]["coords"][axis] < length // 2]
            b = [d for d in devs if g.nodes[d]["coords"][axis] >= length // 2]
            out.append((a, b))
    return out


def bisection_GBps(topo: Topology) -> float:
    """Smallest one-direction max-flow between the halves of any natural halving, GB/s."""
    g = topo.graph
    index = {n: i for i, n in enumerate(g.nodes)}
    # The link arcs (both directions) are the same for every halving: build them once.
    rows, cols, caps = [], [], []
    for u, v, d in g.edges(data=True):
        c = int(round(d["bandwidth_GBps"] / _CAP_UNIT_GBps))
        rows += [index[u], index[v]]
        cols += [index[v], index[u]]
        caps += [c, c]
    cuts = [_max_flow_GBps(index, rows, cols, caps, a, b) for a, b in halvings(topo)]
    return min(cuts) if cuts else 0.0


def _max_flow_GBps(index: dict[Any, int], rows: list[int], cols: list[int], caps: list[int],
                   a: list[int], b: list[int]) -> float:
    """Max-flow from the devices *a* to the devices *b* (a super-source and a super-sink)."""
    src, dst = len(index), len(index) + 1
    big = int(2**30)
    r = rows + [src] * len(a) + [index[n] for n in b]
    c = cols + [index[n] for n in a] + [dst] * len(b)
    k = caps + [big] * (len(a) + len(b))
    m = sp.csr_array((np.array(k, dtype=np.int32), (np.array(r), np.array(c))),
                     shape=(len(index) + 2, len(index) + 2))
    m.sum_duplicates()
    return float(maximum_flow(m, src, dst).flow_value) * _CAP_UNIT_GBps


def diameter_hops(topo: Topology) -> int:
    """Largest link count between two devices on the paths traffic takes.

    GPU clusters: shortest paths over the whole graph. TPU slices: inside a pod traffic stays on
    ICI (never detours through hosts), so the ICI subgraph's eccentricity; between pods the
    chip-host-DCN-host-chip path. Eccentricities are taken from the devices that attain the
    maximum by symmetry (device 0 - a corner on a mesh, any chip on a torus - and, for fat-trees,
    the last device as well); tests compare with ``nx.diameter`` on small graphs.
    """
    g = topo.graph
    if len(topo.devices) < 2:
        return 0
    if not topo.is_tpu:
        sources = {topo.devices[0], topo.devices[-1]}
        sub: nx.Graph = g
    else:
        sources = {topo.devices[0]}
        sub = g.edge_subgraph((u, v) for u, v, k in g.edges(data="kind") if k in ("ici", "optical"))
    best = 0
    devset = set(topo.devices)
    for s in sources:
        if s in sub:
            dist = nx.single_source_shortest_path_length(sub, s)
            reach = [dist[d] for d in devset if d in dist]
            best = max(best, max(reach, default=0))
    if topo.pods > 1:
        dcn = g.edge_subgraph((u, v) for u, v, k in g.edges(data="kind") if k in ("pcie", "dcn"))
        other = next(d for d in topo.devices if g.nodes[d]["pod"] != g.nodes[topo.devices[0]]["pod"])
        best = max(best, nx.shortest_path_length(dcn, topo.devices[0], other))
    return int(best)
