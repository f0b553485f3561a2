"""Collectives as link loads: the ``Traffic`` of every group of a class running one collective.

The engine plays a training step's communication on shared links (``sim.network.shared``); what
it needs from a collective is its time alone (``CollectiveModel.time``: algorithm, protocol,
latency, exactly as for one isolated call) and the bytes it moves over each link. Those bytes come
from the same algorithm stages the time comes from, routed on the graph, summed over every group
that runs the collective at the same moment: one solve per (operation, algorithm, groups), scaled
by the size (every flow's bytes are proportional to it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..network.fluid import unique_links
from ..network.traffic import Traffic
from . import CollectiveModel, merge_phases
from .algorithms import BY_NAME, build

__all__ = ["collective_traffic", "p2p_traffic"]

_REF_BYTES = 1e6


def collective_traffic(net: CollectiveModel, op: str, size_bytes: int,
                       groups: Sequence[Sequence[int]], *, seconds: float | None = None,
                       concurrent: bool = False, label: str = "") -> Traffic:
    """*op* on every group of *groups* at once, with the first group's time alone (or, with
    *concurrent*, the time of all of them played together: ``time_concurrent``). *seconds*
    replaces the duration (the part left exposed when compute hides the rest)."""
    size = max(1, int(size_bytes))
    first = (net.time_concurrent(op, size, groups) if concurrent and len(groups) > 1
             else net.time(op, size, groups[0]))
    secs = first.time_s if seconds is None else seconds
    if first.ranks <= 1 or first.time_s <= 0 or secs <= 0:
        return Traffic(max(0.0, secs), np.zeros(0, np.int64), np.zeros(0), len(groups), label,
                       max(0.0, secs))
    ids, per_byte = _link_bytes(net, op, first.algo, groups)
    return Traffic.of(secs, ids, per_byte * size, first.time_s, first.latency_s, len(groups), label)


def p2p_traffic(net: CollectiveModel, pairs: Sequence[tuple[int, int]] | np.ndarray, nbytes: int,
                seconds: float, latency_s: float = 0.0, label: str = "pp") -> Traffic:
    """One-way transfers of *nbytes* from each pair's first device to its second (pipeline
    activations or gradients; *pairs* may be an (n, 2) array), taking *seconds* alone
    (*latency_s* of them latency)."""
    if seconds <= 0 or not len(pairs):
        return Traffic(max(0.0, seconds), np.zeros(0, np.int64), np.zeros(0), len(pairs), label,
                       max(0.0, seconds))
    # PERF: the pairs as one (n, 2) array, keyed by its bytes (a stage's 6,144 pairs at 98,304
    # GPUs, benchmarks/release.py run-98k)
    ends = np.asarray(pairs, np.int64).reshape(-1, 2)
    key = ("p2p", ends.tobytes())
    hit = net.link_bytes_cache.get(key)
    if hit is None:
        src, dst = np.ascontiguousarray(ends[:, 0]), np.ascontiguousarray(ends[:, 1])
        rows, _, vals = net.router.routes_coo(src, dst)
        hit = _per_link(rows, vals, len(net.links))
        net.link_bytes_cache[key] = hit
    ids, per_byte = hit
    return Traffic.of(seconds, ids, per_byte * max(1, int(nbytes)), seconds, latency_s, len(pairs),
                      label)


def _link_bytes(net: CollectiveModel, op: str, algo: str,
                groups: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(link ids, bytes per byte of size) of *algo* run by all *groups*; cached."""
    key = (op, algo, _groups_key(groups))
    hit = net.link_bytes_cache.get(key)
    if hit is not None:
        return hit
    phases = BY_NAME[algo].bulk_phases(op, groups, _REF_BYTES, net.topo)
    if phases is None:
        built = [build(algo, op, net.group_info(g), _REF_BYTES, net.topo) for g in groups]
        shape = [tuple((p.name, p.steps) for p in stage) for stage in built[0]]
        if all([tuple((p.name, p.steps) for p in stage) for stage in b] == shape for b in built):
            # PERF: the same phase of every group routed in one bulk call
            phases = [merge_phases([b[j][k] for b in built])
                      for j, stage in enumerate(built[0]) for k in range(len(stage))]
        else:
            phases = [p for b in built for stage in b for p in stage]
    links: list[np.ndarray] = [np.zeros(0, np.int64)]
    loads: list[np.ndarray] = [np.zeros(0)]
    for phase in phases:
        ids, nbytes = net.phase_link_bytes(phase)
        links.append(ids)
        loads.append(nbytes * phase.steps)
    # each phase's links are distinct, so per link the phases add up in phase order from 0, as
    # ``total[links] += ...`` into a table of every link would (PERF: 1.3 M links at 98,304 GPUs)
    ids, total = _per_link(np.concatenate(links), np.concatenate(loads), len(net.links))
    hit = (ids, total / _REF_BYTES)
    if len(net.link_bytes_cache) < 10_000:
        net.link_bytes_cache[key] = hit
    return hit


def _groups_key(groups: Sequence[Sequence[int]]) -> object:
    """A hashable key of *groups*: their devices' bytes and shape when they are all one size.

    PERF: one array instead of a tuple of tuples of ints (a chip-wide FSDP layout: 4,096 groups
    a call; benchmarks/release.py run-tpu-v4)."""
    sizes = {len(g) for g in groups}
    if len(sizes) == 1:
        a = np.asarray(groups, np.int64)
        return a.shape, a.tobytes()
    return tuple(tuple(map(int, g)) for g in groups)


def _per_link(rows: np.ndarray, vals: np.ndarray, n_links: int) -> tuple[np.ndarray, np.ndarray]:
    """(links used, the fraction of one byte each carries) of routes given as COO rows: the
    entries of each link summed in their order (``np.bincount``), links with a total > 0.

    PERF: summed over the links the rows name (``unique_links``), not a table of all of them
    (1.3 M links at 98,304 GPUs); the same sums, in the same order."""
    if not len(rows):
        return np.zeros(0, np.int64), np.zeros(0)
    links, at = unique_links(np.asarray(rows, np.int64), n_links)
    total = np.bincount(at.reshape(-1), weights=vals, minlength=len(links))
    keep = total > 0
    return links[keep], total[keep]
