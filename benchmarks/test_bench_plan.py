"""Speed of the users' daily work (issue 12), on demand:
``python -m pytest benchmarks/test_bench_plan.py -m benchmark -s``.

- an 8-point chip sweep of Llama 3 70B on dgx-h100 (64 .. 8,192): <= 10 s wall on 2 cores;
- ``plan`` for Llama 3 70B, 15T tokens, 90 days, H100 vs v5p: <= 60 s in one process, and as a
  user runs it (``python -m sim plan ... --json``, a whole process on 2 cores) >= 2,500 layouts
  screened a second (issue 32: its layouts_screened over its wall time);
- the screening path of one layout timed in full: >= 200 layouts/s (workload, memory check,
  every stage's plan, fast_step), which the plan's floors spare all but a few layouts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.config import read_scenario_raw, scenario_from_dict
from sim.plan import PlanRequest, layouts, plan
from sim.sweep import parse_over, run_sweep

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.benchmark
def test_chip_sweep_speed() -> None:
    raw, src, _ = read_scenario_raw(str(REPO / "scenarios" / "llama3-70b-1024xh100.yaml"))
    t0 = time.perf_counter()
    rows = run_sweep(raw, src, [parse_over("cluster.chips=64..8192x2", raw)], workers=2)
    wall = time.perf_counter() - t0
    print(f"\n8-point sweep: {wall:.2f} s wall, {sum(r['status'] == 'ok' for r in rows)} feasible")
    assert len(rows) == 8 and wall <= 10


@pytest.mark.benchmark
def test_plan_speed_and_screening_rate() -> None:
    from sim.collectives import CollectiveModel
    from sim.engine import Schedule, fast_step
    from sim.stages import plan_stages
    from sim.topology import build_topology
    from sim.workload.memory import check_fits, memory_per_chip
    from sim.workload.transformer import build_workload

    t0 = time.perf_counter()
    res = plan(PlanRequest(model="llama3-70b", tokens=15e12, days=90, topologies=("dgx-h100", "tpu-v5p")))
    wall = time.perf_counter() - t0
    screened = sum(p.layouts_screened for p in res)
    print(f"\nplan: {wall:.1f} s wall, {screened} layouts screened ({screened / wall:.0f}/s in all)")
    assert wall <= 60
    argv = [sys.executable, "-m", "sim", "plan", "--model", "llama3-70b", "--tokens", "15T",
            "--days", "90", "--topology", "dgx-h100,tpu-v5p", "--json"]
    walls, out = [], ""
    for _ in range(3):
        t0 = time.perf_counter()
        out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=True).stdout
        walls.append(time.perf_counter() - t0)
    whole = sum(e["layouts_screened"] for e in json.loads(out).values()) / min(walls)
    print(f"plan as a process: {min(walls):.2f} s, {whole:,.0f} layouts screened a second")
    assert whole >= 2500
    base = {"cluster": {"topology": "dgx-h100", "chips": 1024}, "model": "llama3-70b",
            "training": {"seq_len": 8192, "global_batch": 512}}
    topo = build_topology(scenario_from_dict(base).cluster)
    net = CollectiveModel(topo)
    n, t0 = 0, time.perf_counter()
    for lay in layouts(1024, 80, 64, True, 8, 512):
        raw = {**base, "training": {**base["training"], "micro_batch": lay["micro_batch"],
                                    "recompute": lay["recompute"]},
               "parallelism": {k: lay[k] for k in ("tp", "pp", "zero", "schedule", "virtual_stages")}}
        scn = scenario_from_dict(raw)
        wl = build_workload(scn)
        try:
            check_fits(wl, memory_per_chip(wl))
        except Exception:          # noqa: BLE001 - an out-of-memory layout is screened out too
            n += 1
            continue
        vs = lay["virtual_stages"] if lay["schedule"] == "interleaved" else 1
        fast_step(plan_stages(wl, net, traffic=False),
                  Schedule(pp=lay["pp"], vs=vs, micro=wl.microbatches, schedule_kind=lay["schedule"]))
        n += 1
    rate = n / (time.perf_counter() - t0)
    print(f"screening on 1,024 H100: {n} layouts at {rate:.0f} layouts/s")
    assert rate >= 200
