"""``clustersim bench`` without a GPU: a fake timing backend returns the compute model's times at
known constants (with 2% log-normal noise), and the fits of ``sim.compute.tables`` must read the
tables the command writes and recover those constants. The torch backend itself needs a CUDA GPU
and is not run here; without PyTorch the command must end in one line and exit 3."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from sim.bench import runner
from sim.bench.cases import (
    COLLECTIVE_COLUMNS,
    MAX_DEFAULT_S,
    MAX_QUICK_S,
    TABLES,
    case_set,
    collective_sizes,
    estimate_s,
    nearest_chip,
)
from sim.bench.runner import CaseSkipped
from sim.bench.specs import ATTENTION_BACKENDS, Attention, Gemm, GroupedGemm, Kernel, Memory, Optimizer
from sim.cli import main
from sim.compute.kernels import (
    AttentionParams,
    GemmParams,
    GroupedGemmParams,
    attention_time_s,
    gemm_time_s,
    grouped_gemm_time_s,
    memory_time_s,
)
from sim.compute.tables import (
    fit_attention,
    fit_gemm,
    fit_memory_fractions,
    fit_optimizer_fractions,
    load_cases,
)
from sim.errors import ConfigError, InfeasibleError
from sim.hardware import CATALOGUE

H100 = CATALOGUE["H100-SXM"]
H100_TABLES = Path(__file__).resolve().parent.parent / "validation" / "compute" / "h100-sxm-80gb"
# The fake GPU's constants: deliberately not sim.calibration's, so a fit that returned the
# committed values instead of reading the tables would fail.
GEMM = {"bf16": GemmParams(efficiency=0.62, tile_s=4.0e-6, k0=0, call_s=18e-6),
        "fp8": GemmParams(efficiency=0.55, tile_s=1.0e-6, k0=300, call_s=25e-6)}
ATTN = {("cudnn", "fwd"): AttentionParams(0.60, 1.10, 0.80, 1.50),
        ("cudnn", "bwd"): AttentionParams(0.50, 0.80, 0.20, 3.00),
        ("flash-attention-2", "fwd"): AttentionParams(0.40, 0.95, 0.90, 1.40),
        ("flash-attention-2", "bwd"): AttentionParams(0.30, 0.85, 0.40, 4.50)}
MEMORY = {"copy": 0.85, "rmsnorm_fwd": 0.50, "rmsnorm_bwd": 0.30, "swiglu_fwd": 0.33, "residual_add": 0.80}
OPTIMIZER = {"adamw_fused": 0.70, "adamw_foreach": 0.30}
NOISE = 0.02


class FakeGPU:
    """A ``TimingBackend`` whose kernels take the compute model's time at the constants above."""

    def __init__(self, free_GiB: float = 79.0, gpus: int = 1, no_fp8: bool = False,
                 stop_after: int | None = None, name: str = "NVIDIA H100 80GB HBM3") -> None:
        self.rng = np.random.default_rng(0)
        self.free_GiB, self.gpus, self.no_fp8, self.stop_after, self.name = free_GiB, gpus, no_fp8, stop_after, name
        self.timed = 0

    def describe(self) -> dict[str, object]:
        return {"gpu": self.name, "sms": 132, "mem_GiB": 79.18, "torch": "fake", "cuda": "fake"}

    def gpu_count(self) -> int:
        return self.gpus

    def unsupported(self, kernel: Kernel) -> str | None:
        return "no FP8 here" if self.no_fp8 and isinstance(kernel, Gemm) and kernel.dtype == "fp8" else None

    def free_bytes(self) -> float:
        return self.free_GiB * 2**30

    def time_s(self, kernel: Kernel, warmup: int, reps: int) -> float:
        assert (warmup, reps) == (3, 5 if isinstance(kernel, Attention) and kernel.backward else 10)
        if self.stop_after is not None and self.timed == self.stop_after:
            raise KeyboardInterrupt             # the run is killed here
        self.timed += 1
        return _true_s(kernel) * float(np.exp(self.rng.normal(0.0, NOISE)))

    def collective_s(self, op: str, sizes: Sequence[int], gpus: int) -> Iterator[tuple[int, int, float]]:
        for s in sizes:
            yield s, s // 4, 10e-6 + s / 300e9
        raise CaseSkipped("the NCCL processes stopped answering")   # the sweep is cut short


def _true_s(k: Kernel) -> float:
    c = H100
    assert c.sms is not None
    if isinstance(k, Gemm):
        return gemm_time_s(k.m, k.n, k.k, 2.0 if k.dtype == "bf16" else 1.0, c.peak_flops(k.dtype), c.sms,
                           c.hbm_Bps, GEMM[k.dtype], isolated=True)
    if isinstance(k, GroupedGemm):
        return grouped_gemm_time_s(k.tokens_per_expert, k.n, k.k, 2.0, c.bf16_flops, c.sms, c.hbm_Bps,
                                   GEMM["bf16"], k.experts, GroupedGemmParams(1e-6, None, None), isolated=True)
    if isinstance(k, Attention):
        fam = ATTENTION_BACKENDS[k.backend]
        t = attention_time_s(k.shape, False, ATTN[fam, "fwd"], c.bf16_flops, c.sms, c.hbm_Bps)
        return t + (attention_time_s(k.shape, True, ATTN[fam, "bwd"], c.bf16_flops, c.sms, c.hbm_Bps)
                    if k.backward else 0.0)
    if isinstance(k, Optimizer):
        return memory_time_s(28.0 * k.params, c.hbm_Bps, OPTIMIZER[k.impl])
    assert isinstance(k, Memory)
    n = k.rows * k.cols
    if k.op == "rmsnorm_fwd+bwd":
        return (memory_time_s(4.0 * n, c.hbm_Bps, MEMORY["rmsnorm_fwd"])
                + memory_time_s(6.0 * n, c.hbm_Bps, MEMORY["rmsnorm_bwd"]))
    per = {"copy": 4.0, "rmsnorm_fwd": 4.0, "swiglu_fwd": 3.0, "residual_add": 6.0}[k.op]
    return memory_time_s(per * n, c.hbm_Bps, MEMORY[k.op])


def _bench(tmp_path: Path, gpu: FakeGPU, quick: bool = False, yes: bool = False,
           only: str | None = None) -> tuple[int, list[str], Path]:
    lines: list[str] = []
    out = tmp_path / "out"
    rc = runner.bench(str(out), quick, yes, only, lambda: gpu, lines.append)
    return rc, lines, out


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[str], Path]:
    return _bench(tmp_path_factory.mktemp("bench"), FakeGPU())


def test_default_set_writes_every_table_with_the_h100_columns(default_run: tuple[int, list[str], Path]) -> None:
    rc, lines, out = default_run
    assert rc == 0
    written = Counter(c.table for c in case_set(False))
    for table, n in written.items():
        with (out / table).open() as f:
            assert f.readline().strip() == ",".join(TABLES[table])
        assert len(_rows(out / table)) == n, table
    env = json.loads((out / "env.json").read_text())
    assert env["gpu"] == "NVIDIA H100 80GB HBM3" and env["set"] == "default" and env["date"]
    assert any("minutes" in line for line in lines)


@pytest.mark.parametrize("table", sorted(TABLES))
def test_columns_and_default_shapes_are_the_committed_h100_tables(
        default_run: tuple[int, list[str], Path], table: str) -> None:
    """The default set re-measures the committed H100 tables row for row (their shapes, our
    columns); the grouped GEMM table's Python-loop rows are not measured."""
    ours, theirs = _rows(default_run[2] / table), _rows(H100_TABLES / table)
    assert tuple(theirs[0]) == TABLES[table]
    theirs = [r for r in theirs if r.get("impl", "grouped_mm") == "grouped_mm"]
    key = [c for c in TABLES[table] if c not in ("time_us", "tflops", "GBps", "time_ms")]
    assert sorted(tuple(r[c] for c in key) for r in ours) == sorted(tuple(r[c] for c in key) for r in theirs)


def test_fits_recover_the_fake_gpus_constants(default_run: tuple[int, list[str], Path]) -> None:
    cases = load_cases(default_run[2])
    assert len(cases) == len(case_set(False))
    sms = H100.sms
    assert sms is not None
    for dtype, tol in (("bf16", 0.02), ("fp8", 0.04)):
        p = fit_gemm(cases, dtype, H100.peak_flops(dtype), sms, H100.hbm_Bps)
        assert p.efficiency == pytest.approx(GEMM[dtype].efficiency, abs=tol), dtype
        assert p.call_s == pytest.approx(GEMM[dtype].call_s, abs=4e-6), dtype
    for (family, passname), truth in ATTN.items():
        p = fit_attention(cases, family, passname, H100.bf16_flops, sms, H100.hbm_Bps)
        assert p.efficiency == pytest.approx(truth.efficiency, rel=0.08), (family, passname)
    assert fit_memory_fractions(cases, H100.hbm_Bps) == pytest.approx(MEMORY, rel=0.05)
    assert fit_optimizer_fractions(cases, H100.hbm_Bps) == pytest.approx(OPTIMIZER, rel=0.05)


def test_quick_set_fits_too(tmp_path: Path) -> None:
    rc, _, out = _bench(tmp_path, FakeGPU(), quick=True)
    assert rc == 0
    cases = load_cases(out)
    sms = H100.sms
    assert sms is not None
    p = fit_gemm(cases, "bf16", H100.bf16_flops, sms, H100.hbm_Bps)
    assert p.efficiency == pytest.approx(GEMM["bf16"].efficiency, abs=0.03)
    p_attn = fit_attention(cases, "cudnn", "fwd", H100.bf16_flops, sms, H100.hbm_Bps)
    assert p_attn.efficiency == pytest.approx(ATTN["cudnn", "fwd"].efficiency, rel=0.15)
    assert set(fit_memory_fractions(cases, H100.hbm_Bps)) == set(MEMORY)


def test_estimates_fit_the_limits_on_an_h100() -> None:
    quick, default = estimate_s(case_set(True), H100), estimate_s(case_set(False), H100)
    assert 20 < quick < MAX_QUICK_S
    assert quick < default < MAX_DEFAULT_S
    # a slower chip's estimate is longer: the estimate follows the model, not a constant
    assert estimate_s(case_set(False), CATALOGUE["A100-SXM-80GB"]) > default
    # the NCCL sweep over 8 GPUs adds its own time
    assert estimate_s(case_set(True), H100, 8, collective_sizes(True), ("allreduce",)) > quick


def test_nearest_chip() -> None:
    assert nearest_chip("NVIDIA H100 80GB HBM3") == (H100, True)
    assert nearest_chip("NVIDIA H200")[0].name == "H200"
    assert nearest_chip("NVIDIA A100-SXM4-40GB", 40 * 2**30)[0].name == "A100-SXM-40GB"
    assert nearest_chip("NVIDIA GeForce RTX 4090") == (H100, False)


def test_over_the_limit_is_refused_without_yes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "MAX_DEFAULT_S", 30.0)
    with pytest.raises(ConfigError, match="--yes"):
        _bench(tmp_path, FakeGPU(), quick=True)
    assert not (tmp_path / "out").exists()
    rc, _, out = _bench(tmp_path, FakeGPU(), quick=True, yes=True)
    assert rc == 0 and (out / "gemm_square.csv").exists()


def test_a_killed_run_keeps_the_rows_it_timed(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        _bench(tmp_path, FakeGPU(stop_after=30), quick=True)
    out = tmp_path / "out"
    rows = sum(len(_rows(p)) for p in out.glob("*.csv"))
    assert rows == 30
    assert len(load_cases(out)) == 30


def test_cases_that_do_not_fit_are_skipped_with_a_warning(tmp_path: Path) -> None:
    rc, lines, out = _bench(tmp_path, FakeGPU(free_GiB=1.0), only="gemm,memory,optimizer")
    assert rc == 0
    assert any("GiB free" in line for line in lines)
    assert not (out / "optimizer.csv").exists()              # 500 M parameters need ~10 GiB
    squares = [int(r["m"]) for r in _rows(out / "gemm_square.csv")]
    assert 256 in squares and 16384 not in squares           # 3 x 512 MiB of bf16 operands
    assert "copy" not in {r["op"] for r in _rows(out / "memory_bound.csv")}   # 2 x 2 GiB
    with pytest.raises(InfeasibleError, match="no case fits"):
        _bench(tmp_path, FakeGPU(free_GiB=0.01))


def test_no_fp8_gpu_skips_the_fp8_cases(tmp_path: Path) -> None:
    rc, lines, out = _bench(tmp_path, FakeGPU(no_fp8=True), quick=True, only="gemm,fp8")
    assert rc == 0
    assert not (out / "gemm_layers_fp8.csv").exists()
    assert {r["dtype"] for r in _rows(out / "gemm_square.csv")} == {"bf16"}
    assert any("no FP8 here" in line for line in lines)


def test_nccl_sweep_only_with_several_gpus(tmp_path: Path) -> None:
    rc, lines, out = _bench(tmp_path, FakeGPU(gpus=4), quick=True, only="nccl")
    assert rc == 0
    path = out / "nccl_allreduce_4xH100-SXM_bench.csv"
    with path.open() as f:
        assert f.readline().strip() == ",".join(COLLECTIVE_COLUMNS)
    rows = _rows(path)
    assert [int(r["size_bytes"]) for r in rows] == list(collective_sizes(True))
    for r in rows:
        algbw = float(r["algbw_GBps"])
        assert algbw == pytest.approx(int(r["size_bytes"]) / float(r["time_us"]) / 1e3, rel=1e-3)
        assert float(r["busbw_GBps"]) == pytest.approx(algbw * 2 * 3 / 4, abs=0.02)
    ag = _rows(out / "nccl_allgather_4xH100-SXM_bench.csv")
    assert float(ag[-1]["busbw_GBps"]) == pytest.approx(float(ag[-1]["algbw_GBps"]) * 3 / 4, abs=0.02)
    assert any("stopped" in line for line in lines)
    with pytest.raises(InfeasibleError, match="none of the cases"):
        _bench(tmp_path, FakeGPU(gpus=1), quick=True, only="nccl")


@pytest.mark.parametrize("only", ["", "gemm,bogus", ","])
def test_bad_only_is_an_input_error(tmp_path: Path, only: str) -> None:
    with pytest.raises(ConfigError, match="--only"):
        _bench(tmp_path, FakeGPU(), only=only)


def test_without_torch_the_command_exits_3_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)         # `import torch` raises ImportError
    out = tmp_path / "new" / "tables"
    assert main(["bench", "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'clustersim[bench]'" in err
    assert not out.exists()                                # nothing created for a run that cannot start


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="PyTorch is installed here")
def test_without_torch_as_a_process(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "sim", "bench", "--out", str(tmp_path / "o"), "--quick"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "clustersim bench needs PyTorch" in r.stderr


def test_bad_out_and_flags_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    a_file = tmp_path / "file.csv"
    a_file.write_text("x\n")
    for argv in (["--out", str(a_file)], ["--out", str(a_file / "sub")], ["--out", ""],
                 ["--out", str(tmp_path), "--only", "gpus"], ["--out", str(tmp_path), "--device", "-1"],
                 ["--quick"]):
        assert main(["bench", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1, (argv, err)
