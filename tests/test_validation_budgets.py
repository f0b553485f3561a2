"""The network model against real nccl-tests runs, held to the budgets in validation/budgets.toml.

A change that makes the model worse on the test split fails here. The calibration constant is
re-fitted from the calibration split and must equal the value in sim/calibration.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.calibration import LINK_EFFICIENCY
from sim.validate import check_budgets, fit_nvlink_efficiency, load_budgets, validate_collectives
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


def test_net_latency_is_the_calibration_fit() -> None:
    """``NET_LATENCY_US`` re-derived from the calibration split: transports whose topology file
    gives no ``net_latency_us`` and are not NCCL's own IB verbs (InfiniBand, RoCE)."""
    from sim.calibration import NET_LATENCY_US
    from sim.config import load_topology_spec
    from sim.validate import fit_net_latency

    def transport_of(topology: str) -> str | None:
        spec = load_topology_spec(topology)
        return (None if spec.transport in ("ib", "roce") or spec.net_latency_s is not None
                else spec.transport)

    fitted = fit_net_latency(DATA / "collectives", transport_of,
                             lambda table: CasePredictor(net_latency_us=table))
    assert fitted == NET_LATENCY_US
