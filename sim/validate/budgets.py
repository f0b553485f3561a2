"""Error budgets: the largest error each suite may show, read from ``DIR/budgets.toml``.

One table per suite (``BUDGET_KEYS`` names its keys, all in percent); budgets only ever get
tighter (DESIGN.md). ``check_*`` return the violations of one suite's report, one human-readable
line each, [] when the suite is within budget.
"""

from __future__ import annotations

import tomllib
import types
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..errors import ConfigError
from .collectives import SYSTEM_FAMILIES, CollectivesReport
from .compute import BUDGETED_FOLDERS, ComputeSummary
from .failures import FailureCase
from .training import ARCHITECTURES, FAMILIES, TrainingReport

__all__ = ["BUDGET_KEYS", "FAMILY_KEYS", "check_budgets", "check_compute_budgets", "check_failure_budgets",
           "check_training_budgets", "load_budgets"]

# Families every budgets file holds to a p90 (the rest of FAMILIES are held where the file names
# them: a Blackwell family enters with its data).
_REQUIRED_FAMILIES = ("A100", "H100", "TPU")
TRAINING_BUDGET_KEYS = frozenset({"step_median_abs_pct", "refused_max_pct"}
                                 | {f"step_p90_abs_pct_{f}" for f in _REQUIRED_FAMILIES})
# A family's own median budget (where it enters above the shared one), and the p90 of a family
# that is not required.
TRAINING_FAMILY_MEDIAN_KEYS = frozenset({f"step_median_abs_pct_{f}" for f in FAMILIES + ARCHITECTURES}
                                        | {f"step_p90_abs_pct_{f}" for f in FAMILIES + ARCHITECTURES})
_REGIMES = (("bw_median_abs_pct", "bandwidth"), ("ramp_median_abs_pct", "ramp"),
            ("lat_median_abs_pct", "latency"))
# Key suffix of each system family's own collectives budgets (``bw_median_abs_pct_efa``, ...).
FAMILY_KEYS = types.MappingProxyType({
    "DGX/HGX IB": "dgx_ib", "NVL72": "nvl72", "EFA": "efa", "GCP": "gcp", "RoCE": "roce",
    "mesh+dragonfly": "mesh_dragonfly"})
assert set(FAMILY_KEYS) == set(SYSTEM_FAMILIES)
COLLECTIVES_FAMILY_KEYS = frozenset(f"{k}_{slug}" for k, _ in _REGIMES for slug in FAMILY_KEYS.values())
BUDGET_KEYS = types.MappingProxyType({
    "collectives": frozenset({"bw_median_abs_pct", "ramp_median_abs_pct", "lat_median_abs_pct"}),
    "training": TRAINING_BUDGET_KEYS,       # per family (FAMILIES) on the test split
    "failures": frozenset({"relative_err_max_pct"}),
    "compute": frozenset({"gemm_median_abs_pct", "attention_median_abs_pct", "grouped_gemm_median_abs_pct",
                          "ssd_median_abs_pct", "routing_median_abs_pct"}),
    "stragglers": frozenset({"replay_median_abs_pct", "whatif_rel_pct"}),
})


def load_budgets(path: Path, suites: Iterable[str] | None = None) -> dict[str, dict[str, float]]:
    """Read the error budgets (TOML): ``{suite: {key: percent}}``.

    The tables of *suites* are required (default: every suite of ``BUDGET_KEYS``); any other suite
    table present is checked too. Raises ``ConfigError`` naming the file and key for a missing file
    or required table, an unknown suite or key, or a value that is not a positive number.
    """
    required = set(BUDGET_KEYS if suites is None else suites)
    if unknown_suites := sorted(required - set(BUDGET_KEYS)):
        raise ConfigError(f"budgets: unknown suite(s) {unknown_suites}; allowed {sorted(BUDGET_KEYS)}")
    path = Path(path)
    try:
        with path.open("rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: budgets file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the budgets file: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML (UTF-8): {e}") from None
    if unknown := sorted(set(raw) - set(BUDGET_KEYS)):
        raise ConfigError(f"{path}: unknown suite table(s) {unknown}; allowed {sorted(BUDGET_KEYS)}")
    out: dict[str, dict[str, float]] = {}
    for suite, keys in BUDGET_KEYS.items():
        table = raw.get(suite)
        if table is None and suite not in required:
            continue
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [{suite}]: table missing")
        optional = {"collectives": COLLECTIVES_FAMILY_KEYS,
                    "training": TRAINING_FAMILY_MEDIAN_KEYS}.get(suite, frozenset())
        if unknown := sorted(set(table) - keys - optional):
            raise ConfigError(f"{path}: [{suite}]: unknown key(s) {unknown}; allowed "
                              f"{sorted(keys)}" + (", and per family {regime key}_{family}: "
                                                   f"{sorted(FAMILY_KEYS.values())}" if optional else ""))
        if missing := sorted(keys - set(table)):
            raise ConfigError(f"{path}: [{suite}]: missing key(s) {missing}")
        for key, value in table.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"{path}: [{suite}].{key}: expected a number > 0 (percent), got {value!r}")
        out[suite] = {k: float(v) for k, v in table.items()}
    return out


def check_budgets(report: CollectivesReport | TrainingReport,
                  budgets: Mapping[str, Mapping[str, float]]) -> list[str]:
    """Budget violations of the ``test`` split, one human-readable line each; [] when within budget.

    Collectives: the medians of the bandwidth, ramp and latency regimes (all families pooled); a
    regime with no test points, or a non-anomalous test run the predictor refused, is a violation
    too: the budget could not be checked. Training: see
    ``check_training_budgets`` (each family held to the budgets separately).
    """
    if isinstance(report, TrainingReport):
        training = budgets.get("training")
        if training is None:
            raise ConfigError("budgets: no [training] table")
        return check_training_budgets(report, training)
    table = budgets.get("collectives")
    if table is None:
        raise ConfigError("budgets: no [collectives] table")
    test = report.summary("test")
    out: list[str] = []
    for key, label, stats in (("bw_median_abs_pct", "bandwidth", test.bandwidth),
                              ("ramp_median_abs_pct", "ramp", test.ramp),
                              ("lat_median_abs_pct", "latency", test.latency)):
        if key not in table:
            raise ConfigError(f"budgets: [collectives]: missing key {key!r}")
        budget = table[key]
        if stats.median_abs_pct is None:
            out.append(f"collectives: no {label}-regime points in the test split; cannot check {key}")
        elif stats.median_abs_pct > budget:
            out.append(f"collectives: test split {label} median abs error {stats.median_abs_pct:.2f}% "
                       f"> budget {key} = {budget:g}% ({stats.n} points)")
    # Each system family with test runs is held to its own budgets too, one per regime it has
    # points in. Where the table budgets families at all, a family with test points and no budget
    # for them is a violation (a new family declares what it earns when it lands).
    per_family = any(k in COLLECTIVES_FAMILY_KEYS for k in table)
    for fam in report.families if per_family else ():
        if fam.split != "test" or fam.system not in FAMILY_KEYS:
            continue
        for key, label in _REGIMES:
            stats = {"bandwidth": fam.bandwidth, "ramp": fam.ramp, "latency": fam.latency}[label]
            if stats.median_abs_pct is None:
                continue
            fkey = f"{key}_{FAMILY_KEYS[fam.system]}"
            if fkey not in table:
                out.append(f"collectives: family {fam.system} has {label}-regime test points but no "
                           f"budget {fkey} in [collectives]")
            elif stats.median_abs_pct > table[fkey]:
                out.append(f"collectives: {fam.system} test {label} median abs error "
                           f"{stats.median_abs_pct:.2f}% > budget {fkey} = {table[fkey]:g}% "
                           f"({stats.n} points)")
    for r in report.runs:
        if r.split == "test" and not r.anomalous and r.error is not None:
            out.append(f"collectives: test run {r.file} not predicted ({r.error})")
    return out


def check_training_budgets(report: TrainingReport, table: Mapping[str, float]) -> list[str]:
    """Violations of the ``[training]`` budgets, one line each; [] when within budget.

    Each family of ``FAMILIES`` is held separately to the median and (its own) p90 of its test split. A family
    with no predicted test run is a violation, and so is a family whose refused test runs (the
    predictor raised, e.g. a plan our memory model says does not fit although it ran) exceed
    ``refused_max_pct`` of its test runs; every refusal is listed in the report either way.
    """
    for key in sorted(TRAINING_BUDGET_KEYS):
        if key not in table:
            raise ConfigError(f"budgets: [training]: missing key {key!r}")
    out: list[str] = []
    for family in FAMILIES:
        if f"step_p90_abs_pct_{family}" not in table:
            continue                       # a family the budgets file does not hold (yet)
        try:
            s = report.summary("test", family)
        except KeyError:
            s = None
        if s is None or s.runs == 0:
            out.append(f"training: no predicted test-split runs for family {family}; cannot check budgets")
            continue
        median_key = f"step_median_abs_pct_{family}"
        if median_key not in table:
            median_key = "step_median_abs_pct"
        for key, label, value in ((median_key, "median", s.step_median_abs_pct),
                                  (f"step_p90_abs_pct_{family}", "p90", s.step_p90_abs_pct)):
            assert value is not None
            if value > table[key]:
                out.append(f"training: {family} test split step-time {label} abs error {value:.2f}% "
                           f"> budget {key} = {table[key]:g}% ({s.runs} runs)")
        tested = [r for r in report.runs if r.split == "test" and r.family == family
                  and r.architecture == "dense"]
        refused = [r for r in tested if r.error is not None]
        if tested and 100 * len(refused) / len(tested) > table["refused_max_pct"]:
            out.append(f"training: {family} test split: {len(refused)} of {len(tested)} runs refused "
                       f"> budget refused_max_pct = {table['refused_max_pct']:g}% "
                       f"({', '.join(r.id for r in refused)})")
    return out + _architecture_violations(report, table)


def _architecture_violations(report: TrainingReport, table: Mapping[str, float]) -> list[str]:
    """The budgets of the architecture families (``step_median_abs_pct_moe``, ...) the table
    holds, on each one's test split."""
    out: list[str] = []
    for arch in ARCHITECTURES:
        for stat in ("median", "p90"):
            key = f"step_{stat}_abs_pct_{arch}"
            if key not in table:
                continue
            s = next((x for x in report.architectures if x.split == "test" and x.family == arch),
                     None)
            value = None if s is None else (s.step_median_abs_pct if stat == "median"
                                            else s.step_p90_abs_pct)
            if value is None:
                out.append(f"training: no predicted test-split runs for architecture {arch}; "
                           f"cannot check {key}")
            elif value > table[key]:
                out.append(f"training: {arch} test split step-time {stat} abs error {value:.2f}% "
                           f"> budget {key} = {table[key]:g}% ({s.runs if s else 0} runs)")
    return out


def check_compute_budgets(summaries: list[ComputeSummary], table: Mapping[str, float]) -> list[str]:
    """Violations of the ``[compute]`` budgets on the budgeted test GPUs
    (``sim.validate.compute.BUDGETED_FOLDERS``): the GEMM (>= 50 us), attention, MoE grouped
    GEMM, MoE routing and Mamba-2 SSD medians."""
    out: list[str] = []
    tests = [s for s in summaries if s.split == "test" and s.gpu in BUDGETED_FOLDERS]
    if not tests:
        return ["compute: no test-GPU tables; cannot check budgets"]
    for key, group in (("gemm_median_abs_pct", "gemm>=50us"), ("attention_median_abs_pct", "attention"),
                       ("grouped_gemm_median_abs_pct", "grouped-gemm"), ("ssd_median_abs_pct", "ssd"),
                       ("routing_median_abs_pct", "routing")):
        for gpu in sorted({s.gpu for s in tests}):
            if not any(s.gpu == gpu and s.group == group for s in tests):
                out.append(f"compute: {gpu} has no {group} rows; cannot check {key}")
        for s in tests:
            if s.group == group and s.median_abs_pct is not None and s.median_abs_pct > table[key]:
                out.append(f"compute: {s.gpu} {group} median abs error {s.median_abs_pct:.2f}% > "
                           f"budget {key} = {table[key]:g}% ({s.rows} rows)")
    return out


def check_failure_budgets(cases: list[FailureCase], table: Mapping[str, float]) -> list[str]:
    """Violations of the ``[failures]`` budget by the budgeted cases: each outside its tolerance
    (``FailureCase.ok``: a relative error over ``relative_err_max_pct``, a bound not met, a
    published figure outside the predicted band)."""
    out = []
    for c in cases:
        if not c.budgeted or c.ok(table["relative_err_max_pct"]):
            continue
        if c.comparison == "relative":
            out.append(f"failures: {c.case}: predicted {c.predicted:.3g} vs measured {c.measured:.3g} "
                       f"({c.error_pct:.1f}% > relative_err_max_pct = {table['relative_err_max_pct']:g}%)")
        elif c.comparison == "within_band":
            out.append(f"failures: {c.case}: measured {c.measured:.3g} outside the predicted 5-95% "
                       f"band [{c.low:.3g}, {c.high:.3g}]")
        else:
            side = "below" if c.comparison == "at_least" else "above"
            out.append(f"failures: {c.case}: predicted {c.predicted:.3g} {side} the measured bound "
                       f"{c.measured:.3g}")
    return out
