"""Pipeline schedules (sim/workload/schedules.py): micro-batch chunks in flight per stage against
the frameworks' own counts, and the memory model's per-stage activation peak."""

from __future__ import annotations

import pytest

from sim.config import scenario_from_dict
from sim.workload.schedules import peak_in_flight, schedule, stage_activation_peak_B


@pytest.mark.parametrize("pp, micro", [(1, 4), (2, 8), (4, 4), (4, 16), (8, 3)])
def test_1f1b_stage_s_holds_pp_minus_s(pp: int, micro: int) -> None:
    # PipeDream-Flush (Narayanan et al. 2021, section 2.2.1): pp - s - 1 warm-up forwards + 1.
    for s in range(pp):
        assert peak_in_flight(schedule("1f1b", s, pp, micro)) == min(pp - s, micro)


@pytest.mark.parametrize("pp, micro", [(2, 4), (4, 8)])
def test_gpipe_holds_every_microbatch(pp: int, micro: int) -> None:
    for s in range(pp):
        assert peak_in_flight(schedule("gpipe", s, pp, micro)) == micro


@pytest.mark.parametrize("pp, micro, vs", [(4, 8, 2), (4, 16, 3), (8, 32, 2), (2, 8, 4), (4, 4, 2)])
def test_interleaved_holds_megatrons_warmup_plus_one(pp: int, micro: int, vs: int) -> None:
    # Megatron-LM forward_backward_pipelining_with_interleaving: num_warmup_microbatches =
    # (pp - rank - 1) * 2 + (vs - 1) * pp (all of them when that reaches micro x vs); the steady
    # 1F1B phase adds one forward before its first backward.
    total = micro * vs
    for s in range(pp):
        warm = (pp - s - 1) * 2 + (vs - 1) * pp
        expected = total if warm >= total else warm + 1
        assert peak_in_flight(schedule("interleaved", s, pp, micro, vs)) == expected


def test_interleaved_peak_is_the_papers_formula_for_the_first_stage() -> None:
    # Narayanan et al. 2021 / Korthikanti et al. 2022 section 4.2.3: the first stage holds
    # pp (1 + (pp - 1) / (pp v)) micro-batches' worth of its layers: (v pp + pp - 1) chunks.
    pp, vs, micro = 8, 4, 64
    chunks = peak_in_flight(schedule("interleaved", 0, pp, micro, vs))
    assert chunks / vs == pytest.approx(pp * (1 + (pp - 1) / (pp * vs)))


@pytest.mark.parametrize("group", [4, 6, 8])
def test_llama3_rounds_of_n_microbatches(group: int) -> None:
    # Llama 3 (Dubey et al. 2024, section 3.3.2): N micro-batches per round; Megatron's warm-up
    # with microbatch_group_size_per_vp_stage = N. Every (micro-batch, chunk) once each way.
    pp, vs, micro = 4, 2, 24
    for s in range(pp):
        steps = schedule("interleaved", s, pp, micro, vs, group)
        for k in "FB":
            assert sorted((m, c) for kk, m, c in steps if kk == k) == sorted(
                (m, c) for m in range(micro) for c in range(vs))
        warm = (pp - s - 1) * 2 + (vs - 1) * group
        assert peak_in_flight(steps) == min(warm + 1, micro * vs)
        assert [c for _k, _m, c in steps[:group]] == [0] * group   # a round stays on chunk 0


def _scn(par: dict, layers: int = 16, batch: int = 16) -> object:
    return scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 32},
                               "model": {"preset": "llama3-8b", "layers": layers},
                               "training": {"seq_len": 2048, "global_batch": batch},
                               "parallelism": {"tp": 8, **par}})


def test_activation_peak_weighs_each_chunk_by_its_layers() -> None:
    # 1F1B, pp 4, 8 micro-batches: stage s holds (4 - s) micro-batches x its layers.
    layers = [3, 5, 5, 3]
    scn = _scn({"pp": 4, "stage_layers": layers}, batch=8)
    peak = stage_activation_peak_B(scn.parallelism, 1.0)                 # type: ignore[attr-defined]
    assert peak == max((4 - s) * n for s, n in enumerate(layers))        # stage 1: 3 x 5 = 15
    # The head's logits count on the last stage only, once per micro-batch in flight there (1).
    assert stage_activation_peak_B(scn.parallelism, 1.0, head_B=100.0) == 3 + 100  # type: ignore[attr-defined]


def test_bounded_walk_reaches_the_full_walks_peak() -> None:
    # stage_peak walks a few rounds only (10^9 micro-batches must not build a schedule); it must
    # find the peak of the whole schedule for any chunk weights.
    import itertools

    from sim.workload.schedules import stage_peak

    for kind, pp, vs, group in [("1f1b", 4, 1, 0), ("1f1b", 8, 1, 0), ("interleaved", 4, 2, 0),
                                ("interleaved", 4, 3, 6), ("interleaved", 8, 4, 0),
                                ("interleaved", 2, 4, 4), ("gpipe", 4, 1, 0)]:
        n = group or pp
        for micro, stage in itertools.product([n, 2 * n, 5 * n, 12 * n], range(pp)):
            for weights in ([1.0] * vs, [0.0] + [1.0] * (vs - 1), [float(c + 1) for c in range(vs)],
                            [float(vs - c) for c in range(vs)]):
                full = peak_in_flight(schedule(kind, stage, pp, micro, vs, group), weights)
                assert stage_peak(kind, stage, pp, micro, vs, weights, group) == full, (
                    kind, pp, vs, group, micro, stage, weights)
