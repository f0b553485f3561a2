"""All-to-all at any rank count: the router's counted link bytes (``all_to_all_link_bytes``)
against the sum of every route, and the busiest-link time against the flows played out."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sim.collectives import CollectiveModel
from sim.collectives.algorithms import build
from sim.config.scenario import load_cluster
from sim.network.fluid import play_flows
from sim.network.routing.base import Router
from sim.topology import build_topology


def _model(name: str, chips: int, **kw: object) -> CollectiveModel:
    return CollectiveModel(build_topology(replace(load_cluster(name, chips), **kw)))


CASES = [
    ("dgx-h100", 32, None),                         # rail fat-tree, PXN
    ("h100-3tier", 256, None),                      # three tiers
    ("polaris", 64, None),                          # 2 NICs for 4 GPUs, dragonfly
    ("perlmutter", 48, None),                       # NVLink mesh, dragonfly
    ("aws-p5", 32, None),                           # 4 NICs a GPU
    ("gb200-nvl72", 144, None),                     # 72-GPU NVLink domain
    ("dgx-h100", 32, [0, 1, 2, 9, 10, 17, 25, 31]),  # uneven ranks per node
    ("polaris", 32, [0, 1, 5, 6, 7, 13, 30]),
    # across scalable units, a source's leaf holding no destination; across pods (the core)
    ("dgx-h100", 640, [0, 1, 300, 301, 600]),
    ("h100-3tier", 3200, [0, 1, 3072, 3073]),
]


@pytest.mark.parametrize("name, chips, group", CASES)
def test_counted_link_bytes_are_the_sum_of_every_route(name, chips, group) -> None:
    net = _model(name, chips)
    devs = np.array(group if group else net.topo.devices)
    counted = net.router.all_to_all_link_bytes(devs)
    every = Router.all_to_all_link_bytes(net.router, devs)          # route by route
    assert counted.sum() > 0
    np.testing.assert_allclose(counted, every, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name, chips, group", CASES[:4] + CASES[6:])
def test_busiest_link_time_is_the_played_time(name, chips, group) -> None:
    net = _model(name, chips)
    gi = net.group_info(group)
    ph = build("pairwise", "alltoall", gi, 1e6, net.topo)[0][0]
    played, _ = play_flows(net.flowset(ph.explicit()), net.links.capacity_Bps)
    assert net.phase_time_s(ph) == pytest.approx(played, rel=1e-6)


def test_an_edited_graph_routes_every_flow() -> None:
    net = _model("dgx-h100", 16, degraded_links=(("n0/nic0", "leaf/s0/r0", 0.5),))
    assert net.topo.edited
    devs = np.array(net.topo.devices)
    np.testing.assert_allclose(net.router.all_to_all_link_bytes(devs),
                               Router.all_to_all_link_bytes(net.router, devs))


def test_no_cap_on_ranks() -> None:
    # 3,072 ranks: beyond the 2,048 the flow-by-flow model stopped at
    r = _model("dgx-h100", 3072).time("alltoall", 2**26)
    assert r.ranks == 3072 and np.isfinite(r.time_s) and r.time_s > 0
