"""NCCL's tuner: which algorithms and protocols a call may use, what each costs, the fastest.

The choice, in one place, asking the algorithms' records (``sim.collectives.algorithms``):
``offered`` lists the algorithms the hardware and the library offer for an operation on a group,
``choices`` the (algorithm, protocol) pairs weighed for a call (a forced algorithm checked against
what is offered, refused with its record's reason) and ``fastest`` the pick: the smallest cost by
NCCL's own model, the way NCCL's tuner picks. ``call_time_s`` composes that cost model's part of a
GPU call's time (latency per step, protocol overheads, bandwidth ceilings) from the algorithm's
record; the flow model in ``sim.collectives`` gives the rest.

Three size mechanisms shape the curve between the latency floor and the bandwidth plateau, all
NCCL's own: the tuner's choice of protocol (LL, LL128, Simple: latency against bandwidth) and
algorithm; the channels a call runs on (NCCL drops channels while a call has too few bytes per
thread, ``Algorithm.channels_used``; bandwidth scales with them); and NVLS's chunk size, which
NCCL shrinks for smaller calls, each chunk paying a fixed synchronisation cost
(``sim.collectives.sharp``), and NVLSTree's pipeline, which fills one chunk per network stage
before it streams. Trees lose bandwidth at medium sizes by NCCL's treeCorrectionFactor or, where
the tree is deep, by more (``sim.collectives.tree``). The tuner itself prices calls on all
channels, with NVLS's fixed efficiency and its tree correction, so it can pick what is not
fastest, as NCCL does. The constants and their sources (NVIDIA/nccl ``src/graph/tuning.cc`` @
5067397c2676d5aed50042fc39e5c8ee96eb0027, ``src/enqueue.cc``) are in the records' modules.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, TypeVar

from ..errors import ConfigError
from .algorithm import REFERENCE_WIRES, Algorithm, Call, Wires
from .algorithms import ALGORITHMS, BY_NAME, REGISTRY
from .platform import Platform
from .plugin_tuner import plugin_choice
from .stages import GroupInfo

__all__ = ["busbw_factor", "call_time_s", "choices", "fastest", "offered", "plugin_pick"]


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor (NVIDIA/nccl-tests doc/PERFORMANCE.md)."""
    if n <= 1:
        return 1.0
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def offered(op: str, gi: GroupInfo, hw: Platform) -> list[str]:
    """Algorithms the hardware and the library offer for *op* on the group *gi*, in the order the
    tuner weighs them (``REGISTRY``'s; on TPU slices the ring last)."""
    algos = [a for a in _CANDIDATES.get((op, hw.tpu), ()) if a.offers(op, gi, hw)]
    if hw.tpu:
        algos.sort(key=lambda a: a.tpu_fallback)
    return [a.name for a in algos]


# PERF: the records that implement each operation on each platform kind, in REGISTRY's order
# (what ``offered`` asks, once per call: benchmarks/test_bench_collectives.py)
_CANDIDATES: Mapping[tuple[str, bool], tuple[Algorithm, ...]] = types.MappingProxyType({
    (op, tpu): tuple(a for a in REGISTRY if op in a.ops and (a.on_tpu if tpu else a.on_gpu))
    for op in {op for a in REGISTRY for op in a.ops} for tpu in (False, True)})


def choices(op: str, gi: GroupInfo, hw: Platform, algo: str | None = None) -> list[tuple[str, str]]:
    """The (algorithm, protocol) pairs the tuner weighs for one call of *op* on *gi*: those of the
    forced *algo* (an error if it is unknown or not offered here) or of every offered algorithm
    but those NCCL's tuner never picks on GPUs (``Algorithm.forced_only_on_gpu``)."""
    avail = offered(op, gi, hw)
    # These two name the CLI flag, not the field: tests/test_collectives.py pins their text.
    if algo is not None:
        if algo not in ALGORITHMS:
            raise ConfigError(f"--algo: unknown algorithm {algo!r}; valid: {', '.join(ALGORITHMS)}")
        if algo not in avail:
            raise ConfigError(f"--algo {algo}: {BY_NAME[algo].refusal(op, hw)}; "
                              f"available for {op}: {', '.join(avail)}")
        algos = [algo]
    else:
        algos = [a for a in avail if hw.tpu or not BY_NAME[a].forced_only_on_gpu]
    pairs = [(a, p) for a in algos for p in BY_NAME[a].protocols(hw.tpu)]
    if gi.nodes > 1 and not hw.tpu:
        # across nodes only what the net plugin and the GPU-NIC path allow (fabric.net_protocols)
        pairs = [(a, p) for a, p in pairs if p in hw.net_protocols]
    return pairs


class _Timed(Protocol):
    @property
    def time_s(self) -> float: ...


R = TypeVar("R", bound=_Timed)


def plugin_pick(op: str, gi: GroupInfo, hw: Platform, size: int) -> tuple[str, str] | None:
    """The (algorithm, protocol) the net plugin's tuner forces on this call, if any: only with a
    tuner table for the fabric, across nodes, and on NCCL 2.19 or later (tuner plugins' first
    release)."""
    if hw.tuner_plugin is None or gi.nodes < 2 or not hw.since(2, 19):
        return None
    return plugin_choice(hw.tuner_plugin, op, size, gi.n, gi.nodes)


def fastest(predictions: Iterable[R], cost: Callable[[R], float] | None = None) -> R:
    """The prediction with the smallest *cost* (default its ``time_s``; the first of equal ones)."""
    best: R | None = None
    best_cost = math.inf
    for r in predictions:
        c = r.time_s if cost is None else cost(r)
        if best is None or c < best_cost:
            best, best_cost = r, c
    assert best is not None, "no algorithm to choose from"
    return best


def call_time_s(algo: str, call: Call, hw: Platform, line_s: float, wires: Wires = REFERENCE_WIRES,
                net_Bps: float = 0.0, nvls_s: float | None = None) -> tuple[float, float, float]:
    """(latency, transfer, tuner) seconds of one GPU call of *algo* (``Call``: operation, protocol,
    bytes, ranks, nodes) on the platform *hw*.

    *line_s* is the transfer time at the links' rates (the flow model's); the protocol's share of
    the bandwidth (``Algorithm.protocol_factor``), NVLS's efficiency (``switch_times_s``; *nvls_s*:
    the transfer time of the call's NVLink SHARP traffic alone, None where it is all of *line_s*)
    and NCCL's bus-bandwidth ceilings (``busbw_cap_GBps``, over nccl-tests' busbw / algbw) stretch
    it. Latency is the algorithm's own (``latency_s``) with the topology's *wires*, plus what an
    LL128 call across nodes waits on the proxies (``proxy_wait_s``).

    What the call takes (latency + transfer) and what NCCL's tuner believes it takes (*tuner*, the
    cost it picks algorithm and protocol by) differ the way they do in NCCL: the tuner prices every
    call on all channels, NVLS at its fixed nvlsEfficiency and trees with its treeCorrectionFactor
    (``ncclTopoGetAlgoTime``; ``tuner_correction``); the call then runs on the channels its size
    earns (``channels_used``, ``slowdown``), on NVLS with the chunks its size gets, and fills its
    pipeline first where it has one (``pipeline_fill_s``; *net_Bps*: one GPU's rate into the
    scale-out network, 0 for none).
    """
    a = BY_NAME[algo]
    base = line_s / a.protocol_factor(call.proto, call.nodes)
    tuned, transfer = a.switch_times_s(base, nvls_s, call, hw)
    cap = a.busbw_cap_GBps(call.proto, hw.arch, call.nodes, hw.net_channels)
    floor = 0.0
    # where the ceiling bounds the whole call (ring LL), a call on few channels still meets it
    whole_call = a.ceiling_whole_call(call.proto)
    if math.isfinite(cap) and call.size > 0:
        floor = busbw_factor(call.op, call.ranks) * call.size / (cap * 1e9)   # NCCL's ceiling
        tuned = max(tuned, floor)
        if not whole_call:
            transfer = max(transfer, floor)
    used, full = a.channels_used(call.proto, call.size, call.ranks, call.nodes, hw.net_channels)
    tuned /= a.tuner_correction(call)
    transfer *= a.slowdown(call, used, full)
    if whole_call:
        transfer = max(transfer, floor)
    transfer += a.pipeline_fill_s(call, net_Bps)
    lat = a.latency_s(call, wires, net_us=hw.net_us, exposed_net=hw.since(2, 23),
                      net_channels=hw.net_channels)
    wait = a.proxy_wait_s(call, hw.proxy_step_s, hw.net_channels, hw.net_nics)
    wait += a.peer_cost_s(call, hw.peer_us)
    return lat + wait, transfer, lat + tuned
