"""The engine: a training step played in simulated time (``step``: simpy processes on shared
links; ``fast``: the closed-form screen and the work estimate; ``records``: its inputs and
outputs)."""

from .fast import estimate_events, fast_step, step_floor
from .loads import private_loads, step_loads
from .records import EngineResult, Interval, Schedule, Segment, StagePlan
from .step import StepEngine, simulate
from .together import simulate_together

__all__ = ["Schedule", "Segment", "StagePlan", "Interval", "EngineResult", "StepEngine", "simulate",
           "simulate_together", "estimate_events", "fast_step", "step_floor", "private_loads",
           "step_loads"]
