"""The dependencies of a measured trace's template ops: Megatron's 1F1B (interleaved when vpp > 1)
pipeline schedule, and the groups of ops that meet (``sim.traces.program`` builds the template).

The dependency model follows the one of the paper's artifact (Lin et al., OSDI 2025;
ByteDance-Seed/StragglerAnalysis, ``analyzer/dependency_model.py``), read from its source:
- a stage's forward and backward computes run one after another in their recorded (1F1B) order;
- PP send/recv: the i-th forward-send of stage s follows the i-th forward-compute and meets the
  i-th forward-recv of stage s+1 (backward: s -> s-1); a recv gates its compute and is posted
  after the previous compute of the same direction; each of the four p2p kinds is a stream (its
  ops in order); the first backward send/recv is posted after the compute two before the first
  backward compute (1F1B's last warm-up forward). Sends/recvs that the profiler records but
  that were never launched (a recv starting after the last compute, a send ending before the
  first compute; with vpp > 1 those to/from past the first/last model chunk) meet no one;
- data parallel: params-all-gather and grads-reduce-scatter run in order on their stream; a
  chunk's first forward waits for its params-all-gather; the reduce-scatters run after the last
  backward (after each chunk's last backward when the job overlaps them, i.e. records a
  separate-grads-all-reduce); then layernorm/embedding(/separate) grads all-reduces, the
  optimizer's clip-main-grad (a global norm: all stages and dp ranks meet) and the optimizer;
- collectives: an op of a group ends at (the latest start of its group) + its own transfer time,
  where the group is the p2p pair, the embedding all-reduce of the first and last stages, one
  DP collective over the dp ranks, or the clip over everything. The measured transfer time of a
  group op is its end minus its group's latest start (the wait excluded), as the artifact has it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .table import TraceMeta

__all__ = ["AG", "BWD", "CLIP", "EMB", "FWD", "GC", "LN", "OPT", "P2P", "RS", "SEP", "Group",
           "dependencies"]

FWD, BWD = "forward-compute", "backward-compute"
P2P = ("forward-send", "forward-recv", "backward-send", "backward-recv")
AG, RS, SEP = "params-all-gather", "grads-reduce-scatter", "separate-grads-all-reduce"
LN, EMB, CLIP, OPT, GC = ("layernorm-grads-all-reduce", "embedding-grads-all-reduce",
                          "optimizer-clip-main-grad", "optimizer", "gc")
_EPS_S = 5e-5                       # clock tolerance when telling launched p2p ops from no-ops


@dataclass(frozen=True, slots=True)
class Group:
    """Ops that meet: each ends at the group's latest start (over dp ranks too if ``across_dp``)
    plus its own transfer time."""

    members: tuple[int, ...]
    across_dp: bool


def dependencies(src: str, meta: TraceMeta, t_stage: np.ndarray, t_type: np.ndarray, t_seq: np.ndarray,
                 start: np.ndarray, end: np.ndarray, chunk: np.ndarray, gchunk: np.ndarray
                 ) -> tuple[tuple[tuple[int, ...], ...], list[Group], np.ndarray, tuple[int, ...]]:
    """Each op's dependencies, the groups, each op's group (-1: none) and the nodes in dependency
    order, from the reference worker's times (first complete step, dp 0)."""
    K = len(t_stage)
    ref_start, ref_end = start[:, 0, 0], end[:, 0, 0]
    deps: list[set[int]] = [set() for _ in range(K)]
    by = _Index(t_stage, t_type, t_seq, ref_start)
    use_dp = start.shape[2] * meta.dsp > 1           # the artifact's test: dp x dsp > 1
    peers: dict[tuple[int, str], list[int]] = {}
    for s in range(meta.pp):
        _stage_deps(src, s, meta, by, deps, ref_start, ref_end, gchunk, peers, use_dp, chunk)
    groups = _groups(src, meta, by, peers)
    group_of = np.full(K, -1, dtype=np.int64)
    for g, grp in enumerate(groups):
        for k in grp.members:
            assert group_of[k] == -1, ("op in two groups", k)
            group_of[k] = g
    dep_t = tuple(tuple(sorted(d)) for d in deps)
    return dep_t, groups, group_of, _topological(src, dep_t, group_of, groups, t_stage, t_type, t_seq)


class _Index:
    """Template ops of one stage and type, in recorded order (reference start, then seq)."""

    def __init__(self, stage: np.ndarray, optype: np.ndarray, seq: np.ndarray, ref_start: np.ndarray) -> None:
        self._ops: dict[tuple[int, str], list[int]] = {}
        for k in np.lexsort((seq, ref_start)):
            self._ops.setdefault((int(stage[k]), str(optype[k])), []).append(int(k))

    def __call__(self, stage: int, *optypes: str) -> list[int]:
        out: list[int] = []
        for t in optypes:
            out += self._ops.get((stage, t), [])
        return out


def _chain(deps: list[set[int]], ops: list[int], after: list[int] | None = None) -> None:
    last = list(after or [])
    for k in ops:
        deps[k].update(last)
        last = [k]


def _stage_deps(src: str, s: int, meta: TraceMeta, by: _Index, deps: list[set[int]], ref_start: np.ndarray,
                ref_end: np.ndarray, gchunk: np.ndarray, peers: dict[tuple[int, str], list[int]],
                use_dp: bool, chunk: np.ndarray) -> None:
    """Adds stage *s*'s dependencies to *deps* and its launched p2p ops, in order, to *peers*."""
    comp = sorted(by(s, FWD, BWD), key=lambda k: (ref_start[k], k))
    if not comp:
        raise ConfigError(f"{src}: stage {s} records no forward/backward compute")
    _chain(deps, comp)
    _p2p_deps(src, s, meta, by, deps, ref_start, ref_end, gchunk, peers)
    bwd_pos = next((i for i, k in enumerate(comp) if k in set(by(s, BWD))), 0)
    if bwd_pos >= 2:
        for optype in ("backward-recv", "backward-send"):
            if ops := by(s, optype):
                deps[ops[0]].add(comp[bwd_pos - 2])
    _tail_deps(s, by, deps, ref_start, ref_end, use_dp, chunk, comp)


def _p2p_deps(src: str, s: int, meta: TraceMeta, by: _Index, deps: list[set[int]], ref_start: np.ndarray,
              ref_end: np.ndarray, gchunk: np.ndarray, peers: dict[tuple[int, str], list[int]]) -> None:
    """Adds stage *s*'s p2p streams and send/recv-to-compute pairs to *deps*, its launched ones to *peers*."""
    n_chunks = meta.vpp * meta.pp
    for direction, ctype in (("forward", FWD), ("backward", BWD)):
        comps = by(s, ctype)
        if not comps:
            continue
        first_end = min(ref_end[k] for k in comps)
        last_start = max(ref_start[k] for k in comps)
        for sr in ("send", "recv"):
            optype = f"{direction}-{sr}"
            ops = by(s, optype)
            _chain(deps, ops)                                   # one stream per p2p kind
            valid = [k for k in ops if (ref_start[k] <= last_start + _EPS_S if sr == "recv"
                                        else ref_end[k] >= first_end - _EPS_S)]
            cid = 0
            if ops and len(valid) != len(comps):
                edge = s in (0, meta.pp - 1)
                if not edge or len(valid) + 1 != len(comps):
                    raise ConfigError(f"{src}: stage {s} records {len(valid)} launched {optype} op(s) for "
                                      f"{len(comps)} {ctype} op(s); a pipeline stage pairs them one to one")
                if sr == "recv":
                    cid = 1                 # the first stage's first forward-recv is not recorded
            out = peers.setdefault((s, optype), [])
            for k in valid:
                if cid >= len(comps):
                    raise ConfigError(f"{src}: stage {s}: more {optype} ops than {ctype} ops")
                c = comps[cid]
                delta = 1 if (direction, sr) in (("forward", "send"), ("backward", "recv")) else -1
                if sr == "send":
                    deps[k].add(c)
                else:
                    deps[c].add(k)
                    if cid > 0:
                        deps[k].add(comps[cid - 1])
                if 0 <= gchunk[c] + delta < n_chunks:
                    out.append(k)
                cid += 1


def _tail_deps(s: int, by: _Index, deps: list[set[int]], ref_start: np.ndarray, ref_end: np.ndarray,
               use_dp: bool, chunk: np.ndarray, comp: list[int]) -> None:
    """Adds stage *s*'s data-parallel and step-tail dependencies to *deps* (*comp*: its computes in order)."""
    dp_ops = sorted(by(s, AG, RS), key=lambda k: (ref_start[k], k))
    _chain(deps, dp_ops)
    ovlp = bool(by(s, SEP))
    fwds, bwds = by(s, FWD), by(s, BWD)
    if use_dp:
        done: set[int] = set()
        for k in sorted(by(s, AG), key=lambda k: -k):       # the last all-gather of each chunk
            if chunk[k] in done:
                continue
            done.add(int(chunk[k]))
            mine = [c for c in fwds if chunk[c] == chunk[k]]
            if mine:
                deps[min(mine, key=lambda c: ref_start[c])].add(k)
        if ovlp:
            done = set()
            for k in by(s, RS):
                if chunk[k] in done:
                    continue
                done.add(int(chunk[k]))
                mine = [c for c in bwds if chunk[c] == chunk[k]]
                if mine:
                    deps[k].add(max(mine, key=lambda c: ref_end[c]))
    last_comp = max(comp, key=lambda k: (ref_end[k], k))
    gc = by(s, GC)
    _chain(deps, gc, [last_comp])
    anchor = gc[-1:] or [last_comp]
    rs = by(s, RS)
    if not use_dp:
        _chain(deps, by(s, LN, EMB, CLIP, OPT), anchor)
    elif ovlp:
        _chain(deps, by(s, LN, EMB, SEP, CLIP, OPT), rs[-1:] + anchor)
    else:
        _chain(deps, by(s, LN, EMB) + rs + by(s, CLIP, OPT), anchor)


def _groups(src: str, meta: TraceMeta, by: _Index, peers: dict[tuple[int, str], list[int]]) -> list[Group]:
    pp = meta.pp
    out: list[Group] = []
    for s in range(pp):
        for send, recv, to in (("forward-send", "forward-recv", 1), ("backward-send", "backward-recv", -1)):
            a, b = peers.get((s, send), []), peers.get(((s + to) % pp, recv), [])
            if len(a) != len(b):
                raise ConfigError(f"{src}: stage {s} sends {len(a)} {send} op(s) but stage {(s + to) % pp} "
                                  f"receives {len(b)}; a pipeline's sends and receives pair one to one")
            out += [Group((x, y), across_dp=False) for x, y in zip(a, b)]
    for s in range(pp):
        out += [Group((k,), across_dp=True) for k in by(s, AG, RS, SEP)]
    first, last = by(0, EMB), by(pp - 1, EMB)
    if pp > 1 and first and last:
        if len(first) != len(last):
            raise ConfigError(f"{src}: embedding-grads-all-reduce: stage 0 records {len(first)}, stage {pp - 1} "
                              f"{len(last)}; the first and last stages reduce together")
        out += [Group((x, y), across_dp=False) for x, y in zip(first, last)]
    clips = [by(s, CLIP) for s in range(pp)]
    for j in range(max(len(c) for c in clips)):
        out.append(Group(tuple(c[j] for c in clips if j < len(c)), across_dp=True))
    return out


def _topological(src: str, deps: tuple[tuple[int, ...], ...], group_of: np.ndarray, groups: list[Group],
                 stage: np.ndarray, optype: np.ndarray, seq: np.ndarray) -> tuple[int, ...]:
    """Nodes (op k, or K + group g) in an order that runs every dependency first (Kahn's
    algorithm, lowest node first for a stable result); a cycle is an inconsistent trace."""
    import heapq

    K = len(deps)
    node = [K + int(group_of[k]) if group_of[k] >= 0 else k for k in range(K)]
    n_nodes = K + len(groups)
    succ: list[set[int]] = [set() for _ in range(n_nodes)]
    indeg = [0] * n_nodes
    for k, ds in enumerate(deps):
        for d in ds:
            a, b = node[d], node[k]
            if a != b and b not in succ[a]:
                succ[a].add(b)
                indeg[b] += 1
    live = set(node)
    heap = [n for n in live if indeg[n] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        n = heapq.heappop(heap)
        out.append(n)
        for m in sorted(succ[n]):
            indeg[m] -= 1
            if indeg[m] == 0:
                heapq.heappush(heap, m)
    if len(out) != len(live):
        stuck = sorted(set(live) - set(out))
        ks = [k for k in range(K) if node[k] in stuck][:3]
        names = ", ".join(f"stage {stage[k]} {optype[k]} #{seq[k]}" for k in ks)
        raise ConfigError(f"{src}: the recorded op order cannot be a 1F1B schedule (a dependency cycle "
                          f"through {names}); check the trace's seq_id and start_ts")
    return tuple(out)
