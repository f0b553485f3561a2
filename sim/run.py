"""The one entry every command uses: ``run(scenario, seed=...) -> RunResult``.

A scenario is resolved once into its job (``sim.job``), its step played (``sim.training``), then
what else the scenario asks for is answered from that step: the step-time distribution over
``steps`` draws, failures and goodput (``sim.goodput``), the time to train the token budgets and
the cost (``sim.cost``). ``clustersim run`` and ``sweep``, ``plan``'s confirmation and the
training suite's predictor all call it; ``sim.report`` turns its record into tables and JSON.
"""

from __future__ import annotations

from .collectives import CollectiveModel
from .config import Scenario
from .cost import cost_summary, time_to_train
from .job import resolve_job
from .progress import progress
from .results import RunResult, StepDistribution
from .stages import StackEfficiency
from .topology import Topology, frozen_gc
from .training import play_step

__all__ = ["run"]


def run(scenario: Scenario, seed: int | None = None, *, steps: int = 1, trace: bool = False,
        per_rank: bool = False, max_events: int | None = None, topo: Topology | None = None,
        net: CollectiveModel | None = None,
        stack_efficiency: StackEfficiency | None = None, extras: bool = True) -> RunResult:
    """Play *scenario* (module docstring). *seed*: the step's draws (default the scenario's);
    *steps* > 1: that many steps with fresh straggler draws (seeds seed, seed+1, ...) for the
    distribution; *trace*: keep the step's timeline; *per_rank*: play every rank of a stage;
    *max_events*: refuse (ConfigError) before running when the steps would process more simpy
    events than this (None: no limit). *topo* / *net*: built already for ``scenario.cluster``
    (a scenario sharing its fabric, ``cluster.shared_with``, builds its own for both jobs);
    *stack_efficiency* overrides ``sim.calibration.STACK_EFFICIENCY`` (for its fit); *extras*
    False plays the step alone, without what explains it (``play_step``: the step with every
    transfer alone, the straggler attribution, the neighbour alone), for callers that keep only
    the step (the training suite)."""
    step_seed = scenario.seed if seed is None else seed
    # PERF: a large cluster's graph and link tables are millions of long-lived objects that each
    # full collection would walk again (~1 s of the 98,304-GPU step in
    # benchmarks/test_bench_training.py): built with the collector off, then out of its sight
    # until the step is done.
    with frozen_gc() as freeze:
        job = resolve_job(scenario, topo=topo, net=net, stack_efficiency=stack_efficiency,
                          per_rank=per_rank, trace=trace, steps=steps, max_events=max_events,
                          freeze=freeze)
        played = play_step(job, step_seed, per_rank=per_rank, trace=trace, extras=extras)
        distribution = None
        if steps > 1:
            # The further draws keep only their step time: nothing that explains it is played.
            times = [played.result.step_time_s] + [
                play_step(job, step_seed + k, extras=False).result.step_time_s
                for k in progress(range(1, steps), steps - 1, "simulating steps")]
            distribution = StepDistribution.of(times)
    step = played.result
    failures = failures_time = None
    if scenario.failures is not None:
        from .goodput import failure_report  # PERF: the failure models only for runs with failures
        failures = failure_report(scenario, step.tokens_per_s, step_seed, step.step_time_s)
        if scenario.failures.tokens is not None:
            failures_time = time_to_train(scenario.failures.tokens, step.tokens_per_s, failures.goodput)
    cost = cost_summary(scenario, step.tokens_per_s, failures.goodput if failures else None)
    # job.scenario: the scenario as it runs (XLA's rematerialization may have changed its policy)
    return RunResult(job.scenario, step, cost, played.stragglers, played.shared, distribution, failures,
                     failures_time, tuple(played.engine.intervals) if trace else None)
