"""The reliability sections of a scenario: ``stragglers`` and ``failures`` (DESIGN.md schema),
each read into its frozen record with every value checked (``sim.config.fields.Section``)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .fields import Section
from .schema import FailuresConfig, StragglersConfig

__all__ = ["read_failures", "read_stragglers"]


def read_stragglers(s: Section) -> StragglersConfig:
    """The ``stragglers`` section."""
    return StragglersConfig(
        compute_jitter_sigma=s.number("compute_jitter_sigma", 0.0),
        slow_fraction=s.number("slow_fraction", 0.0, maximum=1.0),
        slow_factor=s.number("slow_factor", 1.0, minimum=1.0),
        link_degrade_fraction=s.number("link_degrade_fraction", 0.0, maximum=1.0),
        link_bandwidth_factor=s.number("link_bandwidth_factor", 1.0, minimum=0.0, maximum=1.0,
                                      strict_min=True),
    )


_RECOVERIES = ("restart", "hot_spare", "replica", "in_memory_checkpoint")


def read_failures(s: Section) -> FailuresConfig:
    """The ``failures`` section (checkpoint interval and fleet factor: a number or ``auto``)."""
    interval: float | None = None
    if s.has("checkpoint_interval_min") and s.raw["checkpoint_interval_min"] != "auto":
        interval = s.number("checkpoint_interval_min", strict_min=True)
    fleet: float | None = None
    if s.has("fleet_factor") and s.raw["fleet_factor"] != "auto":
        fleet = s.number("fleet_factor", strict_min=True)

    def opt(key: str, **kw: Any) -> float | None:
        return s.number(key, **kw) if s.has(key) else None
    f = FailuresConfig(
        horizon_days=s.number("horizon_days", 30.0, strict_min=True),
        checkpoint_interval_min=interval,
        recovery=s.text("recovery", "restart", _RECOVERIES),
        checkpoint_write_s=opt("checkpoint_write_s"),
        checkpoint_load_s=opt("checkpoint_load_s"),
        detect_s=opt("detect_s"),
        restart_s=opt("restart_s"),
        swap_s=opt("swap_s"),
        storage_GBps=opt("storage_GBps", strict_min=True),
        spares=s.integer("spares", 0, minimum=0) if s.has("spares") else None,
        repair_h=s.number("repair_h", 8.0),
        fleet_factor=fleet,
        sdc_detect_h=s.number("sdc_detect_h", 2.0),
        repeat_probability=s.number("repeat_probability", 0.0, maximum=0.99),
        weibull_shape=s.number("weibull_shape", 1.0, strict_min=True, maximum=10.0),
        fleet_age_days=s.number("fleet_age_days", 365.0, strict_min=True),
        planned_per_day=s.number("planned_per_day", 0.0),
        rate_scale=s.number("rate_scale", 1.0),
        tokens=s.number("tokens", strict_min=True) if s.has("tokens") else None,
        monte_carlo_runs=s.integer("monte_carlo_runs", 100),
        step_s=opt("step_s", strict_min=True),
    )
    if (interval is not None and f.checkpoint_write_s is not None
            and interval * 60 <= f.checkpoint_write_s):
        raise ConfigError(f"failures.checkpoint_interval_min: {interval} min is not longer than "
                          f"checkpoint_write_s = {f.checkpoint_write_s} s")
    return f
