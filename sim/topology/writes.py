"""add_node and add_edge for a graph a builder is making, written into the graph's own dicts.

PERF: what nx.Graph.add_node / add_edge do (same nodes, attribute dicts and insertion order; the
graph is new, so there is no cache to clear), without their per-call checks: 642,048 edges at
98,304 GPUs, 16,384 on the TPU v4 pod (benchmarks/release.py run-98k, run-16k, run-tpu-v4).
tests/test_topology.py checks every bundled fabric's graph equals one built through networkx.
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx

__all__ = ["graph_writers"]


def graph_writers(g: nx.Graph) -> tuple[Callable[..., None], Callable[..., None]]:
    """(node, edge): ``node(n, **attrs)`` and ``edge(u, v, **attrs)`` for the new graph *g*."""
    adj, node_attrs = g._adj, g._node  # noqa: SLF001

    def node(n: object, **attrs: object) -> None:
        if n not in node_attrs:
            adj[n] = {}
            node_attrs[n] = attrs
        else:
            node_attrs[n].update(attrs)

    def edge(u: object, v: object, **attrs: object) -> None:
        au = adj.get(u)
        if au is None:
            au = adj[u] = {}
            node_attrs[u] = {}
        av = adj.get(v)
        if av is None:
            av = adj[v] = {}
            node_attrs[v] = {}
        data = au.get(v)
        if data is None:
            data = attrs
        else:
            data.update(attrs)
        au[v] = data
        av[u] = data

    return node, edge
