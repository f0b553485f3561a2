"""Users' own nccl-tests logs (read as printed, ``collective --compare``), a suite that never aborts
on one run, every bundled GPU topology in systems.csv, partial nodes, and all-to-all's cost per
remote peer (issue 30)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sim.cli import main
from sim.errors import ConfigError
from sim.validate import validate_collectives
from sim.validate.collectives_systems import TOPOLOGIES
from sim.validate.nccl_log import read_nccl_tests_log
from sim.validate.predictors import CasePredictor

HEADER = """# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20
#
# Using devices
{ranks}
node1:11:11 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""
_ROW = "{:>12} {:>13} {:>9} {:>7} {:>7} {:>8} {:>7} {:>7} {:>6} {:>8} {:>7} {:>7} {:>6}"
ROWS = "\n".join([
    _ROW.format(8, 2, "float", "sum", -1, "12.90", "0.00", "0.00", 0, "12.88", "0.00", "0.00", 0),
    "node1:11:11 [0] NCCL INFO Channel 00/1 : 0 1 2 3 4 5 6 7",
    "[1,0]<stdout>:" + _ROW.format(1024, 256, "float", "sum", -1, "16.43", "0.06", "0.11", 0,
                                   "16.20", "0.06", "0.11", 0),
    _ROW.format(1048576, 262144, "float", "sum", -1, "28.56", "36.71", "64.24", 0, "28.40",
                "36.92", "64.61", 0),
    _ROW.format(134217728, 33554432, "float", "sum", -1, "592.80", "226.42", "396.23", 0,
                "591.10", "227.07", "397.37", 0),
    "# Avg bus bandwidth    : 115.2", ""])


def log_text(ranks: int = 8, rows: str = ROWS) -> str:
    lines = "\n".join(f"#  Rank {r:2d} Group  0 Pid  {10 + r} on node1 device {r} [0x18] NVIDIA "
                      "H100 80GB HBM3" for r in range(ranks))
    return HEADER.format(ranks=lines) + rows


def test_a_printed_log_reads_as_its_table(tmp_path: Path) -> None:
    path = tmp_path / "all_reduce_perf.out"
    path.write_text(log_text())
    log = read_nccl_tests_log(path)
    assert log.ranks == 8 and log.nccl_version == "2.21.5"
    assert [r.size_bytes for r in log.rows] == [8, 1024, 1048576, 134217728]   # INFO skipped
    assert log.rows[-1].time_us == 592.80 and log.rows[-1].busbw_GBps == 396.23   # out-of-place


@pytest.mark.parametrize("rows, match", [
    (ROWS.replace(" 226.42  396.23", ""), r"\.out:\d+: a row cut short or garbled"),
    (ROWS.replace("   134217728", "         512"), r"\.out:\d+: size 512 after 1048576"),
    (ROWS.replace("28.56", "2x.56"), r"\.out:\d+: not a row of numbers"),
    ("", r"no nccl-tests table found"),
])
def test_a_bad_log_is_one_line_naming_file_and_line(tmp_path: Path, rows: str, match: str) -> None:
    path = tmp_path / "all_reduce_perf.out"
    path.write_text(log_text(rows=rows) if rows else "just text\n")
    with pytest.raises(ConfigError, match=match):
        read_nccl_tests_log(path)


def test_collective_compare_prints_the_error_per_regime(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ar.log"
    path.write_text(log_text())
    assert main(["collective", "--topology", "dgx-h100", "--chips", "8", "--op", "allreduce",
                 "--compare", str(path)]) == 0
    out = capsys.readouterr().out
    assert "latency: median |error|" in out and "bandwidth: median |error|" in out
    assert main(["collective", "--topology", "dgx-h100", "--chips", "16", "--op", "allreduce",
                 "--compare", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lists 8 ranks but the prediction is for 16" in err


def _dataset(root: Path, runs: list[tuple[str, str, str, int, int, int, str, str]]) -> Path:
    """runs: (file, op, hardware, gpus, nodes, gpus_per_node, topology, table text)."""
    root.mkdir()
    with (root / "runs.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "collective", "hardware", "gpus", "nodes", "gpus_per_node",
                    "interconnect_intra", "interconnect_inter", "nccl_version", "env", "source_url",
                    "notes", "split"])
        for f, op, hw, gpus, nodes, gpn, _, _ in runs:
            w.writerow([f, op, hw, gpus, nodes, gpn, "x", "x", "2.21", "", "https://x", "", "test"])
    with (root / "systems.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "status", "topology", "sharp", "algo", "reason"])
        for f, *_, topo, _ in runs:
            w.writerow([f, "supported", topo, "false", "", "a test system"])
    for f, *_, text in runs:
        (root / f).write_text(text)
    return root


def test_the_suite_scores_printed_logs_and_lists_what_it_cannot(tmp_path: Path) -> None:
    big = _ROW.format(4096, 1024, "float", "none", -1, "9000.00", "0.00", "0.00", 0, "9000.00",
                      "0.00", "0.00", 0) + "\n"
    root = _dataset(tmp_path / "c", [
        ("good.out", "allreduce", "8x H100 SXM", 8, 1, 8, "dgx-h100", log_text()),
        ("cut.out", "allreduce", "8x H100 SXM", 8, 1, 8, "dgx-h100",
         log_text(rows=ROWS.replace(" 226.42  396.23", ""))),
        ("ranks.out", "allreduce", "8x H100 SXM", 8, 1, 8, "dgx-h100", log_text(ranks=16)),
        ("huge_a2a.out", "alltoall", "A100-SXM4-40GB", 2160, 540, 4, "polaris",
         HEADER.format(ranks="") + big),
        ("too_big.out", "allreduce", "A100-SXM4-40GB", 16384, 4096, 4, "polaris",
         HEADER.format(ranks="") + big),
    ])
    report = validate_collectives(root, CasePredictor())
    by = {r.file: r for r in report.runs}
    assert by["good.out"].error is None and len(by["good.out"].points) == 4
    assert by["cut.out"].error.startswith("unreadable:") and "a row cut short" in by["cut.out"].error
    assert "lists 16 ranks but runs.csv says gpus = 8" in by["ranks.out"].error
    assert by["huge_a2a.out"].error is None and by["huge_a2a.out"].points    # no rank cap
    assert by["too_big.out"].error is not None and by["too_big.out"].points == ()
    assert report.summary("test").runs == 2                 # the rest is scored


def test_every_bundled_gpu_topology_is_a_suite_topology() -> None:
    assert {"dgx-a100-40gb", "slingshot-dragonfly", "perlmutter", "h100-3tier"} <= TOPOLOGIES
    assert not any(t.startswith("tpu") for t in TOPOLOGIES)


def test_partial_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collective", "--topology", "dgx-h100", "--chips", "8", "--gpus-per-node", "4",
                 "--op", "allreduce", "--max-bytes", "1M"]) == 0
    assert "8 ranks" in capsys.readouterr().out
    # the suite: 4 GPUs on each of 2 DGX nodes
    root = _dataset(tmp_path / "c", [("half.out", "allreduce", "8x H100 SXM", 8, 2, 4, "dgx-h100",
                                      log_text())])
    report = validate_collectives(root, CasePredictor())
    (run,) = report.runs
    assert run.error is None and run.nodes == 2
    assert main(["collective", "--topology", "polaris", "--chips", "4", "--gpus-per-node", "1",
                 "--op", "allreduce"]) == 2
    assert "each with whole NICs" in capsys.readouterr().err


def test_all_to_all_pays_its_plugin_per_remote_peer() -> None:
    from sim.calibration import NET_PEER_US
    from sim.collectives import CollectiveModel
    from sim.config import load_cluster
    from sim.topology import build_topology

    def fixed_us(topology: str, chips: int, size: int) -> float:
        m = CollectiveModel(build_topology(load_cluster(topology, chips)), nccl_version=(2, 21))
        return m.time("alltoall", size).latency_s * 1e6
    large, small = NET_PEER_US["slingshot"]
    # Polaris: 4 GPUs a node; 8 ranks have 4 peers on the other node, 32 ranks 28
    assert fixed_us("polaris", 32, 32 * 4096) - fixed_us("polaris", 8, 8 * 4096) == pytest.approx(
        24 * large, rel=0.05)
    assert fixed_us("polaris", 8, 8 * 64) - fixed_us("polaris", 8, 8 * 4096) == pytest.approx(
        4 * (small - large), rel=0.05)
    # no fitted cost for InfiniBand verbs: one step's latency, whatever the peers
    assert fixed_us("dgx-h100", 64, 64 * 4096) == pytest.approx(fixed_us("dgx-h100", 16, 16 * 4096),
                                                                 rel=0.05)
