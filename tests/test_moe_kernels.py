"""MoE kernels against the H100 tables they are fitted on (validation/compute/h100-sxm-80gb/).

The routing kernels (router softmax + top-k, permute, unpermute and the gather of the unpermute's
backward) as eager PyTorch runs them, ``moe_routing.csv``, and the grouped expert GEMMs,
``moe_grouped_gemm.csv`` and ``moe_grouped_small.csv`` (the H200's rows of the latter are a test of
a chip the fit never saw): their constants are re-derived by the fits of ``sim.compute.moe_tables``,
each class's time is re-predicted through ``ComputeModel`` (as a step charges it, plus what timing
one call adds) within a stated error budget, and times grow with bytes and tokens.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from sim import calibration as cal
from sim.compute import kernels, moe_tables
from sim.compute.model import ComputeModel, gemm_params_of, memory_class
from sim.hardware import CATALOGUE
from sim.software import FRAMEWORKS, resolve_software
from sim.workload.transformer import Op

H100 = Path(__file__).resolve().parent.parent / "validation" / "compute" / "h100-sxm-80gb"
CALL_S = cal.GEMM_HOPPER["bf16"].call_s            # what the CUDA-event harness adds to one call

# Per workload op class: the table op it is checked on, and the error budget (median, worst |error|
# over the undisturbed rows). The eager top-k's time follows the T x E scores, not its bytes, so
# a bytes model misses it by up to a fifth; the permute's worst row (16384 x 7168 x 256 x 2) ran
# 55% slower than its own sort + gather rows add up to.
BUDGETS = {"moe-topk": ("softmax_topk", 0.10, 0.25), "moe-permute": ("permute", 0.05, 0.35),
           "moe-unpermute": ("unpermute", 0.03, 0.06), "moe-unpermute-bwd": ("permute_gather", 0.05, 0.16)}
MEASURED = {"moe-topk": "moe_topk", "moe-permute": "moe_permute", "moe-unpermute": "moe_unpermute",
            "moe-unpermute-bwd": "moe_gather"}


@pytest.fixture(scope="module")
def chip():
    return CATALOGUE["H100-SXM"]


@pytest.fixture(scope="module")
def eager(chip) -> ComputeModel:
    return ComputeModel(chip, "bf16", resolve_software("pytorch-eager", None, chip))


@pytest.fixture(scope="module")
def routing() -> list[moe_tables.RoutingCase]:
    return moe_tables.routing_cases(H100)


def _errors(pairs: list[tuple[float, float]]) -> list[float]:
    return [predicted / measured - 1.0 for predicted, measured in pairs]


def test_moe_memory_constants_are_the_h100_fit(chip, routing) -> None:
    fitted = moe_tables.fit_moe_memory(routing, chip.hbm_Bps, CALL_S)
    assert set(fitted) == set(cal.MOE_MEMORY_HOPPER)
    for name, p in fitted.items():
        committed = cal.MOE_MEMORY_HOPPER[name]
        assert p.fraction == pytest.approx(committed.fraction, abs=2e-4), name
        assert p.fixed_s == pytest.approx(committed.fixed_s, abs=0.2e-6), name


def test_two_disturbed_cases_are_skipped(routing) -> None:
    disturbed = {(c.tokens, c.hidden, c.experts, c.top_k) for c in routing if c.disturbed}
    assert disturbed == {(8192, 7168, 256, 2), (16384, 7168, 128, 8)}


@pytest.mark.parametrize("op_class", list(BUDGETS))
def test_routing_class_within_budget(eager, routing, op_class) -> None:
    table_op, median_budget, worst_budget = BUDGETS[op_class]
    measured = MEASURED[op_class]
    assert memory_class(op_class, "eager") == measured
    rows = [c for c in routing if c.op == table_op and not c.disturbed]
    assert len(rows) == 30
    errors = _errors([(CALL_S + eager.memory_s(moe_tables.routing_bytes(measured, c), op_class),
                       c.time_s) for c in rows])
    abs_errors = [abs(e) for e in errors]
    assert statistics.median(abs_errors) <= median_budget, (op_class, statistics.median(abs_errors))
    assert max(abs_errors) <= worst_budget, (op_class, max(abs_errors))


def test_grouped_constants_are_the_h100_fit(chip) -> None:
    fitted = moe_tables.fit_grouped(moe_tables.grouped_cases(H100), chip.bf16_flops, chip.sms, chip.hbm_Bps,
                                    gemm_params_of(chip)["bf16"])
    want = cal.GROUPED_GEMM_HOPPER
    assert fitted.group_s == pytest.approx(want.group_s, abs=0.01e-6)
    assert fitted.tile_s == pytest.approx(want.tile_s, abs=0.01e-6)
    assert fitted.stream_Bps_per_sm == pytest.approx(want.stream_Bps_per_sm, abs=0.1e9)


def _grouped_errors(model: ComputeModel, grouped: bool, folder: Path = H100,
                    table: str = "moe_grouped_gemm.csv") -> dict[int, list[float]]:
    """Error per tokens per expert of a table's grouped_mm rows, as the model runs an expert GEMM."""
    by: dict[int, list[float]] = {}
    for c in moe_tables.grouped_cases(folder):
        if c.table == table:
            predicted = CALL_S + model.gemm_s(c.m, c.n, c.k, batch=c.batch, grouped=grouped)
            by.setdefault(int(c.label.rsplit("x", 1)[1]), []).append(predicted / c.time_s - 1.0)
    return by


def test_grouped_gemm_within_budget(eager) -> None:
    """Grouped model over the 36 grouped_mm rows of moe_grouped_gemm.csv (256-4,096 tokens per
    expert): median |error| 3.8%, worst 21.8% (16.8% when fitted on these rows alone); at 256
    tokens per expert median within 3% (the batched cuBLAS model: -9.8%, worst 42%)."""
    grouped = _grouped_errors(eager, grouped=True)
    everything = [abs(e) for errors in grouped.values() for e in errors]
    assert len(everything) == 36
    assert statistics.median(everything) <= 0.05
    assert max(everything) <= 0.23
    assert abs(statistics.median(grouped[256])) <= 0.03
    batched = _grouped_errors(eager, grouped=False)
    assert max(abs(e) for e in grouped[256]) < max(abs(e) for e in batched[256])


@pytest.mark.parametrize(("gpu", "median_budget", "fast_budget"), [("h100-sxm-80gb", 0.07, -0.05),
                                                                    ("h200-sxm-141gb", 0.10, -0.05)])
def test_grouped_gemm_at_few_tokens_per_expert(gpu, median_budget, fast_budget) -> None:
    """moe_grouped_small.csv, the balanced single-kernel rows (8-1,024 tokens per expert; forward,
    dgrad and wgrad). H100 (fitted): median |error| 5.2%; H200 (never fitted): 8.1%, and at <= 128
    tokens per expert its median error is +5%, where the HBM roofline alone ran it 18% fast: the
    weights stream no faster on the H200's faster memory. At the time of writing."""
    chip = CATALOGUE["H100-SXM" if gpu.startswith("h100") else "H200"]
    model = ComputeModel(chip, "bf16", resolve_software("pytorch-eager", None, chip))
    by = _grouped_errors(model, True, H100.parent / gpu, "moe_grouped_small.csv")
    everything = [e for errors in by.values() for e in errors]
    assert len(everything) >= 380
    assert statistics.median(abs(e) for e in everything) <= median_budget
    few = [e for tpe, errors in by.items() if tpe <= 128 for e in errors]
    assert statistics.median(few) >= fast_budget


def test_grouped_gemm_grows_with_tokens_and_experts(eager) -> None:
    for n, k in ((1536, 2048), (4096, 7168), (7168, 2048), (28672, 4096)):
        times = [eager.gemm_s(m, n, k, batch=8, grouped=True) for m in (1, 16, 64, 128, 129, 256, 1024, 4096)]
        assert times == sorted(times), (n, k)
        by_experts = [eager.gemm_s(256, n, k, batch=e, grouped=True) for e in (2, 4, 8, 16, 32, 128)]
        assert by_experts == sorted(by_experts), (n, k)


def test_grouped_pads_each_expert_to_the_tile(eager, chip) -> None:
    """Where the tiles' work bounds the kernel, 1,000 tokens per expert cost as 1,024 (eight 128-row
    tiles each); a few tokens per expert cost at least every expert's weights read once, at the
    grouped kernel's streaming rate (below the HBM's on an H100)."""
    assert eager.gemm_s(1000, 4096, 2048, batch=16, grouped=True) == eager.gemm_s(1024, 4096, 2048, batch=16,
                                                                                  grouped=True)
    streaming = 16 * 2.0 * 4096 * 2048 / (chip.sms * cal.GROUPED_GEMM_HOPPER.stream_Bps_per_sm)
    assert eager.gemm_s(1, 4096, 2048, batch=16, grouped=True) > streaming > 16 * 2.0 * 4096 * 2048 / chip.hbm_Bps


def test_batched_and_single_gemms_are_unchanged(eager, chip) -> None:
    """Only a grouped expert GEMM takes the grouped kernel: a batch-1 GEMM and a batched cuBLAS call
    (unfused attention's score GEMMs) keep the tile/wave model with cuBLAS's tile pick."""
    p = gemm_params_of(chip)["bf16"]
    for m, n, k, batch in ((8192, 4096, 4096, 1), (4096, 4096, 128, 32), (256, 1536, 2048, 1)):
        assert eager.gemm_s(m, n, k, batch=batch) == kernels.gemm_time_s(
            m, n, k, 2.0, chip.bf16_flops, chip.sms, chip.hbm_Bps, p, batch)
    assert eager.gemm_s(256, 4096, 7168, batch=1, grouped=True) == eager.gemm_s(256, 4096, 7168)
    dense = Op("mlp-up", "gemm", 0.0, 0.0, (8192, 28672, 4096), "linear")
    assert eager.op_time_s(dense) == pytest.approx(eager.gemm_s(8192, 28672, 4096) / eager.stack_efficiency)


@pytest.mark.parametrize("profile", sorted(FRAMEWORKS))
@pytest.mark.parametrize("op_class", ["moe-topk", "moe-permute", "moe-unpermute", "moe-topk-bwd",
                                      "moe-permute-bwd", "moe-unpermute-bwd"])
def test_routing_times_grow_with_bytes(chip, profile, op_class) -> None:
    model = ComputeModel(chip, "bf16", resolve_software(profile, None, chip))
    times = [model.memory_s(b, op_class) for b in (0, 1e3, 1e6, 1e8, 1e9, 4e9)]
    assert times[0] == 0.0
    assert all(a < b for a, b in zip(times, times[1:], strict=False)), times


def test_fused_stacks_run_routing_as_a_copy(chip) -> None:
    """Transformer Engine's fused permutation (and Inductor, XLA): a copy's rate, no fixed time."""
    te = ComputeModel(chip, "bf16", resolve_software("megatron-te", None, chip))
    for op_class in MEASURED:
        assert memory_class(op_class, "fused") == "copy"
        assert te.memory_s(1e9, op_class) == pytest.approx(1e9 / (cal.MEMORY_FRACTION["copy"] * chip.hbm_Bps))


def test_routing_bytes_count_the_workload_way() -> None:
    assert kernels.moe_topk_bytes(8192, 64, 8) == 2 * 8192 * 64 + 12 * 8192 * 8
    assert kernels.moe_permute_bytes(8192 * 8, 4096) == 2 * (8192 * 8) * 4096 * 2


def test_expected_row_tiles_of_a_routed_group() -> None:
    """A group of exactly 256 rows fills two 128-row tiles; a router's draw around 256 (sd ~16)
    lands past 256 about half the time and takes a third tile; far from a tile edge the draws cost
    what their mean does."""
    assert kernels.row_tiles_expected(256, 1, 128) == 2.0                  # one group: no spread
    around_edge = kernels.row_tiles_expected(256, 128, 128)
    assert 2.4 < around_edge < 2.6
    assert kernels.row_tiles_expected(192, 128, 128) == pytest.approx(2.0, abs=1e-3)
    tiles = [kernels.row_tiles_expected(m, 64, 128) for m in range(16, 2048, 37)]
    assert tiles == sorted(tiles)


@pytest.mark.parametrize(("gpu", "median_budget"), [("h100-sxm-80gb", 0.06), ("h200-sxm-141gb", 0.10)])
def test_randomly_routed_groups_cost_their_extra_tiles(gpu, median_budget) -> None:
    """moe_grouped_small.csv's ``multinomial`` rows (each routed row to a uniformly drawn expert):
    run as uneven groups around the mean tokens per expert, the model's median |error| is 5.1%
    (H100) and 8.7% (H200), and at 128+ tokens per expert its median error -3.1% / -0.8%, where
    the same mean as equal groups ran -11.2% / -9.7%. At the time of writing."""
    import csv

    chip = CATALOGUE["H100-SXM" if gpu.startswith("h100") else "H200"]
    model = ComputeModel(chip, "bf16", resolve_software("pytorch-eager", None, chip))
    errors: dict[bool, list[float]] = {False: [], True: []}
    big: dict[bool, list[float]] = {False: [], True: []}
    with open(H100.parent / gpu / "moe_grouped_small.csv") as f:
        for r in csv.DictReader(f):
            if r["impl"] != "grouped_mm" or r["routing"] != "multinomial" or r["pass"] == "wgrad":
                continue
            e, per, n, k = (int(r[c]) for c in ("experts_local", "tokens_per_expert", "n", "k"))
            for uneven in (False, True):
                err = (CALL_S + model.gemm_s(per, n, k, batch=e, grouped=True, uneven=uneven)) / (
                    float(r["time_us"]) * 1e-6) - 1.0
                errors[uneven].append(err)
                if per >= 128:
                    big[uneven].append(err)
    assert len(errors[True]) >= 250
    assert statistics.median(abs(e) for e in errors[True]) <= median_budget
    assert abs(statistics.median(big[True])) < abs(statistics.median(big[False]))
    assert statistics.median(abs(e) for e in errors[True]) < statistics.median(abs(e) for e in errors[False])


def test_transformer_engine_issues_one_gemm_per_expert(chip) -> None:
    """Megatron-TE's GroupedLinear launches a GEMM per local expert (and, in FP8 with per-tensor
    scaling, each split's amax and cast): the host's issue time bounds a stretch of few-token
    expert GEMMs that one grouped kernel (PyTorch's _grouped_mm) would not."""
    te = resolve_software("megatron-te", None, chip)
    eager = resolve_software("pytorch-eager", None, chip)
    up = Op("expert-up", "gemm", 0.0, 0.0, (16, 1536, 2048), "linear", batch=64, uneven=True)
    bf16_te, fp8_te = ComputeModel(chip, "bf16", te), ComputeModel(chip, "fp8", te)
    assert bf16_te.kernels(up) == 64
    assert fp8_te.kernels(up) == 64 * 3
    assert ComputeModel(chip, "bf16", eager).kernels(up) == 1
    assert bf16_te.stream_time_s([up]) == pytest.approx(64 * te.host_kernel_s)
    assert bf16_te.op_time_s(up) < 64 * te.host_kernel_s


def test_sm_bound_routing_classes_keep_the_h100_rate_per_sm_on_another_gpu() -> None:
    """Softmax + top-k and the atomic unpermute took the H100's time on the H200 (1.43x its HBM,
    the same SMs: moe_routing.csv of h200-sxm-141gb): the model runs them at the H100's rate per
    SM there, and the gather, which did speed up, at its fraction of the H200's HBM."""
    h100, h200, b200 = CATALOGUE["H100-SXM"], CATALOGUE["H200"], CATALOGUE["B200"]
    nbytes = 4e8
    for measured in cal.MOE_MEMORY_HOPPER:
        p100 = cal.moe_memory_params(measured, h100)
        assert p100 == cal.MOE_MEMORY_HOPPER[measured]
        t100 = kernels.fixed_memory_time_s(nbytes, h100.hbm_Bps, p100)
        t200 = kernels.fixed_memory_time_s(nbytes, h200.hbm_Bps, cal.moe_memory_params(measured, h200))
        if measured in cal.MOE_MEMORY_SM_BOUND:
            assert t200 == pytest.approx(t100, rel=1e-9)
            tb = kernels.fixed_memory_time_s(nbytes, b200.hbm_Bps, cal.moe_memory_params(measured, b200))
            rate = (nbytes / (t100 - p100.fixed_s)) * b200.sms / h100.sms
            assert tb == pytest.approx(p100.fixed_s + nbytes / rate, rel=1e-9)
        else:
            assert t200 - p100.fixed_s == pytest.approx((t100 - p100.fixed_s) * h100.hbm_Bps / h200.hbm_Bps)
    assert cal.moe_memory_params("copy", h200) is None
