"""Speed of building and analysing the largest graphs (issue: <= 10 s each on a 2-core machine).

Run on demand: ``python -m pytest benchmarks -m benchmark -s``. Prints seconds; asserts only the
generous target, so a slow machine does not make CI flaky (benchmarks are not in the CI run).
"""

from __future__ import annotations

import time

import pytest

from sim.config import load_cluster
from sim.topology import build_topology
from sim.topology.analysis import summarize

CASES = [("dgx-h100", 16384), ("tpu-v4", 4096), ("tpu-v5p", 6144), ("tpu-v5e", 4096),
         ("h100-3tier", 131072)]          # issue 16: frontier scale


@pytest.mark.benchmark
@pytest.mark.parametrize("name, chips", CASES)
def test_build_and_show(name: str, chips: int) -> None:
    t0 = time.perf_counter()
    topo = build_topology(load_cluster(name, chips))
    t1 = time.perf_counter()
    info = summarize(topo)
    t2 = time.perf_counter()
    print(f"\n{name} x{chips}: {topo.graph.number_of_nodes()} nodes, "
          f"{topo.graph.number_of_edges()} edges; build {t1 - t0:.2f} s, topo show {t2 - t1:.2f} s; "
          f"bisection {info['bisection_GBps']:.0f} GB/s, diameter {info['diameter_hops']}")
    assert t1 - t0 < 10 and t2 - t1 < 10
