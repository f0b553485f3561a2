"""Speed of the collective model on multi-node NVLink domains (issue 16 target: one 1 GiB all-reduce
on 1,440 GB200 GPUs, 20 NVL72 racks, in <= 1 s wall:
``clustersim collective --topology gb200-nvl72 --chips 1440 --op allreduce --min-bytes 1073741824
--max-bytes 1073741824``).

Run on demand: ``python -m pytest benchmarks -m benchmark -s``. The in-process case counts the whole
job the command does after its imports (graph, link table, router, every algorithm and protocol
weighed); the command-line case adds the interpreter start and the imports.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from sim.collectives import CollectiveModel
from sim.config import load_cluster
from sim.topology import build_topology

GIB = 2**30


@pytest.mark.benchmark
def test_one_allreduce_on_1440_gb200() -> None:
    t0 = time.perf_counter()
    topo = build_topology(load_cluster("gb200-nvl72", 1440))
    t1 = time.perf_counter()
    model = CollectiveModel(topo)
    t2 = time.perf_counter()
    r = model.time("allreduce", GIB)
    t3 = time.perf_counter()
    print(f"\ngb200-nvl72 x1440, one 1 GiB all-reduce: {t3 - t0:.2f} s in all (graph {t1 - t0:.2f} s, "
          f"link table + router {t2 - t1:.2f} s, collective {t3 - t2:.2f} s); {r.algo}/{r.proto}, "
          f"busbw {r.busbw_GBps:.0f} GB/s")
    assert t3 - t0 <= 1.0


@pytest.mark.benchmark
def test_one_allreduce_on_1440_gb200_command_line() -> None:
    cmd = [sys.executable, "-m", "sim", "collective", "--topology", "gb200-nvl72", "--chips", "1440",
           "--op", "allreduce", "--min-bytes", str(GIB), "--max-bytes", str(GIB), "--csv"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    dt = time.perf_counter() - t0
    print(f"\n{' '.join(cmd[1:])}: {dt:.2f} s wall\n{out}")
    assert out.splitlines()[1].startswith(f"{GIB},")
    assert dt <= 1.0
