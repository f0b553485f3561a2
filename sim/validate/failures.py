"""``clustersim validate --suite failures``: the failure/restart model against published fleets.

Cases in validation/failures/cases.csv name a scenario file beside it, a metric the failure
simulation predicts and how it is compared. Metrics: ``unexpected_interruptions`` and ``goodput``
(Monte Carlo mean with its 5-95% interval over the histories, each with its own fleet factor),
``mttf_h`` (the job's mean time to failure at the fleet's median, with the 5-95% range of the
fleet factor) and ``downtime_fraction`` (the share of the horizon spent recovering: detection,
swaps, restarts, checkpoint loads). Comparisons: ``relative`` (|pred - meas| / meas), ``at_least``
/ ``at_most`` (the published figure bounds the prediction), ``within_band`` (the published figure
of one fleet lies in the predicted 5-95% range: fleets differ, and the model says by how much).
Cases marked ``budgeted: no`` are reported but not held to the budget (say why in their source).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import Scenario, load_scenario
from ..errors import ConfigError
from ..faults import FailureSummary
from ..goodput import scenario_failures
from ..units import HOUR_S
from .data import read_csv

__all__ = ["FailureCase", "validate_failures"]

COLUMNS = ("case", "scenario", "metric", "measured", "comparison", "budgeted", "split", "source")
METRICS = ("unexpected_interruptions", "goodput", "mttf_h", "downtime_fraction")
COMPARISONS = ("relative", "at_least", "at_most", "within_band")


@dataclass(frozen=True)
class FailureCase:
    """One row of cases.csv with the prediction: the Monte Carlo mean and its 5-95% interval."""

    case: str
    metric: str
    measured: float
    comparison: str
    budgeted: bool
    split: str
    source: str
    predicted: float
    low: float
    high: float

    @property
    def error_pct(self) -> float:
        return 100 * abs(self.predicted - self.measured) / self.measured

    @property
    def ok_at_least(self) -> bool:
        return self.predicted >= self.measured

    def ok(self, relative_max_pct: float) -> bool:
        """Within its tolerance: a relative error up to *relative_max_pct*, a bound met, or the
        measured figure inside the predicted band."""
        return {"relative": self.error_pct <= relative_max_pct,
                "at_least": self.predicted >= self.measured,
                "at_most": self.predicted <= self.measured,
                "within_band": self.low <= self.measured <= self.high}[self.comparison]


def validate_failures(data_dir: Path, seed: int = 0) -> list[FailureCase]:
    """Predict every case of *data_dir* (``DIR/failures``), one failure simulation per scenario."""
    path = data_dir / "cases.csv"
    header, numbered = read_csv(path)
    if header != COLUMNS:
        raise ConfigError(f"{path}: columns must be exactly {list(COLUMNS)}")
    out = []
    cache: dict[str, Any] = {}
    for line, r in numbered:
        where = f"{path}:{line}"
        if r["metric"] not in METRICS:
            raise ConfigError(f"{where}: metric: got {r['metric']!r}; valid: {', '.join(METRICS)}")
        if r["comparison"] not in COMPARISONS:
            raise ConfigError(f"{where}: comparison: got {r['comparison']!r}; valid: "
                              f"{', '.join(COMPARISONS)}")
        if r["scenario"] not in cache:
            scn = load_scenario(data_dir / r["scenario"])
            if scn.failures is None:
                raise ConfigError(f"{where}: scenario {r['scenario']} has no failures: section")
            cache[r["scenario"]] = scenario_failures(scn, _step_s(scn), seed)
        mean, lo, hi = _metric(cache[r["scenario"]], r["metric"])
        out.append(FailureCase(r["case"], r["metric"], float(r["measured"]), r["comparison"],
                               r["budgeted"] == "yes", r["split"], r["source"], mean, lo, hi))
    return out


def _metric(summary: FailureSummary, metric: str) -> tuple[float, float, float]:
    """(mean, p5, p95) of *metric* in *summary*."""
    if metric == "goodput":
        return summary.goodput()
    if metric == "unexpected_interruptions":
        return summary.interruptions()
    if metric == "mttf_h":
        lo, hi = summary.mtbf_band_s
        return summary.mtbf_s / HOUR_S, lo / HOUR_S, hi / HOUR_S
    down = np.array([sum(r.downtime_s.values()) / summary.horizon_s for r in summary.runs])
    return float(down.mean()), float(np.percentile(down, 5)), float(np.percentile(down, 95))


def _step_s(scn: Scenario) -> float:
    """The job's step time: the scenario's ``failures.step_s``, else the screening path's
    (``plan``'s: the engine without traffic)."""
    assert scn.failures is not None
    if scn.failures.step_s is not None:
        return scn.failures.step_s
    from ..collectives import CollectiveModel
    from ..engine import fast_step
    from ..job import schedule_of
    from ..stages import plan_stages
    from ..topology import build_topology
    from ..workload.transformer import build_workload

    wl = build_workload(scn)
    net = CollectiveModel(build_topology(scn.cluster))
    return fast_step(plan_stages(wl, net, traffic=False), schedule_of(scn, wl)).step_time_s
