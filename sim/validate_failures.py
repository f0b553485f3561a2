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

from .config import load_scenario
from .errors import ConfigError
from .faults import simulate_failures

__all__ = ["FailureCase", "validate_failures", "check_failure_budgets", "format_failures"]

COLUMNS = ("case", "scenario", "metric", "measured", "comparison", "budgeted", "split", "source")


@dataclass(frozen=True)
class FailureCase:
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
    path = data_dir / "cases.csv"
    from .validate_training import _read_csv

    header, numbered = _read_csv(path)
    if header != COLUMNS:
        raise ConfigError(f"{path}: columns must be exactly {list(COLUMNS)}")
    rows = [row for _, row in numbered]
    out = []
    cache: dict[str, Any] = {}
    for i, r in enumerate(rows, start=2):
        where = f"{path}:{i}"
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


def check_failure_budgets(cases: list[FailureCase], table: dict[str, float]) -> list[str]:
    out = []
    for c in cases:
        if not c.budgeted:
            continue
        if c.comparison == "relative" and c.error_pct > table["relative_err_max_pct"]:
            out.append(f"failures: {c.case}: predicted {c.predicted:.3g} vs measured {c.measured:.3g} "
                       f"({c.error_pct:.1f}% > relative_err_max_pct = {table['relative_err_max_pct']:g}%)")
        if c.comparison == "at_least" and not c.ok_at_least:
            out.append(f"failures: {c.case}: predicted {c.predicted:.3g} below the measured bound "
                       f"{c.measured:.3g}")
    return out


def format_failures(cases: list[FailureCase]) -> str:
    lines = ["failures: predicted (Monte Carlo mean, 5-95% over 100 seeds) vs published",
             f"{'case':<24}{'split':<13}{'metric':<26}{'measured':>10}{'predicted':>11}  interval"
             "          result"]
    for c in cases:
        if c.comparison == "relative":
            res = f"{c.error_pct:.1f}% off"
        else:
            res = "meets bound" if c.ok_at_least else "BELOW bound"
        res += "" if c.budgeted else " (reported, not budgeted)"
        lines.append(f"{c.case:<24}{c.split:<13}{c.metric:<26}{c.measured:>10.4g}{c.predicted:>11.4g}"
                     f"  [{c.low:.4g}, {c.high:.4g}]  {res}")
    return "\n".join(lines)
