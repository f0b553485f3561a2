"""Degradations and failed links as graph edits: a straggler's slow link (``degrade_link``) and
``cluster.degraded_links`` (``apply_link_edits``). Each returns a new Topology; the input is
unchanged.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from ..errors import InfeasibleError, TopologyError
from . import Topology

__all__ = ["apply_link_edits", "degrade_link"]


def _copy(topo: Topology) -> Topology:
    return topo.with_graph(topo.graph.copy())


def degrade_link(topo: Topology, u: Hashable, v: Hashable, factor: float) -> Topology:
    """Scale a link's bandwidth by *factor* in (0, 1] (a flapping cable, a lane down)."""
    if not topo.graph.has_edge(u, v):
        raise TopologyError(f"degrade: no link {u!r} - {v!r} in topology {topo.name}")
    if not 0 < factor <= 1:
        raise TopologyError(f"degrade: factor must be in (0, 1], got {factor}")
    out = _copy(topo)
    out.graph.edges[u, v]["bandwidth_GBps"] *= factor
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
    if any(f <= 0 for _, _, f in edits) and out.devices:
        import networkx as nx

        # the chips outside the part of the fabric that holds most of them
        devices = set(out.devices)
        parts = sorted(nx.connected_components(g), key=lambda c: -len(devices & c))
        if cut := [d for d in out.devices if d not in parts[0]]:
            more = f" and {len(cut) - 5} more" if len(cut) > 5 else ""
            raise InfeasibleError(f"{where}: chip {', '.join(map(str, cut[:5]))}{more} is cut off "
                                  "from the others (every path goes through links that are down); "
                                  "a job cannot run across it")
    return out
