"""Result records of a run. Their views (tables, ``run --json`` with DESIGN.md's field names) are
in ``sim/report.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["StepResult"]


@dataclass(frozen=True)
class StepResult:
    scenario: str
    topology: str
    chip: str
    chips: int
    step_time_s: float
    tokens_per_step: int
    model_flops_per_step: float
    peak_flops_per_chip: float
    memory_per_chip_GiB: float
    memory_breakdown_GiB: dict[str, float]
    breakdown_s: dict[str, float]
    usd_per_chip_hour: float
    parallelism: dict[str, Any]
    critical_stage: int
    engine_events: int
    seed: int
    software: dict[str, Any] = field(default_factory=dict)   # the profile used (sim.software)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def mfu(self) -> float:
        """PaLM appendix B: model FLOPs per second over the chips' dense BF16 peak."""
        return self.model_flops_per_step / (self.step_time_s * self.chips * self.peak_flops_per_chip)

    @property
    def cost_usd_per_million_tokens(self) -> float:
        return self.chips * self.usd_per_chip_hour / 3600 / self.tokens_per_s * 1e6

    def with_extra(self, extra: dict[str, Any]) -> "StepResult":
        """The same result with more output fields (failures, step-time distributions)."""
        from dataclasses import replace

        return replace(self, extra={**self.extra, **extra})
