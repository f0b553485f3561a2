"""``clustersim validate --suite failures``: the failure/restart model against published fleets.

Cases in validation/failures/cases.csv name a scenario file beside it, a metric the failure
simulation predicts (``unexpected_interruptions`` or ``goodput``, Monte Carlo mean with a 5-95%
interval over 100 seeds) and how it is compared: ``relative`` (|pred - meas| / meas), or
``at_least`` (the measured value is a lower bound). Cases marked ``budgeted: no`` are reported but
not held to the budget (say why in their source).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import load_scenario
from ..errors import ConfigError
from ..faults import simulate_failures
from .data import read_csv

__all__ = ["FailureCase", "validate_failures"]

COLUMNS = ("case", "scenario", "metric", "measured", "comparison", "budgeted", "split", "source")


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
        if r["metric"] not in ("unexpected_interruptions", "goodput"):
            raise ConfigError(f"{where}: metric: got {r['metric']!r}; valid: unexpected_interruptions, goodput")
        if r["comparison"] not in ("relative", "at_least"):
            raise ConfigError(f"{where}: comparison: got {r['comparison']!r}; valid: relative, at_least")
        if r["scenario"] not in cache:
            scn = load_scenario(data_dir / r["scenario"])
            if scn.failures is None:
                raise ConfigError(f"{where}: scenario {r['scenario']} has no failures: section")
            cache[r["scenario"]] = simulate_failures(
                scn.failures, scn.cluster.chip, scn.cluster.chips, seed,
                runs=scn.failures.monte_carlo_runs, ocs_spares=scn.cluster.topology.ocs_spares)
        summary = cache[r["scenario"]]
        mean, lo, hi = summary.goodput() if r["metric"] == "goodput" else summary.interruptions()
        out.append(FailureCase(r["case"], r["metric"], float(r["measured"]), r["comparison"],
                               r["budgeted"] == "yes", r["split"], r["source"], mean, lo, hi))
    return out
