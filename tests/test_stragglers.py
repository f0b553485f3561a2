"""Stragglers: the step waits for the slowest member, checked against order statistics."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import integrate, stats

from sim.config import scenario_from_dict
from sim.engine import Schedule, Segment, StagePlan, simulate
from sim.run import run
from sim.stragglers import ReplicaDraws, jitter_for


def expected_max_lognormal(n: int, sigma: float) -> float:
    """E[max of n iid exp(sigma Z)] = integral of 1 - F(x)^n over x > 0 (scipy)."""
    dist = stats.lognorm(s=sigma)
    val, _ = integrate.quad(lambda x: 1 - dist.cdf(x) ** n, 0, np.inf)
    return val


def one_op_then_barrier() -> StagePlan:
    # Every rank: one 1-second compute op, then a data-parallel barrier (no transfer time).
    return StagePlan((Segment("compute", 1.0),), (Segment("compute", 0.0),), 1, 0, 0, 0, 0, 0.0,
                     0.0, False, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("n, sigma", [(8, 0.1), (64, 0.05),
                                      pytest.param(256, 0.2, marks=pytest.mark.slow)])  # ~6 s
def test_per_rank_step_is_the_expected_max_of_n_lognormals(n: int, sigma: float) -> None:
    steps = []
    for seed in range(300):
        rng = np.random.default_rng(seed)
        draws = rng.lognormal(0.0, sigma, size=n)
        r = simulate([one_op_then_barrier()], Schedule(pp=1, vs=1, micro=1, schedule_kind="1f1b"),
                     ranks_per_stage=n, groups=lambda kind, local: (0, n),
                     jitter=lambda rank, k, draws=draws: float(draws[rank]) if k == 0 else 1.0)
        steps.append(r.step_time_s)
    assert np.mean(steps) == pytest.approx(expected_max_lognormal(n, sigma), rel=0.01)


def test_order_statistic_sampling_matches_explicit_maxima() -> None:
    # A stage standing for m ranks draws max-of-m directly; its mean must be E[max of m].
    m, sigma = 16, 0.1
    draws = ReplicaDraws(0, (1.0,), ())
    jit = jitter_for(draws, sigma, m, np.random.default_rng(0))
    sample = [jit(0, k) for k in range(20000)]
    assert np.mean(sample) == pytest.approx(expected_max_lognormal(m, sigma), rel=0.01)


BASE = {
    "cluster": {"topology": "dgx-h100", "chips": 64},
    "model": {"preset": "llama3-8b", "layers": 8},
    "training": {"seq_len": 2048, "global_batch": 32, "micro_batch": 1},
    "parallelism": {"tp": 8, "pp": 2},
}


def test_one_slow_gpu_slows_the_whole_step() -> None:
    clean = run(scenario_from_dict(BASE)).step
    played = run(scenario_from_dict({**BASE, "stragglers": {"slow_fraction": 1 / 64,
                                                             "slow_factor": 2.0}}))
    slow = played.step
    assert slow.step_time_s > 1.5 * clean.step_time_s
    assert slow.breakdown_s["straggler_wait"] > 0
    assert played.stragglers is not None and len(played.stragglers.slowest_replica_chips) == 1
    assert sum(slow.breakdown_s.values()) == pytest.approx(slow.step_time_s, rel=1e-9)


def test_jitter_is_deterministic_per_seed_and_varies_across_seeds() -> None:
    scn = scenario_from_dict({**BASE, "stragglers": {"compute_jitter_sigma": 0.1}})
    a, b, c = (run(scn, seed=s).step.step_time_s for s in (3, 3, 4))
    assert a == b and a != c
    assert a > run(scenario_from_dict(BASE)).step.step_time_s


def test_bad_straggler_config() -> None:
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"stragglers.slow_fraction: must be <= 1, got 2"):
        scenario_from_dict({**BASE, "stragglers": {"slow_fraction": 2}}, "s.yaml")
    with pytest.raises(ConfigError, match=r"stragglers.compute_jitter_sigma: must be >= 0.0, got -0.1"):
        scenario_from_dict({**BASE, "stragglers": {"compute_jitter_sigma": -0.1}}, "s.yaml")


def test_degraded_links_slow_the_data_parallel_reduction() -> None:
    par = {"tp": 1, "pp": 1, "zero": 3}
    tr = {"seq_len": 2048, "global_batch": 64, "micro_batch": 1}
    clean = run(scenario_from_dict({**BASE, "parallelism": par, "training": tr})).step
    bad = run(scenario_from_dict({**BASE, "parallelism": par, "training": tr,
                                       "stragglers": {"link_degrade_fraction": 0.1,
                                                      "link_bandwidth_factor": 0.1}})).step
    assert bad.step_time_s > clean.step_time_s


# ----------------------------------------------------------------------------- attribution (#15)

def _attribution(stragglers: dict[str, float], **over: object) -> tuple[float, dict]:
    scn = scenario_from_dict({**BASE, **over, "stragglers": stragglers})
    r = run(scn)
    clean = run(scenario_from_dict({**BASE, **over})).step
    assert r.stragglers is not None
    return clean.step_time_s, {**dataclasses.asdict(r.stragglers.attribution), "step_s": r.step.step_time_s}


def test_one_slow_chip_is_attributed_to_its_stage_replica_and_cause_alone() -> None:
    clean_s, a = _attribution({"slow_fraction": 1 / 64, "slow_factor": 2.0})
    assert a["straggler_free_step_s"] == pytest.approx(clean_s, rel=1e-12)   # the step without them
    assert a["slowdown"] == pytest.approx(a["step_s"] / clean_s, rel=1e-12) and a["slowdown"] > 1.5
    # The one slow chip holds all of the slowdown: its stage, its replica and its cause each
    # reproduce S, and every other stage / replica alone leaves the step straggler-free.
    for d in (a["by_stage"], a["by_replica"]):
        top = max(d, key=d.get)
        assert d[top] == pytest.approx(a["slowdown"], rel=1e-12)
        assert all(v == 1.0 for k, v in d.items() if k != top)
    assert a["by_cause"] == {"slow_chips": pytest.approx(a["slowdown"], rel=1e-12)}


def test_jitter_attributions_are_bounded_by_the_slowdown() -> None:
    _, a = _attribution({"compute_jitter_sigma": 0.1})
    assert a["by_cause"]["jitter"] == pytest.approx(a["slowdown"], rel=1e-12)   # the only cause
    # The slowest replica alone sets the step (the others finish earlier).
    assert max(a["by_replica"].values()) == pytest.approx(a["slowdown"], rel=1e-12)
    assert all(1.0 <= v <= a["slowdown"] + 1e-12 for v in (*a["by_stage"].values(),
                                                            *a["by_replica"].values()))


def test_degraded_links_are_their_own_cause() -> None:
    par = {"tp": 1, "pp": 1, "zero": 3}
    tr = {"seq_len": 2048, "global_batch": 64, "micro_batch": 1}
    _, a = _attribution({"link_degrade_fraction": 0.1, "link_bandwidth_factor": 0.1},
                        parallelism=par, training=tr)
    assert a["slowdown"] > 1
    assert a["by_cause"] == {"degraded_links": pytest.approx(a["slowdown"], rel=1e-12)}
    assert set(a["by_stage"].values()) == {1.0} and set(a["by_replica"].values()) == {1.0}
