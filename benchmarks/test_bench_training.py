"""Speed of one simulated training step, every transfer played on the shared links (issue 13
targets: Llama 3 405B on 16,384 H100 <= 2 s; a 4,096-chip TPU v4 step <= 0.5 s; issue 16: the
same model on 98,304 H100 of the three-tier h100-3tier fabric <= 10 s, its graph <= 4 GiB, see
test_frontier_graph_memory), with the engine's event rate next to bare simpy's on this machine.

Run on demand: ``python -m pytest benchmarks -m benchmark -s``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from _reference import bare_simpy_events_per_s

from sim.config import load_scenario
from sim.run import run
from sim.topology import build_topology

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


@pytest.mark.benchmark
@pytest.mark.parametrize("name, limit_s", [("llama3-405b-16384xh100", 2.0),
                                           ("llama3-70b-tpu-v4-4096", 0.5),
                                           ("llama3-405b-98304xh100", 10.0)])
def test_step_speed(name: str, limit_s: float) -> None:
    scn = load_scenario(SCENARIOS / f"{name}.yaml")
    t0 = time.perf_counter()
    result = run(scn).step
    wall = time.perf_counter() - t0
    # The engine alone, on the plan of the same scenario.
    from sim.collectives import CollectiveModel
    from sim.engine import Schedule, simulate
    from sim.stages import plan_stages
    from sim.topology import build_topology
    from sim.workload.transformer import build_workload

    wl = build_workload(scn)
    topo = build_topology(scn.cluster)
    net = CollectiveModel(topo)
    plans = plan_stages(wl, net)
    par = scn.parallelism
    vs = par.virtual_stages if par.schedule == "interleaved" else 1
    t1 = time.perf_counter()
    e2 = simulate(plans, Schedule(pp=par.pp, vs=vs, micro=wl.microbatches, schedule_kind=par.schedule),
                  capacity_Bps=net.links.capacity_Bps)
    engine_s = time.perf_counter() - t1
    bare = bare_simpy_events_per_s()
    print(f"\n{name}: {wall:.2f} s wall in all (graph, network, workload, engine); engine alone "
          f"{engine_s:.3f} s for {e2.events} events = {e2.events / engine_s:,.0f} events/s vs bare "
          f"simpy {bare:,.0f} events/s; step {result.step_time_s:.2f} s, MFU {100 * result.mfu:.1f}%")
    assert wall <= limit_s


@pytest.mark.benchmark
def test_frontier_graph_memory() -> None:
    """Issue 16: the 98,304-GPU three-tier graph (and its link table) in <= 4 GiB, measured as the
    Python heap it allocates (tracemalloc)."""
    import tracemalloc

    from sim.network.links import LinkTable

    scn = load_scenario(SCENARIOS / "llama3-405b-98304xh100.yaml")
    tracemalloc.start()
    topo = build_topology(scn.cluster)
    links = LinkTable(topo)
    used, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"\n98,304 GPUs: {topo.graph.number_of_nodes()} nodes, {topo.graph.number_of_edges()} edges, "
          f"{len(links)} directed links; {used / 2**30:.2f} GiB held, {peak / 2**30:.2f} GiB peak")
    assert peak <= 4 * 2**30
