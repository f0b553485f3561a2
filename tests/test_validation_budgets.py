"""The network model against real nccl-tests runs, held to the budgets in validation/budgets.toml.

A change that makes the model worse on the test split fails here. The calibration constant is
re-fitted from the calibration split and must equal the value in sim/calibration.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.calibration import LINK_EFFICIENCY, NCCL_TESTS_LAUNCH_PER_GPU_S, TORCH_CALL_OVERHEAD_S
from sim.config import load_topology_spec
from sim.validate import (
    CaseSpec,
    check_budgets,
    fit_nccl_tests_launch_s,
    fit_nvlink_efficiency,
    fit_torch_call_overhead_s,
    load_budgets,
    validate_collectives,
)
from sim.validate.predictors import CasePredictor

DATA = Path(__file__).resolve().parent.parent / "validation"


@pytest.fixture(scope="module")
def report():
    return validate_collectives(DATA / "collectives", CasePredictor())


def test_collectives_within_budget(report) -> None:
    budgets = load_budgets(DATA / "budgets.toml")
    assert check_budgets(report, budgets) == []
    test = report.summary("test")
    bw, lat = test.bandwidth, test.latency
    assert bw.median_abs_pct is not None and lat.median_abs_pct is not None
    print(f"\ntest split: busbw median {bw.median_abs_pct:.1f}% (n={bw.n}), "
          f"latency median {lat.median_abs_pct:.1f}% (n={lat.n})")


def test_calibration_split_is_reported_separately(report) -> None:
    cal, test = report.summary("calibration"), report.summary("test")
    assert cal.bandwidth.n > 0 and test.bandwidth.n > 0
    assert {r.split for r in report.runs} == {"calibration", "test"}


def test_nvlink_efficiency_is_the_calibration_fit() -> None:
    full = CasePredictor({"nvlink": 1.0, "ib": 1.0})
    fitted = fit_nvlink_efficiency(DATA / "collectives", full)
    assert LINK_EFFICIENCY["nvlink"] == pytest.approx(fitted, abs=0.005)


def test_slingshot_efficiency_is_the_calibration_fit() -> None:
    """``LINK_EFFICIENCY["slingshot"]`` re-derived from the calibration split's Slingshot runs."""
    from sim.validate import fit_link_efficiency

    fitted = fit_link_efficiency(DATA / "collectives", "slingshot", {"polaris"},
                                 lambda x: CasePredictor({**LINK_EFFICIENCY, "slingshot": x}))
    assert LINK_EFFICIENCY["slingshot"] == pytest.approx(fitted, abs=1e-9)


def test_gib_efficiency_is_the_calibration_fit() -> None:
    """``LINK_EFFICIENCY["gib"]`` re-derived from the calibration split's runs on RoCE under
    Google's gIB plugin (Google's documented A4 and A3 Ultra 2-node all-gathers)."""
    from sim.validate import fit_link_efficiency

    gib = {"gcp-a3-ultra", "gcp-a4"}
    assert {load_topology_spec(t).transport for t in gib} == {"gib"}
    fitted = fit_link_efficiency(DATA / "collectives", "gib", gib,
                                 lambda x: CasePredictor({**LINK_EFFICIENCY, "gib": x}))
    assert LINK_EFFICIENCY["gib"] == pytest.approx(fitted, abs=1e-9)


def test_proxy_step_is_the_calibration_fit() -> None:
    """``PROXY_STEP_US`` re-derived from the calibration split's points that run LL128 across
    nodes on NCCL's own IB verbs transport (InfiniBand, RoCE)."""
    from sim.calibration import PROXY_STEP_US
    from sim.validate import fit_proxy_step_us
    from sim.validate.collectives import TOPOLOGIES

    ib_verbs = {t for t in TOPOLOGIES if load_topology_spec(t).transport in ("ib", "roce")}
    fitted = fit_proxy_step_us(DATA / "collectives", lambda us: CasePredictor(proxy_step_us=us),
                               ib_verbs)
    assert fitted == PROXY_STEP_US


@pytest.mark.slow  # a full refit over the calibration split (~20 s)
def test_net_latency_is_the_calibration_fit() -> None:
    """``NET_LATENCY_US`` re-derived from the calibration split: transports whose topology file
    gives no ``net_latency_us`` and are not IB verbs, whose latencies NCCL's own table gives
    (InfiniBand, RoCE, RoCE under gIB)."""
    from sim.calibration import NET_LATENCY_US
    from sim.validate import fit_net_latency

    def transport_of(topology: str) -> str | None:
        spec = load_topology_spec(topology)
        return (None if spec.transport in ("ib", "roce", "gib") or spec.net_latency_s is not None
                else spec.transport)

    fitted = fit_net_latency(DATA / "collectives", transport_of,
                             lambda table: CasePredictor(net_latency_us=table))
    assert fitted == NET_LATENCY_US


def test_nccl_tests_launch_cost_is_the_calibration_fit() -> None:
    fitted = fit_nccl_tests_launch_s(DATA / "collectives")
    assert NCCL_TESTS_LAUNCH_PER_GPU_S == pytest.approx(fitted, rel=1e-3)


def test_one_thread_driving_g_gpus_is_bound_by_g_launches() -> None:
    """nccl-tests with -g 4 on the 4-GPU mesh: a 4-byte all-reduce takes 4 launches, not NCCL's
    ring/LL latency (6.6 + 6 x 0.6 us), which is what it takes with one GPU per thread."""
    predict = CasePredictor()
    case = CaseSpec(topology="hgx-h100-4gpu", gpus=4, sharp=False, op="allreduce", size_bytes=4,
                    dtype="float", nccl_version=(2, 22))
    one = predict(case)
    assert one == pytest.approx((6.6 + 6 * 0.6) * 1e-6, rel=0.05)
    four = predict(CaseSpec(**{**{f: getattr(case, f) for f in case.__dataclass_fields__},
                               "gpus_per_thread": 4}))
    assert four == pytest.approx(4 * NCCL_TESTS_LAUNCH_PER_GPU_S)
    big = dict(size_bytes=1 << 30, gpus_per_thread=4)
    base = {f: getattr(case, f) for f in case.__dataclass_fields__}
    assert predict(CaseSpec(**{**base, **big})) == predict(CaseSpec(**{**base, "size_bytes": 1 << 30}))


def test_torch_call_overhead_is_the_calibration_fit() -> None:
    fitted = fit_torch_call_overhead_s(DATA / "collectives", CasePredictor(torch_call_s=0.0))
    assert TORCH_CALL_OVERHEAD_S == pytest.approx(fitted, rel=1e-3)


def test_a_single_timed_torch_call_adds_its_host_overhead() -> None:
    """all_reduce_bench.py times one call on an idle device: the collective plus the call's host
    overhead, at every size (nccl-tests' stream of calls hides it)."""
    predict = CasePredictor()
    base = dict(topology="dgx-h200", gpus=8, sharp=False, op="allreduce", dtype="float",
                nccl_version=(2, 27))
    for size in (32 << 10, 64 << 20, 1 << 30):
        nccl = predict(CaseSpec(size_bytes=size, **base))
        torch = predict(CaseSpec(size_bytes=size, harness="torch-single-call", **base))
        assert torch - nccl == pytest.approx(TORCH_CALL_OVERHEAD_S, rel=1e-6)


def test_slingshot_peer_cost_is_the_calibration_fit() -> None:
    """``NET_PEER_US["slingshot"]`` re-derived from the calibration split's Polaris all-to-alls."""
    from sim.calibration import NET_PEER_US
    from sim.validate import fit_net_peer_us

    fitted = fit_net_peer_us(DATA / "collectives", "slingshot", {"polaris"},
                             lambda table: CasePredictor(peer_us=table))
    assert NET_PEER_US["slingshot"] == pytest.approx(fitted, abs=1e-9)
