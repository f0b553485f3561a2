"""PyTorch FlexAttention (``software.attention: flex``), sliding windows as whole key tiles, and
attention sinks, against validation/compute/h100-sxm-80gb/flex_attention.csv (one H100,
2026-11-27, benchmarks/device/h100_flex_attention.py).

``sim.calibration.FLEX_VS_CUDNN`` is re-derived here from the table's four causal shapes without
sinks (fwd+bwd rows). The sliding-window and sink rows were not used for it and test the rest:
the window's whole tiles (``sim.workload.blocks.window_keys``) and the eager sink rescale
(``FLEX_SINK_BYTES_PER_ELEMENT``).

Observed when written (fwd+bwd rows; stack efficiency 1): FlexAttention -19.6% .. +12.3% on the
causal shapes (cuDNN's own model -9.5% .. +11.9% on them); the sliding window of 128 with sinks
-6.4% at 2 x 4,096 tokens and -47% at 1 x 4,096, where the measured time hardly falls with the
batch (1,761 us against 1,989 us): few thread blocks each walking a GQA group's heads, latency
the model's one-block tail does not see.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from sim import calibration as cal
from sim.compute.kernels import AttentionShape
from sim.compute.model import ComputeModel
from sim.errors import ConfigError
from sim.hardware import CATALOGUE
from sim.software import resolve_software
from sim.workload.blocks import window_keys

TABLE = (Path(__file__).resolve().parent.parent / "validation" / "compute" / "h100-sxm-80gb"
         / "flex_attention.csv")
H100 = CATALOGUE["H100-SXM"]


def _rows() -> list[dict[str, str]]:
    with open(TABLE, newline="") as f:
        return [r for r in csv.DictReader(f) if r["time_us"] and r["pass"] == "fwd+bwd"]


def _key(r: dict[str, str]) -> tuple[str, ...]:
    return tuple(r[c] for c in ("mask", "window", "sinks", "batch", "seq", "heads", "kv_heads", "head_dim"))


def _shape(r: dict[str, str]) -> AttentionShape:
    b, s, h, kv, d = (int(r[c]) for c in ("batch", "seq", "heads", "kv_heads", "head_dim"))
    w = int(r["window"]) if r["window"] else None
    return AttentionShape(b, h, kv, s, min(window_keys(w), s) if w else s, d, w is None, r["sinks"] == "1")


def _predict(r: dict[str, str], family: str) -> float:
    cm = ComputeModel(H100, "bf16", resolve_software("pytorch-fsdp", family, H100), stack_efficiency={})
    return cm.attention_s(_shape(r), "fwd") + cm.attention_s(_shape(r), "bwd")


def test_flex_ratio_rederived_from_the_table():
    cudnn = {_key(r): float(r["time_us"]) for r in _rows() if r["impl"] == "cudnn_attention"}
    ratios = [float(r["time_us"]) / cudnn[_key(r)] for r in _rows()
              if r["impl"] == "flex" and _key(r) in cudnn]
    assert len(ratios) == 4
    assert statistics.median(ratios) == pytest.approx(cal.FLEX_VS_CUDNN, abs=0.005)


def test_flex_rows_against_the_model():
    errors = {_key(r): _predict(r, "flex") / (float(r["time_us"]) * 1e-6) - 1
              for r in _rows() if r["impl"] == "flex"}
    assert len(errors) == 7
    causal = [abs(e) for k, e in errors.items() if k[0] == "causal"]
    assert max(causal) < 0.22, errors
    assert statistics.median(abs(e) for e in errors.values()) < 0.15, errors
    # the held-out sliding window with sinks at the gpt-oss training shape (AutoModel's 2 x 4,096)
    two = [e for k, e in errors.items() if k[0] == "sliding" and k[3] == "2"]
    assert len(two) == 1 and abs(two[0]) < 0.12, errors


def test_sinks_cost_what_was_measured_around_the_kernel():
    """The eager rescale's added time: sinks on against off at the same causal shape."""
    rows = {(_key(r)[2], r["batch"]): r for r in _rows()
            if r["impl"] == "flex" and r["mask"] == "causal" and r["head_dim"] == "64"}
    on, off = rows[("1", "2")], rows[("0", "2")]
    measured = float(on["time_us"]) - float(off["time_us"])
    predicted = (_predict(on, "flex") - _predict(off, "flex")) * 1e6
    assert predicted == pytest.approx(measured, rel=0.5)
    assert _predict(on, "cudnn") == _predict(off, "cudnn")      # cuDNN takes sinks in its kernel


@pytest.mark.parametrize("window, keys", [(1, 128), (128, 256), (129, 256), (256, 384), (4096, 4224)])
def test_window_keys_are_whole_tiles(window, keys):
    assert window_keys(window) == keys


def test_flex_is_a_gpu_kernel():
    with pytest.raises(ConfigError, match="software.attention: 'flex' is a CUDA kernel"):
        resolve_software("maxtext", "flex", CATALOGUE["TPU-v5p"])


def test_flexattn_rows_map_to_flex():
    from sim.validate.training_map import map_runs
    runs = {r.id: r for r in map_runs(TABLE.parents[2] / "training") if getattr(r, "scenario", None)}
    assert runs["automodel-h100-gptoss20b-8"].scenario["software"]["attention"] == "flex"
    assert "attention" not in runs["automodel-h100-dsv3-256"].scenario["software"]
