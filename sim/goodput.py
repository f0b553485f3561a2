"""A scenario's ``failures:`` section answered: its job's units, rates, recovery costs and the
Monte Carlo of ``sim.faults`` (``failure_report`` for ``run``; ``scenario_failures`` for ``plan``
and ``validate --suite failures``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config import FailuresConfig, Scenario
from .errors import ConfigError
from .faults import FailureSummary, simulate_histories
from .recovery import Recovery, recovery_costs, state_bytes
from .reliability import REFERENCE_CAUSES, Units, cause_rates_per_hour, fleet_lognormal, job_units
from .topology_spec import GpuClusterSpec, TpuPodSpec
from .units import HOUR_S
from .workload.memory import optimizer_bytes_per_param

__all__ = ["FailureRecord", "failure_report", "scenario_failures", "job_units_of", "replicas_of"]


def job_units_of(scn: Scenario) -> Units:
    """The hosts and swap units of *scn*'s job: a GPU host (an NVL72 compute tray), and its
    NVLink domain where that spans hosts; a TPU host, and its cube where optical switches join
    cubes (v4, v5p, 7x)."""
    spec = scn.cluster.topology
    chips = scn.cluster.chips
    if isinstance(spec, TpuPodSpec):
        cube = spec.cube ** 3 if spec.ndims == 3 and chips >= spec.cube ** 3 else 0
        return job_units(chips, spec.chips_per_host, cube)
    assert isinstance(spec, GpuClusterSpec)
    return job_units(chips, spec.host_gpus, spec.gpus_per_node)


def replicas_of(scn: Scenario) -> int:
    """Data-parallel replicas that each hold the whole training state, so that the others can go
    on without one: every data-parallel rank without ZeRO sharding, the replicas of a hybrid
    sharding (``zero_group``), else 1 (the state is spread over every data-parallel rank)."""
    par = scn.parallelism
    if par.zero == 0:
        return par.dp
    return par.replicas if par.zero_group else 1


def scenario_failures(scn: Scenario, step_s: float, seed: int,
                      cfg: FailuresConfig | None = None, runs: int | None = None) -> FailureSummary:
    """The failure Monte Carlo of *scn*'s job stepping every *step_s* (``cfg``: in place of the
    scenario's ``failures:``, as ``plan`` asks with a horizon alone)."""
    cfg = cfg if cfg is not None else scn.failures
    assert cfg is not None
    step_s = cfg.step_s if cfg.step_s is not None else step_s
    chip = scn.cluster.chip
    units = job_units_of(scn)
    replicas = replicas_of(scn)
    if cfg.recovery == "replica" and replicas < 2:
        par = scn.parallelism
        group = f", zero_group {par.zero_group}" if par.zero_group else ""
        raise ConfigError(f"failures.recovery: replica needs at least two data-parallel replicas "
                          f"that each hold the whole state; this layout has {replicas} (dp "
                          f"{par.dp}, zero {par.zero}{group}); valid: parallelism.zero: 0 with "
                          "dp >= 2, or a zero_group below dp, or another failures.recovery")
    if cfg.spares is not None and cfg.spares > units.swap_units:
        raise ConfigError(f"failures.spares: {cfg.spares} spare {units.swap_unit}s is more than the "
                          f"job's {units.swap_units}; valid: 0 to {units.swap_units}")
    rates = tuple(r * cfg.rate_scale for r in cause_rates_per_hour(REFERENCE_CAUSES, units.chips))
    fleet: tuple[float, float] | float = (cfg.fleet_factor if cfg.fleet_factor is not None
                                          else fleet_lognormal(chip.family))
    median = fleet if isinstance(fleet, float) else fleet[0]
    total_h = sum(rates) * median
    if total_h <= 0:
        raise ConfigError("failures: the failure rate is zero; nothing to simulate")
    tr = scn.training
    state = state_bytes(scn.model.total_params(),
                        optimizer_bytes_per_param(tr.optimizer_state, tr.master_weights))
    link = chip.host_link_Bps or scn.cluster.topology.pcie_Bps
    rec = recovery_costs(cfg, units, HOUR_S / total_h, state_B=state, step_s=step_s,
                         replicas=replicas, host_link_Bps=link, network_Bps=link,
                         ocs_spares=scn.cluster.topology.ocs_spares)
    if rec.interval_s <= rec.write_s:
        raise ConfigError(f"failures.checkpoint_interval_min: {rec.interval_s / 60:.2f} min is not "
                          f"longer than a checkpoint write ({rec.write_s:.1f} s)")
    return simulate_histories(REFERENCE_CAUSES, rates, rec, horizon_days=cfg.horizon_days,
                              planned_per_day=cfg.planned_per_day, fleet=fleet, seed=seed,
                              runs=runs if runs is not None else cfg.monte_carlo_runs,
                              sdc_detect_s=cfg.sdc_detect_h * HOUR_S,
                              repeat_probability=cfg.repeat_probability,
                              weibull_shape=cfg.weibull_shape, fleet_age_days=cfg.fleet_age_days)


@dataclass(frozen=True)
class FailureRecord:
    """A scenario's ``failures:`` section answered: goodput (mean and its 5-95% band over the
    Monte Carlo histories and the fleet factor), unexpected interruptions (mean count, and per
    cause), the MTBF at the fleet's median (and its band), the checkpoint interval, the recovery
    strategy and what one interruption costs, part by part, and the tokens/s that goodput
    leaves."""

    goodput: float
    goodput_interval: tuple[float, float]
    interruptions: float
    interruptions_by_cause: dict[str, float]
    horizon_days: float
    mtbf_h: float
    checkpoint_interval_min: float
    hardware_swap_s: float
    effective_tokens_per_s: float
    recovery: str = "restart"
    mtbf_interval_h: tuple[float, float] = (0.0, 0.0)
    recovery_s: dict[str, float] = field(default_factory=dict)   # one interruption, by part
    lost_hours: dict[str, float] = field(default_factory=dict)   # the horizon's, by what

    @property
    def recovery_per_interruption_s(self) -> float:
        return sum(self.recovery_s.values())

    @property
    def dominant(self) -> str:
        """What costs the most of the time lost over the horizon."""
        return max(self.lost_hours, key=lambda k: self.lost_hours[k]) if self.lost_hours else ""


def failure_report(scn: Any, tokens_per_s: float, seed: int, step_s: float) -> FailureRecord:
    """The failure Monte Carlo of *scn*'s ``failures:`` section for a job stepping at
    *tokens_per_s*, every *step_s* (its time to train, if it names a budget, is
    ``sim.cost.time_to_train``)."""
    cfg = scn.failures
    summary = scenario_failures(scn, step_s, seed)
    g, g_lo, g_hi = summary.goodput()
    n, _, _ = summary.interruptions()
    rec: Recovery = summary.recovery
    lost = {k: v / HOUR_S for k, v in summary.downtime_parts().items() if v > 0}
    return FailureRecord(
        goodput=g, goodput_interval=(g_lo, g_hi), interruptions=n,
        interruptions_by_cause=summary.by_cause(), horizon_days=cfg.horizon_days,
        mtbf_h=summary.mtbf_s / HOUR_S, checkpoint_interval_min=rec.interval_s / 60,
        hardware_swap_s=rec.swap_s, effective_tokens_per_s=tokens_per_s * g,
        recovery=rec.strategy,
        mtbf_interval_h=(summary.mtbf_band_s[0] / HOUR_S, summary.mtbf_band_s[1] / HOUR_S),
        recovery_s=rec.parts(), lost_hours=lost)



