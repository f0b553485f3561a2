"""Where a ``run`` row's time goes (issue 32, "profile first"): one scenario played stage by
stage in this process, each stage timed on its own (imports as Python reports them on a fresh
start; the rest with perf_counter).

    python benchmarks/where_time_goes.py scenarios/llama3-405b-16384xh100.yaml

prints the seconds of: imports, scenario, workload and memory, graph build, link table, router,
collective planning and link loads (``plan_stages``), the engine (the step, then the step with
every transfer alone where links are shared), and the JSON.
"""

from __future__ import annotations

import sys
import time

T0 = time.perf_counter()
import json  # noqa: E402

from sim.collectives import CollectiveModel  # noqa: E402
from sim.config import load_scenario  # noqa: E402
from sim.job import schedule_of  # noqa: E402
from sim.network.links import LinkTable  # noqa: E402
from sim.network.routing import make_router  # noqa: E402
from sim.stages import plan_stages  # noqa: E402
from sim.topology import build_topology, frozen_gc  # noqa: E402
from sim.workload.memory import check_fits, memory_per_chip  # noqa: E402
from sim.workload.transformer import build_workload  # noqa: E402

IMPORTS_S = time.perf_counter() - T0


def main(path: str) -> None:
    parts: dict[str, float] = {"imports": IMPORTS_S}

    def timed(name: str, fn, *args, **kw):
        t0 = time.perf_counter()
        out = fn(*args, **kw)
        parts[name] = parts.get(name, 0.0) + time.perf_counter() - t0
        return out

    with frozen_gc() as freeze:
        scn = timed("scenario", load_scenario, path)
        wl = timed("workload + memory", build_workload, scn)
        timed("workload + memory", lambda: check_fits(wl, memory_per_chip(wl)))
        topo = timed("graph", build_topology, scn.cluster)
        # What CollectiveModel builds, each part timed (then the model itself, reusing nothing).
        links = timed("link table", LinkTable, topo)
        timed("router", make_router, topo, links)
        t0 = time.perf_counter()
        net = CollectiveModel(topo)
        parts["collective model (link table + router again)"] = time.perf_counter() - t0
        freeze()
        plans = timed("plan_stages (collectives, link loads)", plan_stages, wl, net)
        from sim.engine import simulate

        sched = schedule_of(scn, wl)
        eng = timed("engine (shared links)", simulate, plans, sched,
                    capacity_Bps=net.links.capacity_Bps)
        if eng.network_solves:
            timed("engine (transfers alone)", simulate, plans, sched)
        timed("json", json.dumps, {"step_time_s": eng.step_time_s, "breakdown_s": eng.breakdown_s})
    total = sum(v for k, v in parts.items() if not k.startswith("collective model"))
    print(f"{path}: {eng.events:,} engine events, {eng.network_solves:,} link solves")
    for k, v in parts.items():
        print(f"  {k:<48} {v:7.3f} s")
    print(f"  {'total (without the repeated collective model)':<48} {total:7.3f} s")


if __name__ == "__main__":
    main(sys.argv[1])
