"""The case lists of ``clustersim bench`` (the default set and ``--quick``), the tables they are
written to, and the time estimate of a set.

The default set is the shapes of ``validation/compute/h100-sxm-80gb/`` (every table the compute
model is fitted on, row for row); ``--quick`` is a subset that still gives each fit of
``sim.compute.tables`` enough rows. Each case is one row of one table (``TABLES``: the file names
and columns of ``validation/compute/README.md``, so that ``sim.compute.tables.load_cases`` reads
the output folder).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..collectives.nccl import busbw_factor
from ..compute.kernels import AttentionShape
from ..hardware import CATALOGUE, Chip, chip_of_device_name
from ..models import PRESETS
from .specs import (
    REPS,
    WARMUP,
    Attention,
    Gemm,
    GroupedGemm,
    Kernel,
    Memory,
    Optimizer,
    need_bytes,
    predict_s,
    reps,
)

__all__ = ["TABLES", "COLLECTIVE_COLUMNS", "GROUPS", "Case", "case_set", "collective_sizes",
           "collective_table", "nearest_chip", "estimate_s", "MAX_DEFAULT_S", "MAX_QUICK_S"]

TABLES: dict[str, tuple[str, ...]] = {
    "gemm_layers_bf16.csv": ("model", "tp", "tokens", "linear", "pass", "m", "n", "k", "time_us", "tflops"),
    "gemm_layers_fp8.csv": ("model", "tp", "tokens", "linear", "m", "n", "k", "time_us", "tflops"),
    "gemm_square.csv": ("dtype", "m", "n", "k", "time_us", "tflops"),
    "attention.csv": ("backend", "batch", "seq", "heads", "kv_heads", "head_dim", "causal", "pass",
                      "time_us", "tflops"),
    "memory_bound.csv": ("op", "shape", "bytes_moved", "time_us", "GBps"),
    "optimizer.csv": ("optimizer", "params", "time_ms", "bytes_per_param_moved", "GBps"),
    "moe_grouped_gemm.csv": ("model", "experts_local", "tokens_per_expert", "linear", "impl", "m_total",
                             "n", "k", "time_us", "tflops"),
}
# nccl-tests' columns, as validation/collectives/*.csv hold them.
COLLECTIVE_COLUMNS = ("size_bytes", "count", "dtype", "time_us", "algbw_GBps", "busbw_GBps")
# What --only selects: each case's group (fp8 GEMMs are their own: not every GPU runs them).
GROUPS = ("gemm", "fp8", "attention", "memory", "optimizer", "moe", "nccl")
# The longest run started without --yes, and what the default and quick sets must stay under
# (estimated on an H100; tests/test_bench_command.py checks both).
MAX_DEFAULT_S = 15 * 60.0
MAX_QUICK_S = 3 * 60.0

# Estimate terms the compute model does not know (assumed, not measured): importing PyTorch and
# starting CUDA, cuBLAS and cuDNN; building and filling one case's inputs (host work, a cuDNN
# graph per attention shape) besides filling its bytes at FILL_BPS; the host's share of each
# timed call (event record + synchronize); spawning the NCCL processes and their communicator.
STARTUP_S = 20.0
SETUP_S = {Gemm: 0.03, GroupedGemm: 0.05, Attention: 0.4, Memory: 0.03, Optimizer: 1.0}
FILL_BPS = 100e9
CALL_HOST_S = 50e-6
NCCL_SPAWN_S = 30.0


@dataclass(frozen=True, slots=True)
class Case:
    """One row to measure: its *table* (a ``TABLES`` key), ``--only`` *group*, the leading
    columns that name it (*labels*), and the *kernel* timed."""

    table: str
    group: str
    labels: tuple[tuple[str, str | int], ...]
    kernel: Kernel


# Nemotron-4 15B (arXiv 2402.16819, table 1: hidden 6144, 48 heads, 8 KV heads, FFN 24576, squared
# ReLU) is not a preset of sim.models: its shapes are stated here.
_NEMOTRON4 = (6144, 48, 8, 128, 24576, False)
# model, tensor-parallel widths of the H100 table (gemm_layers_bf16.csv)
_LAYER_MODELS = (("llama3-8b", (1, 2, 4)), ("nemotron4-15b", (1, 2, 4)), ("llama3-70b", (4, 8)),
                 ("gpt3-175b", (4, 8)), ("llama3-405b", (8,)))
_TOKENS = (2048, 4096, 8192, 16384)
_SQUARE = (256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
# attention.csv: (batch, seq) at 16,384 tokens and one longer sequence; (heads, kv_heads, head_dim)
# of Llama 3 8B, a 1-KV-head GQA, Llama 3 70B, an MHA and a head_dim-256 GQA.
_ATTN_SEQ = ((8, 2048), (4, 4096), (2, 8192), (1, 16384), (1, 32768))
_ATTN_HEADS = ((32, 8, 128), (8, 1, 128), (64, 8, 128), (12, 12, 128), (16, 8, 256))
_MEMORY = (("rmsnorm_fwd", ((8192, 4096), (16384, 8192), (8192, 16384))),
           ("rmsnorm_fwd+bwd", ((8192, 4096), (16384, 8192), (8192, 16384))),
           ("swiglu_fwd", ((8192, 8192), (16384, 16384), (8192, 32768))),
           ("residual_add", ((8192, 4096), (16384, 8192), (8192, 16384))))
_COPY_ELEMS = 2**30                 # 2 GiB of bf16
_ADAM_PARAMS = 500_000_000
# moe_grouped_gemm.csv: (row name, preset, expert-parallel width)
_MOE = (("mixtral-8x7b", "mixtral-8x7b", 1), ("mixtral-8x7b-ep4", "mixtral-8x7b", 4),
        ("deepseek-v3-ep8", "deepseek-v3", 8), ("deepseek-v3-ep32", "deepseek-v3", 32),
        ("qwen3-235b-ep8", "qwen3-235b-a22b", 8), ("llama4-maverick-ep8", "llama4-maverick", 8))
_MOE_TOKENS = (256, 1024, 4096)


def _dims(model: str) -> tuple[int, int, int, int, int, bool]:
    """(hidden, heads, kv_heads, head_dim, ffn, gated MLP) of a layer model."""
    if model == "nemotron4-15b":
        return _NEMOTRON4
    m = PRESETS[model]
    return m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.mlp == "swiglu"


def _linears(model: str, tp: int) -> tuple[tuple[str, int, int], ...]:
    """(linear, in, out) per rank: qkv and fc1 column-parallel (out / tp), proj and fc2 row-parallel
    (in / tp); fc1 fuses gate and up for a gated MLP."""
    hidden, heads, kv, d, ffn, gated = _dims(model)
    return (("qkv", hidden, (heads + 2 * kv) * d // tp), ("proj", heads * d // tp, hidden),
            ("fc1", hidden, (2 if gated else 1) * ffn // tp), ("fc2", ffn // tp, hidden))


def _layer_cases(models: Iterable[tuple[str, Sequence[int]]], tokens: Sequence[int]) -> list[Case]:
    """Every linear of each model at each tp and token count: bf16 in the three passes (fwd
    C[T, out] = x W^T; dgrad C[T, in] = dy W; wgrad C[out, in] = dy^T x), and fp8 forward."""
    bf16: list[Case] = []
    fp8: list[Case] = []
    for model, tps in models:
        for tp in tps:
            for t in tokens:
                for name, n_in, n_out in _linears(model, tp):
                    key = (("model", model), ("tp", tp), ("tokens", t), ("linear", name))
                    for gemm in (Gemm(t, n_out, n_in, "bf16", "fwd"), Gemm(t, n_in, n_out, "bf16", "dgrad"),
                                 Gemm(n_out, n_in, t, "bf16", "wgrad")):
                        bf16.append(Case("gemm_layers_bf16.csv", "gemm", (*key, ("pass", gemm.layout)), gemm))
                    fp8.append(Case("gemm_layers_fp8.csv", "fp8", key, Gemm(t, n_out, n_in, "fp8", "fwd")))
    return bf16 + fp8


def _moe_cases(rows: Iterable[tuple[str, str, int]], tokens: Sequence[int]) -> list[Case]:
    """Grouped expert GEMMs: ``up`` (gate + up fused, [t, hidden] x [hidden, 2 ffn]) and ``down``."""
    out = []
    for name, preset, ep in rows:
        m = PRESETS[preset]
        assert m.moe is not None, preset
        experts, hidden, ffn = m.moe.experts // ep, m.hidden, m.expert_ffn
        for t in tokens:
            for linear, n, k in (("up", 2 * ffn, hidden), ("down", hidden, ffn)):
                labels = (("model", name), ("experts_local", experts), ("tokens_per_expert", t),
                          ("linear", linear), ("impl", "grouped_mm"))
                out.append(Case("moe_grouped_gemm.csv", "moe", labels, GroupedGemm(experts, t, n, k)))
    return out


def _attention_cases(seqs: Sequence[tuple[int, int]], heads: Sequence[tuple[int, int, int]]) -> list[Case]:
    out = []
    for backend in ("CUDNN_ATTENTION", "FLASH_ATTENTION"):
        for b, s in seqs:
            for h, g, d in heads:
                shape = AttentionShape(b, h, g, s, s, d, causal=True)
                out += [Case("attention.csv", "attention", (), Attention(backend, shape, backward))
                        for backward in (False, True)]
    return out


def case_set(quick: bool, groups: Sequence[str] = GROUPS) -> tuple[Case, ...]:
    """The kernel cases of the default set (the H100 tables' shapes) or of ``--quick``, those of
    *groups* only, in the order they run."""
    squares: Sequence[int]
    memory: Sequence[tuple[str, Sequence[tuple[int, int]]]]
    if quick:
        cases = _layer_cases((("llama3-8b", (1,)), ("llama3-70b", (8,))), (4096, 16384))
        squares = (1024, 2048, 4096, 8192)
        cases += _attention_cases(((4, 4096), (1, 16384)), ((32, 8, 128), (64, 8, 128), (16, 8, 256)))
        memory = tuple((op, shapes[:1]) for op, shapes in _MEMORY)
        cases += _moe_cases(_MOE[:1] + _MOE[2:3], (1024,))
    else:
        cases = _layer_cases(_LAYER_MODELS, _TOKENS)
        squares = _SQUARE
        cases += _attention_cases(_ATTN_SEQ, _ATTN_HEADS)
        memory = _MEMORY
        cases += _moe_cases(_MOE, _MOE_TOKENS)
    for n in squares:
        cases += [Case("gemm_square.csv", "gemm" if dt == "bf16" else "fp8", (("dtype", dt),),
                       Gemm(n, n, n, dt, "square")) for dt in ("bf16", "fp8")]
    cases.append(Case("memory_bound.csv", "memory", (), Memory("copy", _COPY_ELEMS)))
    cases += [Case("memory_bound.csv", "memory", (), Memory(op, r, c)) for op, shapes in memory
              for r, c in shapes]
    cases += [Case("optimizer.csv", "optimizer", (), Optimizer(impl, _ADAM_PARAMS))
              for impl in ("adamw_fused", "adamw_foreach")]
    return tuple(c for c in cases if c.group in groups)


def collective_sizes(quick: bool) -> tuple[int, ...]:
    """Message sizes of the NCCL sweep, bytes: 1 KiB to 1 GiB in x4 steps (quick: 1 MiB to 1 GiB
    in x16 steps)."""
    return tuple(2**e for e in (range(20, 31, 4) if quick else range(10, 31, 2)))


def collective_table(op: str, gpus: int, chip_name: str) -> str:
    """File name of one NCCL sweep, as validation/collectives/ names its files."""
    return f"nccl_{op}_{gpus}x{chip_name}_bench.csv"


# Parts the catalogue lacks whose nearest catalogue chip is close enough for a time estimate
# (an H100 PCIe or NVL, an H800; an A100 PCIe by its memory), by name fragment.
_NEAR = (("H100", "H100-SXM"), ("H800", "H100-SXM"), ("A100", "A100-SXM-80GB"))


def nearest_chip(gpu_name: str, memory_B: float = 0.0) -> tuple[Chip, bool]:
    """The catalogue chip a GPU's estimate uses, and whether its name matched one (else H100-SXM):
    the catalogue part its CUDA name names (``sim.hardware.chip_of_device_name``), else the
    nearest one."""
    exact = chip_of_device_name(gpu_name)
    if exact is not None:
        return CATALOGUE[exact], True
    for fragment, chip in _NEAR:
        if fragment in gpu_name.upper():
            if chip == "A100-SXM-80GB" and 0 < memory_B < 60 * 2**30:
                chip = "A100-SXM-40GB"
            return CATALOGUE[chip], True
    return CATALOGUE["H100-SXM"], False


def _case_s(k: Kernel, chip: Chip) -> float:
    return (SETUP_S[type(k)] + need_bytes(k) / FILL_BPS
            + (WARMUP + reps(k)) * (predict_s(k, chip) + CALL_HOST_S))


def _collective_s(op: str, nbytes: int, gpus: int, chip: Chip) -> float:
    """One call on NVLink: a bus-bandwidth model at 70% of the chip's NVLink rate, plus 20 us."""
    return 20e-6 + busbw_factor(op, gpus) * nbytes / (0.7 * chip.scaleup_Bps)


def estimate_s(cases: Sequence[Case], chip: Chip, gpus: int = 1, sizes: Sequence[int] = (),
               ops: Sequence[str] = ()) -> float:
    """Seconds a run of *cases* (and of the NCCL sweep of *ops* over *sizes* on *gpus* GPUs, when
    there are more than one) takes on *chip*: each case's calls at the compute model's time on
    the chip, plus the setup terms above."""
    total = STARTUP_S + sum(_case_s(c.kernel, chip) for c in cases)
    if gpus > 1:
        for op in ops:
            total += NCCL_SPAWN_S + sum((WARMUP + REPS) * (_collective_s(op, s, gpus, chip) + CALL_HOST_S)
                                        for s in sizes)
    return total
