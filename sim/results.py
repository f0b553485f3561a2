"""Result records of a run (``sim.run.run``): the step and what the scenario asked for besides it,
each a typed record. Their views (tables, ``run --json`` with DESIGN.md's field names) are in
``sim/report/``; nothing here prints or reads a file."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:                       # type names only
    from .config import Scenario
    from .cost import CostRecord, TimeToTrain
    from .engine import Interval
    from .goodput import FailureRecord

__all__ = ["StepResult", "StragglerAttribution", "StragglerRecord", "SharedJobRecord", "StepDistribution", "RunResult"]


@dataclass(frozen=True)
class StepResult:
    """One simulated step: its time and breakdown, the plan behind it and what it costs to hold.

    *link_sharing_s*: what sharing links cost the step (its time less the same step with every
    transfer at its time alone); None where the step played no transfer on shared links."""

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
    usd_per_chip_hour: float | None     # None: no price known (sim.config.CostConfig)
    parallelism: dict[str, Any]
    critical_stage: int
    engine_events: int
    seed: int
    software: dict[str, Any] = field(default_factory=dict)   # the profile used (sim.software)
    link_sharing_s: float | None = None
    network_solves: int = 0             # times the engine solved links over capacity (sim.engine)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def mfu(self) -> float:
        """PaLM appendix B: model FLOPs per second over the chips' dense BF16 peak."""
        return self.model_flops_per_step / (self.step_time_s * self.chips * self.peak_flops_per_chip)

    @property
    def cost_usd_per_million_tokens(self) -> float | None:
        """None where no price is known."""
        if self.usd_per_chip_hour is None:
            return None
        return self.chips * self.usd_per_chip_hour / 3600 / self.tokens_per_s * 1e6


@dataclass(frozen=True)
class StragglerAttribution:
    """The slowdown stragglers caused and who caused it, with the definitions of the measured
    what-if (Lin et al. OSDI 2025, Eq. 1-4; ``sim.traces.whatif``): *slowdown* S = the step over
    the straggler-free step; each ``by_*`` maps a group (a pipeline stage, a data-parallel replica,
    a cause: jitter, slow chips, degraded links) to the step with only its stragglers kept, over
    the straggler-free step."""

    slowdown: float
    straggler_free_step_s: float
    by_stage: dict[str, float]
    by_replica: dict[str, float]
    by_cause: dict[str, float]


@dataclass(frozen=True)
class StragglerRecord:
    """Who made a straggler step wait (``sim.straggler_step``): the slowest replica and its slow
    chips, how long the median replica waited for it, every slow chip drawn, the replicas' step
    times (min, median, max) and the attribution of the slowdown."""

    attribution: StragglerAttribution
    slowest_replica: int
    slowest_replica_chips: tuple[int, ...]
    excess_s: float
    slow_chips: tuple[int, ...]
    replica_step_s: dict[str, float]            # min, median, max over the replicas


@dataclass(frozen=True)
class SharedJobRecord:
    """A step with a second job on the next chips of the fabric (``cluster.shared_with``)."""

    scenario: str
    chips: int
    step_time_alone_s: float
    slowdown: float
    neighbour_step_time_s: float | None          # None: no step of it finished meanwhile
    neighbour_step_time_alone_s: float


@dataclass(frozen=True)
class StepDistribution:
    """Step times over ``run --steps K`` (fresh straggler draws each), in seconds."""

    steps: int
    mean: float
    p50: float
    p99: float
    min: float
    max: float

    @classmethod
    def of(cls, times_s: Sequence[float]) -> StepDistribution:
        import numpy as np

        return cls(len(times_s), float(np.mean(times_s)), float(np.percentile(times_s, 50)),
                   float(np.percentile(times_s, 99)), float(min(times_s)), float(max(times_s)))


@dataclass(frozen=True)
class RunResult:
    """What ``run(scenario)`` answers: the step, and each part the scenario asked for (None where
    it did not): stragglers, the job sharing the fabric, the step-time distribution, failures and
    the time to train ``failures.tokens`` (``cost.train``: ``training.tokens``'s), and the cost.
    *timeline*: the step's intervals when a trace was asked for."""

    scenario: Scenario
    step: StepResult
    cost: CostRecord
    stragglers: StragglerRecord | None = None
    shared: SharedJobRecord | None = None
    distribution: StepDistribution | None = None
    failures: FailureRecord | None = None
    failures_time_to_train: TimeToTrain | None = None
    timeline: tuple[Interval, ...] | None = None
