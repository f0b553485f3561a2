"""Failures and degradations as graph edits. Each returns a new Topology; the input is unchanged.

A failed chip or switch keeps its node (so rank numbering and names stay stable) but loses every
link, marked ``failed=True``; a failed OCS takes down every optical circuit it holds.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from ..errors import TopologyError
from . import Topology

__all__ = ["apply_link_edits", "degrade_link", "fail_link", "fail_node", "fail_ocs"]


def _copy(topo: Topology) -> Topology:
    return topo.with_graph(topo.graph.copy())


def fail_node(topo: Topology, node: Hashable) -> Topology:
    """A chip, NIC or switch fails: all its links go down."""
    if node not in topo.graph:
        raise TopologyError(f"fail: no node {node!r} in topology {topo.name}")
    out = _copy(topo)
    out.graph.remove_edges_from(list(out.graph.edges(node)))
    out.graph.nodes[node]["failed"] = True
    return out


def fail_link(topo: Topology, u: Hashable, v: Hashable) -> Topology:
    if not topo.graph.has_edge(u, v):
        raise TopologyError(f"fail: no link {u!r} - {v!r} in topology {topo.name}")
    out = _copy(topo)
    out.graph.remove_edge(u, v)
    return out


def degrade_link(topo: Topology, u: Hashable, v: Hashable, factor: float) -> Topology:
    """Scale a link's bandwidth by *factor* in (0, 1] (a flapping cable, a lane down)."""
    if not topo.graph.has_edge(u, v):
        raise TopologyError(f"degrade: no link {u!r} - {v!r} in topology {topo.name}")
    if not 0 < factor <= 1:
        raise TopologyError(f"degrade: factor must be in (0, 1], got {factor}")
    out = _copy(topo)
    out.graph.edges[u, v]["bandwidth_GBps"] *= factor
    return out


def fail_ocs(topo: Topology, ocs: str) -> Topology:
    """An optical circuit switch fails: every circuit through it goes dark."""
    g = topo.graph
    if g.nodes.get(ocs, {}).get("kind") != "ocs":
        raise TopologyError(f"fail: no OCS {ocs!r} in topology {topo.name}")
    out = _copy(topo)
    dark = [(u, v) for u, v, o in out.graph.edges(data="ocs") if o == ocs]
    out.graph.remove_edges_from(dark)
    out.graph.nodes[ocs]["failed"] = True
    return out


def apply_link_edits(topo: Topology, edits: Sequence[tuple[Hashable, Hashable, float]],
                     where: str = "cluster.degraded_links") -> Topology:
    """``cluster.degraded_links``: each (u, v, factor) scales the link's bandwidth (both
    directions) by factor, or takes it down when factor is 0; routes then avoid it (ECMP over the
    shortest paths left), so exactly the groups routed through it slow down."""
    if not edits:
        return topo
    out = _copy(topo)
    g = out.graph
    for i, (u, v, factor) in enumerate(edits):
        if not g.has_edge(u, v):
            near = (sorted(map(str, g[u]))[:6] if u in g else
                    sorted(map(str, g[v]))[:6] if v in g else [])
            hint = (f"; {u if u in g else v!r} links to: {', '.join(near)}" if near else
                    "; nodes are chip numbers or switch / NIC names such as n0/nic0, n0/nvs1, "
                    "leaf/s0/r0, spine/0")
            raise TopologyError(f"{where}[{i}].link: no link between {u!r} and {v!r} in "
                                f"{topo.name} ({topo.chips} chips){hint}")
        if factor <= 0:
            g.remove_edge(u, v)
        else:
            g.edges[u, v]["bandwidth_GBps"] *= factor
    return out
