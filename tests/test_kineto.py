"""PyTorch-profiler (Kineto) traces (issue 33): the mapping of GPU kernels to op types on a
hand-written two-rank DDP trace whose ops are worked out by hand, step detection, rank alignment,
the replay of a published DDP trace against its measured steps, kernel tables, and bad input."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.cli import main
from sim.compute.tables import load_cases
from sim.errors import ConfigError
from sim.traces import load_trace, what_if
from sim.traces.kineto import is_kineto, kineto_files, read_kineto, roles
from sim.traces.kineto_events import innermost, read_rank
from sim.traces.kineto_tables import gemm_shape, write_kernel_tables

DATA = Path(__file__).resolve().parent / "data" / "kineto"
PUBLISHED = DATA / "ddp_resnet_rank0" / "rank-0.json.gz"       # published by HTA: tests/data/kineto/README.md
SAMPLED = DATA / "hta_sampled_2of128"


def _x(cat: str, name: str, ts: float, dur: float, tid: Any = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1 if cat not in ("kernel", "gpu_memset") else 0,
            "tid": tid, "ts": ts, "dur": dur, "args": args}


class _Trace:
    """Builds one rank's Kineto trace: CPU ops on the main thread (1) and the autograd thread (2);
    ``gpu(name, ts, dur, launch_ts, tid)`` adds a kernel and the runtime call that launched it."""

    def __init__(self, rank: int | None, world: int | None) -> None:
        self.events: list[dict[str, Any]] = [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "thread 1 (pt_main_thread)"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "thread 2 (pt_autograd_0)"}}]
        self.info = None if rank is None else {"backend": "nccl", "rank": rank, "world_size": world}
        self._corr = 0

    def cpu(self, name: str, ts: float, dur: float, tid: int = 1, cat: str = "user_annotation", **a: Any) -> None:
        self.events.append(_x(cat, name, ts, dur, tid, **a))

    def gpu(self, name: str, ts: float, dur: float, launch: float, tid: int = 1, cat: str = "kernel") -> None:
        self._corr += 1
        self.events.append(_x("cuda_runtime", "cudaLaunchKernel", launch, 2, tid, correlation=self._corr))
        self.events.append(_x(cat, name, ts, dur, 7, correlation=self._corr, stream=7))

    def doc(self) -> dict[str, Any]:
        d: dict[str, Any] = {"schemaVersion": 1, "traceEvents": self.events}
        if self.info:
            d["distributedInfo"] = self.info
        return d


AR = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def ddp_rank(rank: int | None, world: int | None = 2, steps: tuple[int, ...] = (1, 2), slow_us: float = 0.0) -> _Trace:
    """One DDP rank, per step at base B = 1000 (step - 1) us: zero_grad's memset 10-12; forward
    kernels 20-120-200; backward (autograd thread) 210-310-(460 + slow)-(500 + slow); all-reduce of
    bucket 0 at 320-380 and of bucket 1 at 500 + slow until 550 + s1 (s1 = the slower rank's
    slow: NCCL waits for both); SGD step's kernel 560 + s1 to 590 + s1; an extra broadcast in the
    forward at 125-130 (not a gradient collective)."""
    t = _Trace(rank, world)
    for step in steps:
        b = 1000.0 * (step - 1)
        s1 = 50.0
        t.cpu(f"ProfilerStep#{step}", b, 999.0)
        t.cpu("Optimizer.zero_grad#SGD.zero_grad", b + 1, 5)
        t.gpu("memset", b + 10, 2, b + 2, cat="gpu_memset")
        t.gpu("sm90_gemm_fwd_a", b + 20, 100, b + 15)
        t.gpu("ncclKernel_Broadcast_RING_LL_Sum_int8_t", b + 125, 5, b + 16)
        t.gpu("sm90_gemm_fwd_b", b + 120, 80, b + 17)
        t.cpu("## backward ##", b + 200, 300)
        t.gpu("sm90_gemm_bwd_a", b + 210, 100, b + 205, tid=2)
        t.gpu(AR, b + 320, 60, b + 300, tid=2)
        t.gpu("sm90_gemm_bwd_b", b + 310, 150 + slow_us, b + 301, tid=2)
        t.gpu("sm90_gemm_bwd_c", b + 460 + slow_us, 40, b + 302, tid=2)
        t.gpu(AR, b + 500 + slow_us, 50 + s1 - slow_us, b + 303, tid=2)
        t.cpu("Optimizer.step#SGD.step", b + 540, 60)
        t.gpu("sgd_update", b + 560 + s1, 30, b + 545)
    return t


def _write(folder: Path, traces: dict[str, _Trace], gz: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, t in traces.items():
        text = json.dumps(t.doc())
        if gz:
            (folder / f"{name}.json.gz").write_bytes(gzip.compress(text.encode()))
        else:
            (folder / f"{name}.json").write_text(text)
    return folder


def _pair(tmp_path: Path) -> Path:
    return _write(tmp_path / "ddp", {"rank-1": ddp_rank(1, slow_us=50), "rank-0": ddp_rank(0)})


def test_kernels_map_to_op_types(tmp_path: Path) -> None:
    p = _write(tmp_path, {"r": ddp_rank(0, world=1, steps=(1,))}) / "r.json"
    ks = read_rank(p).kernels
    got = dict(zip((k.name[:20] for k in ks), roles(ks)))
    assert got == {"memset": "unmapped", "sm90_gemm_fwd_a": "forward", "sm90_gemm_fwd_b": "forward",
                   "ncclKernel_Broadcast": "unmapped", "sm90_gemm_bwd_a": "backward", "sm90_gemm_bwd_b": "backward",
                   "sm90_gemm_bwd_c": "backward", AR[:20]: "grad-sync", "sgd_update": "optimizer"}


def test_backward_by_annotation_on_the_main_thread(tmp_path: Path) -> None:
    t = ddp_rank(0, world=1, steps=(1,))
    t.cpu("autograd::engine::evaluate_function: MmBackward0", 700, 10, cat="cpu_op")
    t.gpu("late_bwd_kernel", 700, 1, 701)
    t.gpu("late_plain_kernel", 710, 1, 720)
    ks = read_rank(_write(tmp_path, {"r": t}) / "r.json").kernels
    got = dict(zip((k.name for k in ks), roles(ks)))
    assert got["late_bwd_kernel"] == "backward"
    assert got["late_plain_kernel"] == "unmapped"          # after the backward, outside the optimizer


def test_ops_and_replay_worked_out_by_hand(tmp_path: Path) -> None:
    """Rank 0 (t0 = 10): forward 10-210; backward segments 210-320 (cut at bucket 0's all-reduce),
    320-500 (bucket 1 starts at 500), 500-500; all-reduces 320-380 and 500-600 (waiting for rank 1,
    whose backward is 50 us longer: its second all-reduce starts at 550); optimizer 600-640.
    Transfer time of all-reduce 1: 600 - 550 = 50 us. Step: 640 - 10 = 630 us, replayed the same."""
    table, _ = read_kineto(_pair(tmp_path))
    r0 = (table.dp == 0) & (table.step == 1)
    ops = {(t, int(q)): (round(a * 1e6, 6), round((a + d) * 1e6, 6))
           for t, q, a, d in zip(table.optype[r0], table.seq[r0], table.start_s[r0], table.dur_s[r0])}
    assert ops == {("forward-compute", 0): (10, 210), ("backward-compute", 0): (210, 320),
                   ("grads-reduce-scatter", 0): (320, 380), ("backward-compute", 1): (320, 500),
                   ("grads-reduce-scatter", 1): (500, 600), ("backward-compute", 2): (500, 500),
                   ("optimizer", 0): (600, 640)}
    prog = load_trace(tmp_path / "ddp")
    assert prog.steps.tolist() == [1, 2] and prog.n_dp == 2 and prog.rank.tolist() == [[0, 1]]
    k = [i for i, (t, q) in enumerate(zip(prog.optype, prog.seq)) if t == "grads-reduce-scatter" and q == 1][0]
    np.testing.assert_allclose(prog.own_s[k], 50e-6)
    w = what_if(prog)
    np.testing.assert_allclose(w.measured_s, 630e-6)
    np.testing.assert_allclose(w.replayed_s, 630e-6)
    assert w.by_dp_rank["1"] > w.by_dp_rank["0"]           # rank 1's slow backward is the straggler
    assert any("1.0% of kernel time" in n or "not mapped" in n for n in prog.notes)


def test_steps_are_the_profiler_steps(tmp_path: Path) -> None:
    t = ddp_rank(0, world=1, steps=(7, 8, 9))
    t.gpu("outside_any_step", 9500, 5, 9400)           # launched after the last step: no step's
    prog = load_trace(_write(tmp_path, {"r": t}) / "r.json")
    assert prog.steps.tolist() == [7, 8, 9]
    np.testing.assert_allclose(prog.measured_step_s(), 630e-6)


def test_ranks_from_headers_not_file_names(tmp_path: Path) -> None:
    d = _write(tmp_path / "x", {"a": ddp_rank(1), "b": ddp_rank(0, slow_us=50)})
    prog = load_trace(d)
    assert prog.rank.tolist() == [[0, 1]]
    assert not any("file order" in n for n in prog.notes)
    d2 = _write(tmp_path / "y", {"w1": ddp_rank(None), "w0": ddp_rank(None)})
    assert any("taken from the file order w0.json, w1.json" in n for n in load_trace(d2).notes)


@pytest.mark.parametrize("case, words", [
    ("dup", "distributedInfo.rank 0 is also the rank of"),
    ("missing", "rank(s) [1] missing"),
    ("world", "distributedInfo.world_size 4, but the folder"),
    ("steps", "every rank must record the same steps"),
    ("mixed", "no distributedInfo.rank, but"),
])
def test_ranks_that_do_not_line_up(tmp_path: Path, case: str, words: str) -> None:
    traces = {"dup": {"r0": ddp_rank(0), "r1": ddp_rank(0)},
              "missing": {"r0": ddp_rank(0, world=None), "r2": ddp_rank(2, world=None)},
              "world": {"r0": ddp_rank(0, world=4), "r1": ddp_rank(1, world=4)},
              "steps": {"r0": ddp_rank(0), "r1": ddp_rank(1, steps=(2, 3))},
              "mixed": {"r0": ddp_rank(0), "r1": ddp_rank(None)}}[case]
    if case == "missing":
        for t in traces.values():
            assert t.info is not None
            del t.info["world_size"]
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_trace(_write(tmp_path, traces))


def test_published_trace_replays_its_measured_steps(capsys: pytest.CaptureFixture[str]) -> None:
    """HTA's DDP trace (rank 0 of 2, 3 steps): replayed per step against the measured GPU step;
    issue 33's target is 3%. With every op at its measured time the replay is exact to ~1e-6 (the
    collectives start as soon as their bucket and the previous collective are done)."""
    w = what_if(load_trace(PUBLISHED))
    assert w.steps.tolist() == [4, 5, 6]
    np.testing.assert_allclose(w.measured_s, [0.21577, 0.21353, 0.21876], rtol=1e-4)
    err = np.abs(w.replayed_s / w.measured_s - 1)
    print(f"\nreplay error per step: {(err * 100).round(5).tolist()} %, median {w.replay_error_median_pct:.5f} %")
    assert w.replay_error_median_pct < 3.0 and err.max() < 0.03
    assert main(["whatif", str(PUBLISHED)]) == 0
    out = capsys.readouterr()
    assert "complete steps" in out.out
    assert "rank 0 of world size 2" in out.err
    assert "6 of 3774 GPU kernels (0.1% of kernel time) not mapped" in out.err
    assert "ncclKernel_Broadcast_RING_LL_Sum_int8_t" in out.err


def test_published_sampled_ranks_are_refused_as_a_folder(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", str(SAMPLED)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "world_size 128, but the folder" in err and "sampled_rank-0.json.gz" in err


def _gemm_trace() -> _Trace:
    t = _Trace(0, 1)
    t.cpu("ProfilerStep#1", 0, 1000)
    bf = ["c10::BFloat16"] * 3
    t.cpu("aten::linear", 10, 50, cat="cpu_op", **{"Input Dims": [[4, 512, 1024], [2048, 1024], [2048]],
                                                   "Input type": bf})
    t.cpu("aten::addmm", 12, 40, cat="cpu_op", **{"Input Dims": [[2048], [2048, 1024], [1024, 2048]],
                                                  "Input type": bf})
    t.gpu("sm90_xmma_gemm", 100, 30, 20)
    t.gpu("splitk_reduce", 130, 2, 21)
    t.cpu("aten::mm", 60, 10, cat="cpu_op", **{"Input Dims": [[256, 128], [128, 64]], "Input type": ["float"] * 2})
    t.gpu("sgemm", 140, 5, 61)
    flash = {"Input Dims": [[2, 16, 1024, 128], [2, 8, 1024, 128], [2, 8, 1024, 128], [], [], [], []],
             "Input type": bf + ["Scalar", "Scalar", "Scalar", "Scalar"],
             "Concrete Inputs": ["", "", "", "0.", "True", "False", ""]}
    t.cpu("aten::_scaled_dot_product_flash_attention", 80, 10, cat="cpu_op", **flash)
    t.gpu("flash_fwd_kernel", 150, 200, 81)
    return t


def test_kernel_tables_load_with_load_cases(tmp_path: Path) -> None:
    src = _write(tmp_path / "t", {"r": _gemm_trace()})
    assert write_kernel_tables([src], tmp_path / "out") == {"gemm_shapes.csv": 1, "gemm_other.csv": 1,
                                                            "attention.csv": 1}
    cases = load_cases(tmp_path / "out")
    gemm = [c for c in cases if c.kind == "gemm"]
    attn = [c for c in cases if c.kind == "attention"]
    assert [(c.m, c.n, c.k, c.key) for c in gemm] == [(2048, 2048, 1024, "bf16")]   # innermost op: the addmm
    assert gemm[0].time_s == pytest.approx(32e-6)                                  # both of its kernels
    assert len(attn) == 1 and attn[0].attention is not None and attn[0].attention.causal
    assert attn[0].time_s == pytest.approx(200e-6) and attn[0].key == "flash-attention-2 fwd"
    assert gemm_shape("aten::bmm", [[8, 64, 32], [8, 32, 16]]) == (8, 64, 16, 32)
    assert gemm_shape("aten::linear", [[4, 512, 1024], [2048, 1024]]) == (1, 2048, 2048, 1024)


def test_kernel_tables_of_the_published_sampled_trace(tmp_path: Path) -> None:
    """Its GEMMs are fp32: written to gemm_other.csv, which load_cases does not read."""
    got = write_kernel_tables([SAMPLED], tmp_path)
    assert set(got) == {"gemm_other.csv"} and got["gemm_other.csv"] > 100
    assert load_cases(tmp_path) == []


@pytest.mark.parametrize("case, words", [
    ("other.json", "no 'traceEvents' list"),
    ("bad.json", "line 2 column"),
    ("cut.json.gz", "cannot read the trace"),
    ("nokern.json", "no GPU kernels"),
    ("nostep.json", "no ProfilerStep#N"),
    ("badts.json", "traceEvents[0] ('k'): field 'ts'"),
])
def test_bad_input_is_one_line_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
                                              words: str) -> None:
    p = tmp_path / case
    if case == "other.json":
        p.write_text('{"schemaVersion": 1, "events": []}')
    elif case == "bad.json":
        p.write_text('{"traceEvents": [\n {"ph": "X",, }]}')
    elif case == "cut.json.gz":
        p.write_bytes(gzip.compress(json.dumps(ddp_rank(0, world=1).doc()).encode())[:300])
    elif case == "nokern.json":
        t = _Trace(0, 1)
        t.cpu("ProfilerStep#1", 0, 10)
        p.write_text(json.dumps(t.doc()))
    elif case == "nostep.json":
        t = ddp_rank(0, world=1)
        t.events = [e for e in t.events if not str(e.get("name")).startswith("ProfilerStep")]
        p.write_text(json.dumps(t.doc()))
    else:
        p.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "x", "dur": 1}]}))
    assert main(["whatif", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(p) in err and words in err, err


def test_too_large_is_refused_before_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.traces.kineto_events as ke

    monkeypatch.setattr(ke, "MAX_TRACE_BYTES", 1000)
    p = _write(tmp_path, {"r": ddp_rank(0, world=1)}, gz=True) / "r.json.gz"
    with pytest.raises(ConfigError, match="decompresses to over"):
        load_trace(p)
    q = _write(tmp_path, {"s": ddp_rank(0, world=1)}) / "s.json"
    with pytest.raises(ConfigError, match="is over the"):
        load_trace(q)


def test_innermost_is_the_latest_starting_span_that_holds_the_time() -> None:
    """Against the definition: of the spans (sorted by start, the longer first) that hold t, the last."""
    rng = np.random.default_rng(5)
    starts = rng.integers(0, 200, 300).astype(float)
    spans = [(a, a + float(rng.integers(0, 40))) for a in starts] + [(10.0, 20.0), (10.0, 20.0)]
    times = rng.integers(-5, 250, 500).astype(float).tolist() + [10.0, 20.0]
    order = sorted(range(len(spans)), key=lambda k: (spans[k][0], -spans[k][1]))
    want = [next((k for k in reversed(order) if spans[k][0] <= t <= spans[k][1]), -1) for t in times]
    assert innermost(spans, times) == want
    assert innermost([], [1.0]) == [-1] and innermost([(0.0, 1.0)], []) == []


def test_kernel_tables_link_kernels_by_ac2g_flows(tmp_path: Path) -> None:
    """A kernel without ``args.correlation`` is linked to its launch by the flow arrow, as
    ``read_rank`` links it."""
    t = _gemm_trace()
    k = next(e for e in t.events if e["name"] == "sgemm")
    corr = k["args"].pop("correlation")
    t.events += [{"ph": "s", "cat": "ac2g", "id": corr, "pid": 1, "tid": 1, "ts": 61},
                 {"ph": "f", "cat": "ac2g", "id": corr, "pid": k["pid"], "tid": k["tid"], "ts": k["ts"]}]
    write_kernel_tables([_write(tmp_path / "t", {"r": t})], tmp_path / "out")
    assert "256,64,128,5.0," in (tmp_path / "out" / "gemm_other.csv").read_text()   # the fp32 mm's kernel


def test_odd_ids_and_args_count_as_absent(tmp_path: Path) -> None:
    """A list as correlation or flow id, a string as ``Input type``, a dict as ``Concrete Inputs``:
    no TypeError; the kernel has no launch, the op no types / no is_causal."""
    t = _gemm_trace()
    for e in t.events:
        if e["name"] == "sgemm" or (e["name"] == "cudaLaunchKernel" and e["ts"] == 61):
            e["args"]["correlation"] = [3]
        if e["name"] == "aten::mm":
            e["args"]["Input type"] = "float"
        if e["name"].startswith("aten::_scaled_dot"):
            e["args"]["Concrete Inputs"] = {"is_causal": True}
    t.events.append({"ph": "s", "cat": "ac2g", "id": [1], "pid": 1, "tid": 1, "ts": 5})
    p = _write(tmp_path / "t", {"r": t})
    assert [k.context for k in read_rank(p / "r.json").kernels if k.name == "sgemm"] == ["?"]
    assert write_kernel_tables([p], tmp_path / "out") == {"gemm_shapes.csv": 1}


@pytest.mark.parametrize("pas, causal", [("fwd", True), ("fwd", False), ("bwd", True), ("bwd", False)])
def test_attention_rows_count_flops_as_the_kernel_model(tmp_path: Path, pas: str, causal: bool) -> None:
    """tflops = 4 b h s^2 d (halved when causal), 2.5x backward (sim.compute.kernels.attention_flops)."""
    t = _Trace(0, 1)
    b, h, hk, s, d = 2, 16, 8, 1024, 128
    q, kv = [b, h, s, d], [b, hk, s, d]
    if pas == "fwd":
        name, dims, ci = "aten::_scaled_dot_product_flash_attention", [q, kv, kv], 4
    else:
        name, dims, ci = "aten::_scaled_dot_product_flash_attention_backward", [q, q, kv, kv], 11
    concrete = [""] * 12
    concrete[ci] = str(causal)
    t.cpu(name, 10, 10, cat="cpu_op", **{"Input Dims": dims, "Input type": ["c10::BFloat16"] * len(dims),
                                         "Concrete Inputs": concrete})
    t.gpu("flash_kernel", 20, 400, 11)
    write_kernel_tables([_write(tmp_path / "t", {"r": t})], tmp_path / "out")
    row = (tmp_path / "out" / "attention.csv").read_text().splitlines()[1].split(",")
    flops = 4 * b * h * s * s * d / (2 if causal else 1) * (2.5 if pas == "bwd" else 1)
    assert row[6:8] == [str(int(causal)), pas] and float(row[9]) == round(flops / 400 / 1e6, 3)


def test_kernel_tables_refuse_a_bad_time_naming_the_event(tmp_path: Path) -> None:
    t = _gemm_trace()
    t.events[3]["dur"] = float("nan")
    with pytest.raises(ConfigError, match=r"r\.json: traceEvents\[3\] \('aten::linear'\): field 'dur'"):
        write_kernel_tables([_write(tmp_path / "t", {"r": t})], tmp_path / "out")


def test_kineto_files_and_is_kineto(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    for name in ("rank-10.json.gz", "rank-2.JSON", "notes.txt"):
        (d / name).write_text("")
    (d / "sub.json").mkdir()
    assert [p.name for p in kineto_files(d)] == ["rank-2.JSON", "rank-10.json.gz"]
    assert kineto_files(d / "notes.txt") == [d / "notes.txt"]
    assert is_kineto(d) and is_kineto(tmp_path / "absent.json.gz") and not is_kineto(d / "notes.txt")
    (tmp_path / "empty").mkdir()
    for bad, words in ((tmp_path / "empty", "no trace files"), (tmp_path / "absent", "no such trace file")):
        with pytest.raises(ConfigError, match=words):
            kineto_files(bad)
