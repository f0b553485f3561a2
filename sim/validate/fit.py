"""Calibration fits on the calibration splits: the constants of ``sim.calibration`` re-derived.

Each fit uses only the ``calibration`` split of its suite's data and the same predictors as the
suite (``sim.validate.predictors``, built by the caller with the constant under fit overridden);
tests/test_validation_budgets.py and tests/test_validation_training.py check that the committed
constants equal the fits.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..compute.model import stack_key
from ..errors import ConfigError
from .collectives import BW_MIN_BYTES, LAT_MAX_BYTES, Predictor, _load_measured, _load_runs, _score_point
from .stats import median
from .training import _score
from .training_map import map_runs

__all__ = ["fit_dcn_layer_step_s", "fit_link_efficiency", "fit_nccl_tests_launch_s", "fit_net_latency",
           "fit_nvlink_efficiency",
           "fit_proxy_step_us",
           "fit_stack_efficiency", "fit_torch_call_overhead_s"]


def fit_nvlink_efficiency(data_dir: Path, predict_full_rate: Predictor) -> float:
    """Fit of ``sim.calibration.LINK_EFFICIENCY["nvlink"]`` on the calibration split.

    Over the bandwidth-regime points (>= 64 MiB) of supported, non-anomalous, single-node
    calibration runs: the median of measured busbw / busbw predicted with links at their full
    line rate (*predict_full_rate*). Single-node runs are bound by NVLink alone, so the ratio is
    the achievable fraction of the NVLink rate.
    """
    from ..collectives import busbw_factor  # lazily, as the collectives suite does

    ratios: list[float] = []
    for meta in _load_runs(data_dir):
        if meta.split != "calibration" or not meta.supported or meta.anomalous or meta.nodes != 1:
            continue
        factor = busbw_factor(meta.op, meta.gpus)
        for m in _load_measured(data_dir / meta.file):
            if m.size_bytes >= BW_MIN_BYTES:
                point = _score_point(meta, m, predict_full_rate, factor)
                ratios.append(m.busbw_GBps / point.predicted_busbw_GBps)
    fitted = median(ratios)
    if fitted is None:
        raise ConfigError(f"{data_dir}: no calibration points to fit the NVLink efficiency on")
    return fitted


def fit_net_latency(data_dir: Path, transport_of: Callable[[str], str | None],
                    predictor_for: Callable[[dict[str, float]], Predictor]) -> dict[str, float]:
    """Fit of ``sim.calibration.NET_LATENCY_US`` on the calibration split.

    For each transport (``transport_of(topology)``; None for topologies that need no fit: their
    file gives the latency or NCCL's InfiniBand table holds) with latency-regime points (<= 64 KiB,
    a measured time) in supported, non-anomalous calibration runs: the per-step network latency,
    in us, of the ring- and tree-based collectives (all-to-all's per-peer cost is
    ``fit_net_peer_us``'s), at which the median signed error of the predicted times is zero, by bisection on
    [0, 1000] us (predicted times grow with it). *predictor_for(table)* builds a predictor whose
    ``NET_LATENCY_US`` is *table*. Rounded to 0.1 us.
    """
    from ..collectives import busbw_factor  # lazily, as the collectives suite does

    points: dict[str, list[tuple[Any, Any, float]]] = {}
    for meta in _load_runs(data_dir):
        if meta.split != "calibration" or not meta.supported or meta.anomalous:
            continue
        transport = transport_of(meta.topology)
        if transport is None or meta.op in _POINT_TO_POINT:    # their peers: fit_net_peer_us
            continue
        for m in _load_measured(data_dir / meta.file):
            if m.size_bytes <= LAT_MAX_BYTES and m.time_s is not None:
                points.setdefault(transport, []).append((meta, m, busbw_factor(meta.op, meta.gpus)))
    fitted: dict[str, float] = {}
    for transport, pts in sorted(points.items()):
        def err(us: float, transport: str = transport, pts: list[tuple[Any, Any, float]] = pts) -> float:
            return _median_signed_err(pts, predictor_for({**fitted, transport: us}))

        fitted[transport] = round(_root(err, 0.0, 1000.0, 40), 1)
    return fitted


_POINT_TO_POINT = ("alltoall", "sendrecv")


def fit_link_efficiency(data_dir: Path, kind: str, topologies: set[str],
                        predictor_for: Callable[[float], Predictor]) -> float:
    """Fit of ``sim.calibration.LINK_EFFICIENCY[kind]`` for a scale-out transport on the
    calibration split.

    Over the bandwidth-regime points (>= 64 MiB) of the supported, non-anomalous calibration runs
    on *topologies* (those whose links are of *kind*) of the collectives that stream over rings
    and trees (not all-to-all or send/recv, whose point-to-point paths and per-peer costs are a
    mechanism of their own, not the link's rate): the efficiency at which the median signed
    error of the predicted bus bandwidth is zero, by bisection on [0.2, 1] (predicted bandwidth
    grows with it; the NICs are not every point's bottleneck, so it is a fit, not a ratio).
    *predictor_for(x)* builds a predictor whose ``LINK_EFFICIENCY[kind]`` is x. Rounded to 0.005.
    """
    from ..collectives import busbw_factor  # lazily, as the collectives suite does

    pts = [(meta, m, busbw_factor(meta.op, meta.gpus)) for meta in _load_runs(data_dir)
           if meta.split == "calibration" and meta.supported and not meta.anomalous
           and meta.topology in topologies and meta.op not in _POINT_TO_POINT
           for m in _load_measured(data_dir / meta.file) if m.size_bytes >= BW_MIN_BYTES]
    if not pts:
        raise ConfigError(f"{data_dir}: no calibration points to fit the {kind} efficiency on")

    def err(x: float) -> float:
        predict = predictor_for(x)
        med = median([_score_point(meta, m, predict, f).predicted_busbw_GBps / m.busbw_GBps - 1
                      for meta, m, f in pts])
        assert med is not None
        return med

    return round(_root(err, 0.2, 1.0, 8) / 0.005) * 0.005


def fit_proxy_step_us(data_dir: Path, predictor_for: Callable[[float], Any],
                      topologies: set[str] | None = None) -> float:
    """Fit of ``sim.calibration.PROXY_STEP_US`` on the calibration split.

    Over the points of supported, non-anomalous calibration runs across nodes (on *topologies*,
    all when None) whose call the model runs on LL128 (the protocol the term applies to; NCCL's
    tuner, and so the choice, does not see it): the proxy time per channel step at which the
    median signed time error is zero, by bisection on [0, 100] us (predicted times grow with it).
    *predictor_for(us)* builds a ``CasePredictor`` whose ``PROXY_STEP_US`` is *us*. Rounded to
    0.1 us.
    """
    from ..collectives import busbw_factor  # lazily, as the collectives suite does

    probe = predictor_for(0.0)
    pts = []
    for meta in _load_runs(data_dir):
        if (meta.split != "calibration" or not meta.supported or meta.anomalous or meta.nodes < 2
                or (topologies is not None and meta.topology not in topologies)):
            continue
        model = probe.model(meta.topology, meta.gpus, meta.sharp, meta.nccl_version, meta.nvl_domain)
        for m in _load_measured(data_dir / meta.file):
            if model.time(meta.op, int(m.size_bytes)).proto == "LL128":
                pts.append((meta, m, busbw_factor(meta.op, meta.gpus)))
    if not pts:
        raise ConfigError(f"{data_dir}: no calibration points run LL128 across nodes to fit on")

    return round(_root(lambda us: _median_signed_err(pts, predictor_for(us)), 0.0, 100.0, 30), 1)


def _root(err: Callable[[float], float], lo: float, hi: float, iters: int) -> float:
    """Bisection: the middle of [lo, hi] narrowed *iters* times towards where *err*, which grows
    with its argument, changes sign."""
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if err(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


def _median_signed_err(pts: list[tuple[Any, Any, float]], predict: Predictor) -> float:
    """Median of (predicted - measured) / measured time over *pts*' points that have a measured
    time (timed, or implied by a published busbw as the collectives suite scores it)."""
    scored = (_score_point(meta, m, predict, f) for meta, m, f in pts)
    med = median([(p.predicted_time_s - p.measured_time_s) / p.measured_time_s
                  for p in scored if p.measured_time_s])
    assert med is not None
    return med


def fit_nccl_tests_launch_s(data_dir: Path) -> float:
    """Fit of ``sim.calibration.NCCL_TESTS_LAUNCH_PER_GPU_S`` on the calibration split.

    A nccl-tests thread that drives g GPUs (``-g g``) issues each iteration's g calls one after
    another (ncclGroupStart, one call per GPU, ncclGroupEnd: a kernel launch per device) and times
    a stream of iterations, so no iteration completes faster than the host issues it: g launches.
    Where the GPU's own time is shorter (the latency regime) the measured time is that floor. Over
    the latency-regime points (<= 64 KiB, time measured) of supported, non-anomalous calibration
    runs with g > 1: the median of measured time / g, seconds per GPU.
    """
    per_gpu: list[float] = []
    for meta in _load_runs(data_dir):
        if (meta.split != "calibration" or not meta.supported or meta.anomalous
                or meta.gpus_per_thread <= 1):
            continue
        for m in _load_measured(data_dir / meta.file):
            if m.size_bytes <= LAT_MAX_BYTES and m.time_s is not None:
                per_gpu.append(m.time_s / meta.gpus_per_thread)
    fitted = median(per_gpu)
    if fitted is None:
        raise ConfigError(f"{data_dir}: no calibration points to fit the nccl-tests launch cost on")
    return fitted


def fit_torch_call_overhead_s(data_dir: Path, predict_without: Predictor) -> float:
    """Fit of ``sim.calibration.TORCH_CALL_OVERHEAD_S`` on the calibration split.

    A run timed by all_reduce_bench.py's single call (harness "torch-single-call") measures the
    call's host overhead plus the collective. Over the points below the bandwidth regime
    (< 64 MiB, where the overhead is not lost in the transfer) of supported, non-anomalous
    calibration runs of that harness: the median of measured time minus the time predicted
    without the overhead (*predict_without*), seconds.
    """
    from ..collectives import busbw_factor  # lazily, as the collectives suite does

    extra: list[float] = []
    for meta in _load_runs(data_dir):
        if (meta.split != "calibration" or not meta.supported or meta.anomalous
                or meta.harness != "torch-single-call"):
            continue
        factor = busbw_factor(meta.op, meta.gpus)
        for m in _load_measured(data_dir / meta.file):
            if m.size_bytes < BW_MIN_BYTES:
                point = _score_point(meta, m, predict_without, factor)
                if point.measured_time_s is not None:
                    extra.append(point.measured_time_s - point.predicted_time_s)
    fitted = median(extra)
    if fitted is None:
        raise ConfigError(f"{data_dir}: no calibration points to fit the torch call overhead on")
    return fitted


def fit_stack_efficiency(data_dir: Path,
                         predictor_for: Callable[[dict[tuple[str, str, str], float]], Any],
                         rounds: int = 3, min_runs: int = 3) -> dict[tuple[str, str, str], float]:
    """Fit of ``sim.calibration.STACK_EFFICIENCY`` on the calibration split only.

    Per (framework, GPU family or TPU generation, precision) with at least *min_runs* calibration
    runs, the factor on kernel time that makes the median ratio of predicted to measured step time
    1 over that group's calibration runs: start from 1 and rescale by the median ratio *rounds*
    times (communication does not scale with it). *predictor_for(table)* builds a predictor with
    that table. Groups with fewer runs are left out (they run at 1.0). Dense models only: a stack's
    efficiency is its dense kernels'; MoE and hybrid runs are scored on what it gives them.
    """
    from ..config import scenario_from_dict
    from .training import architecture_of

    mapped = [m for m in map_runs(data_dir) if m.supported and m.split == "calibration"
              and m.scenario is not None and architecture_of(m.scenario) == "dense"]
    keys: dict[str, tuple[str, str, str]] = {}
    for m in mapped:
        assert m.scenario is not None
        scn = scenario_from_dict(m.scenario)
        keys[m.id] = stack_key(scn.software, scn.cluster.chip, scn.training.precision)
    counts: dict[tuple[str, str, str], int] = {}
    for k in keys.values():
        counts[k] = counts.get(k, 0) + 1
    table = {k: 1.0 for k, n in counts.items() if n >= min_runs}
    for _ in range(rounds):
        predict = predictor_for(dict(table))
        ratios: dict[tuple[str, str, str], list[float]] = {k: [] for k in table}
        for m in mapped:
            if keys[m.id] in ratios:
                r = _score(m, predict)
                if r.error is None and r.predicted_step_s:
                    ratios[keys[m.id]].append(r.predicted_step_s / r.measured_step_s)
        for k, v in ratios.items():
            if v:
                table[k] *= float(sorted(v)[len(v) // 2])   # the upper middle ratio
    return {k: round(v, 3) for k, v in sorted(table.items())}


def fit_net_peer_us(data_dir: Path, kind: str, topologies: set[str],
                    predictor_for: Callable[[dict[str, tuple[float, float]]], Predictor]
                    ) -> tuple[float, float]:
    """Fit of ``sim.calibration.NET_PEER_US[kind]``: over the latency-regime points (<= 64 KiB)
    of the supported, non-anomalous calibration all-to-alls on *topologies*, the median of the
    measured time beyond the model's without a peer cost, per remote peer, for messages of at
    least ``NET_PEER_SMALL_B`` bytes a peer and for smaller ones; each rounded to 0.5 us.
    *predictor_for(table)* builds a predictor with that ``NET_PEER_US``."""
    from ..calibration import NET_PEER_SMALL_B
    from ..collectives import busbw_factor

    predict = predictor_for({})
    large: list[float] = []
    small: list[float] = []
    for meta in _load_runs(data_dir):
        if not (meta.split == "calibration" and meta.supported and not meta.anomalous
                and meta.topology in topologies and meta.op == "alltoall" and meta.nodes > 1):
            continue
        remote = meta.gpus - meta.gpus // meta.nodes
        factor = busbw_factor(meta.op, meta.gpus)
        for m in _load_measured(data_dir / meta.file):
            if m.size_bytes > LAT_MAX_BYTES or m.time_s is None:
                continue
            point = _score_point(meta, m, predict, factor)
            per_us = (m.time_s - point.predicted_time_s) / remote * 1e6
            (small if m.size_bytes / meta.gpus < NET_PEER_SMALL_B else large).append(per_us)
    if not large or not small:
        raise ConfigError(f"{data_dir}: no calibration all-to-all points to fit the {kind} peer cost on")
    big, little = median(large), median(small)
    assert big is not None and little is not None
    return round(big * 2) / 2, round(little * 2) / 2


def fit_dcn_layer_step_s(data_dir: Path, predictor_for: Callable[[], Any]) -> float:
    """Fit of ``sim.calibration.TPU_DCN_LAYER_STEP_S``: least squares on the relative step errors
    of the calibration split's multi-slice runs (TPU slices over the DCN), in seconds rounded to
    10 us. The term adds to the step and is linear in the constant, so each run's share of it is
    the difference of two predictions, with the constant at 0 and at 1 ms, each played by a fresh
    *predictor_for()* (the constant is restored after). Refitting it beside the stack
    efficiencies in one process, give the predictor the table explicitly: a default compute
    model keeps the table it was first built with (``sim.stages._compute_model``)."""
    from .. import calibration as cal
    from ..config import scenario_from_dict

    mapped = [m for m in map_runs(data_dir) if m.supported and m.split == "calibration"
              and m.scenario is not None and scenario_from_dict(m.scenario).cluster.pods > 1]
    saved = cal.TPU_DCN_LAYER_STEP_S
    played = []
    try:
        for value in (0.0, 1e-3):
            cal.TPU_DCN_LAYER_STEP_S = value
            predict = predictor_for()
            played.append([_score(m, predict) for m in mapped])
    finally:
        cal.TPU_DCN_LAYER_STEP_S = saved
    num = den = 0.0
    for base, unit in zip(*played):
        if base.error is not None or not base.predicted_step_s or not unit.predicted_step_s:
            continue
        share = (unit.predicted_step_s - base.predicted_step_s) / 1e-3 / base.measured_step_s
        num += share * (base.measured_step_s - base.predicted_step_s) / base.measured_step_s
        den += share * share
    if den <= 0:
        raise ConfigError(f"{data_dir}: no calibration run on several TPU slices to fit the DCN "
                          "reduction's per-layer step on")
    return round(max(0.0, num / den), 5)
