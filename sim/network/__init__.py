"""Network model: directed links of a topology graph, routing, and max-min fair fluid sharing.

``links.LinkTable`` numbers the directed links; ``routing.Router`` turns (src, dst) into link
fractions (ECMP splits included); ``fluid`` computes max-min fair rates and plays a set of flows to
completion; ``events`` does the same with a simpy clock so that flows of different collectives
that overlap in time share links (the general path the fast path is tested against).
"""

from .fluid import Flow, FlowSet, maxmin_rates, play_flows
from .links import LinkTable
from .routing import Router

__all__ = ["Flow", "FlowSet", "LinkTable", "Router", "maxmin_rates", "play_flows"]
