"""cluster.background_load: other jobs' traffic takes a share of every inter-node link."""

from __future__ import annotations

import pytest

from sim.cli import main
from sim.collectives import CollectiveModel
from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.run import run
from sim.topology import build_topology


def _model(chips: int, load: float) -> CollectiveModel:
    c = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": chips, "background_load": load},
                            "model": "llama3-8b"}).cluster
    return CollectiveModel(build_topology(c))


def test_nic_bound_traffic_slows_by_the_share_taken() -> None:
    # A 256 MiB all-gather over two nodes is bound by the NICs: half of them left, twice the time
    # (within the latency terms).
    base, loaded = _model(16, 0.0), _model(16, 0.5)
    t0 = base.time("allgather", 2**28).time_s
    t1 = loaded.time("allgather", 2**28).time_s
    assert t1 == pytest.approx(2 * t0, rel=0.1)
    # Inside one node nothing changes: NVLink is the job's own.
    assert _model(8, 0.5).time("allreduce", 2**28).time_s == _model(8, 0.0).time("allreduce", 2**28).time_s


def test_a_step_with_exposed_inter_node_traffic_slows() -> None:
    def step(load: float) -> float:
        scn = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 64, "background_load": load},
                                  "model": "llama3-8b", "training": {"seq_len": 4096, "global_batch": 64},
                                  "parallelism": {"tp": 1, "zero": 3}})
        return run(scn).step.step_time_s
    assert step(0.8) > step(0.0) * 1.05


def test_background_load_bounds(capsys) -> None:
    with pytest.raises(ConfigError, match=r"cluster.background_load: must be <= 0.95, got 1"):
        scenario_from_dict({"cluster": {"topology": "dgx-h100", "background_load": 1.0}, "model": "llama3-8b"})
    assert main(["collective", "--topology", "dgx-h100", "--chips", "16", "--op", "allgather",
                 "--background-load", "-0.1"]) == 2
    assert "background_load: must be >= 0" in capsys.readouterr().err
