"""Network model: directed links of a topology graph, routing, and max-min fair sharing.

``links.LinkTable`` numbers the directed links; ``routing`` turns (src, dst) into link fractions
(ECMP splits included) by the fabric kind's router; ``fluid`` computes max-min fair rates and plays
a set of flows to completion (a collective's steps); ``traffic`` and ``shared`` are the load a
training step's transfers put on the links and those links shared on the engine's simpy clock.
"""

from .fluid import FlowSet, maxmin_rates, play_flows
from .links import LinkTable
from .routing import Router, make_router

__all__ = ["FlowSet", "LinkTable", "Router", "make_router", "maxmin_rates", "play_flows"]
