"""Failures and degradations as graph edits. Each returns a new Topology; the input is unchanged.

A failed chip or switch keeps its node (so rank numbering and names stay stable) but loses every
link, marked ``failed=True``; a failed OCS takes down every optical circuit it holds.
"""

from __future__ import annotations

from collections.abc import Hashable

from ..errors import TopologyError
from . import Topology

__all__ = ["degrade_link", "fail_link", "fail_node", "fail_ocs"]


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
