"""Failures as graph edits that only tests make (sim's own edits, ``degrade_link`` and
``apply_link_edits``, are in ``sim.topology.edits``). Each returns a new Topology; the input is
unchanged. A failed chip or switch keeps its node (so rank numbering and names stay stable) but
loses every link, marked ``failed=True``; a failed OCS takes down every optical circuit it holds.
"""

from __future__ import annotations

from collections.abc import Hashable

from sim.errors import TopologyError
from sim.topology import Topology

__all__ = ["fail_link", "fail_node", "fail_ocs"]


def fail_node(topo: Topology, node: Hashable) -> Topology:
    """A chip, NIC or switch fails: all its links go down."""
    if node not in topo.graph:
        raise TopologyError(f"fail: no node {node!r} in topology {topo.name}")
    out = topo.with_graph(topo.graph.copy())
    out.graph.remove_edges_from(list(out.graph.edges(node)))
    out.graph.nodes[node]["failed"] = True
    return out


def fail_link(topo: Topology, u: Hashable, v: Hashable) -> Topology:
    """The link u - v goes down (both directions)."""
    if not topo.graph.has_edge(u, v):
        raise TopologyError(f"fail: no link {u!r} - {v!r} in topology {topo.name}")
    out = topo.with_graph(topo.graph.copy())
    out.graph.remove_edge(u, v)
    return out


def fail_ocs(topo: Topology, ocs: str) -> Topology:
    """An optical circuit switch fails: every circuit through it goes dark."""
    g = topo.graph
    if g.nodes.get(ocs, {}).get("kind") != "ocs":
        raise TopologyError(f"fail: no OCS {ocs!r} in topology {topo.name}")
    out = topo.with_graph(topo.graph.copy())
    dark = [(u, v) for u, v, o in out.graph.edges(data="ocs") if o == ocs]
    out.graph.remove_edges_from(dark)
    out.graph.nodes[ocs]["failed"] = True
    return out
