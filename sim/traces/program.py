"""A measured trace as a per-worker program: the ops of one step of every worker, their
dependencies as Megatron's 1F1B (interleaved when vpp > 1) pipeline schedule has them, and the
measured time of every op in every step.

Every (data-parallel rank, step) runs the same program, so the program is a *template*: op ``k``
is (stage, optype, seq); its measured times form arrays of shape (ops, steps, dp ranks).

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

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from .table import OpTable, TraceMeta

__all__ = ["COMM_OPTYPES", "KNOWN_OPTYPES", "Group", "Program", "build_program"]

FWD, BWD = "forward-compute", "backward-compute"
P2P = ("forward-send", "forward-recv", "backward-send", "backward-recv")
AG, RS, SEP = "params-all-gather", "grads-reduce-scatter", "separate-grads-all-reduce"
LN, EMB, CLIP, OPT, GC = ("layernorm-grads-all-reduce", "embedding-grads-all-reduce",
                          "optimizer-clip-main-grad", "optimizer", "gc")
KNOWN_OPTYPES = frozenset({FWD, BWD, *P2P, AG, RS, SEP, LN, EMB, CLIP, OPT, GC})
# Communication op types: their "typical" duration is a median (the artifact's
# analysis_util.simulation_analysis_reduce_dim_v4); compute-like types take a mean.
COMM_OPTYPES = frozenset({*P2P, AG, RS, SEP, LN, EMB, CLIP})
_EPS_S = 5e-5                       # clock tolerance when telling launched p2p ops from no-ops


@dataclass(frozen=True, slots=True)
class Group:
    """Ops that meet: each ends at the group's latest start (over dp ranks too if ``across_dp``)
    plus its own transfer time."""

    members: tuple[int, ...]
    across_dp: bool


@dataclass(frozen=True)
class Program:
    """The template program and the measured times of every op of the complete steps.

    ``own_s``: per op the time it takes once it can run (compute: its duration; a group op: its
    transfer time); ``start_s``: measured starts relative to the step's first op; ``end_s``:
    measured ends (same origin). Arrays are (ops, steps, dp ranks).
    """

    meta: TraceMeta
    stage: np.ndarray
    optype: np.ndarray
    seq: np.ndarray
    rank: np.ndarray                # (stage, dp) -> global rank
    deps: tuple[tuple[int, ...], ...]
    group_of: np.ndarray            # op -> group index, -1 for an op that meets no one
    groups: tuple[Group, ...]
    order: tuple[int, ...]          # nodes in dependency order: op k, or len(ops) + group g
    steps: np.ndarray
    own_s: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    skipped: tuple[str, ...] = field(default=())   # partial steps left out, each with the reason

    @property
    def n_ops(self) -> int:
        return int(self.stage.shape[0])

    @property
    def n_dp(self) -> int:
        return int(self.own_s.shape[2])

    def measured_step_s(self) -> np.ndarray:
        """Per step: the last end minus the first start over all workers (the trace's step time)."""
        return self.end_s.max(axis=(0, 2)) - self.start_s.min(axis=(0, 2))


def build_program(table: OpTable, meta: TraceMeta) -> Program:
    """The template program of *table*; steps with missing or extra ops are skipped (listed in
    ``Program.skipped``); ConfigError when no complete step is left or the ops cannot be ordered."""
    src = table.source
    if unknown := sorted(set(table.optype.tolist()) - KNOWN_OPTYPES):
        raise ConfigError(f"{src}: unknown op type(s) {unknown}; known: {sorted(KNOWN_OPTYPES)}")
    names, opcode = np.unique(table.optype, return_inverse=True)
    nseq = int(table.seq.max()) + 2
    if table.seq.min() < 0:
        i = int(np.argmin(table.seq))
        raise ConfigError(f"{src}: rank {table.rank[i]} step {table.step[i]} op {table.optype[i]}: "
                          f"seq_id {table.seq[i]} < 0")
    code = (table.stage * len(names) + opcode) * nseq + table.seq
    dps = sorted(set(table.dp.tolist()))
    n_dp = len(dps)

    # --- complete steps: every worker records the op set most of its stage's (step, dp) record
    order = np.lexsort((code, table.dp, table.stage, table.step))
    wkey = np.stack([table.step, table.stage, table.dp], axis=1)[order]
    cuts = np.flatnonzero(np.any(np.diff(wkey, axis=0) != 0, axis=1)) + 1
    bounds = np.concatenate([[0], cuts, [len(order)]])
    sigs: dict[tuple[int, int, int], tuple[int, ...]] = {}
    for a, b in zip(bounds[:-1], bounds[1:]):
        step, stage, dp = (int(x) for x in wkey[a])
        sig = tuple(code[order[a:b]].tolist())
        if len(set(sig)) != len(sig):
            dup = Counter(sig).most_common(1)[0][0]
            i = order[a + sig.index(dup)]
            raise ConfigError(f"{src}: rank {table.rank[i]} step {step}: op {table.optype[i]} #{table.seq[i]} "
                              "is recorded more than once")
        sigs[(step, stage, dp)] = sig
    expected: dict[int, tuple[int, ...]] = {}
    for s in range(meta.pp):
        counts = Counter(sig for (_, st, _), sig in sigs.items() if st == s)
        expected[s] = max(counts.items(), key=lambda kv: (kv[1], len(kv[0])))[0]
    skipped: list[str] = []
    steps: list[int] = []
    for step in sorted(set(table.step.tolist())):
        why = _partial(step, sigs, expected, dps, meta.pp, names, nseq)
        if why:
            skipped.append(f"step {step}: {why}")
        else:
            steps.append(step)
    if not steps:
        raise ConfigError(f"{src}: no complete step: {skipped[0] if skipped else 'no steps'} "
                          f"({len(skipped)} partial step(s))")

    # --- template ops
    tcode = np.array(sorted(c for s in range(meta.pp) for c in expected[s]), dtype=np.int64)
    K = len(tcode)
    t_seq = tcode % nseq
    t_opc = (tcode // nseq) % len(names)
    t_stage = tcode // nseq // len(names)
    t_type = names[t_opc]

    # --- measured arrays over the complete steps
    S = len(steps)
    keep = np.isin(table.step, steps)
    k_of = np.searchsorted(tcode, code[keep])
    s_of = np.searchsorted(np.array(steps), table.step[keep])
    d_of = np.searchsorted(np.array(dps), table.dp[keep])
    start = np.full((K, S, n_dp), np.nan)
    dur = np.full((K, S, n_dp), np.nan)
    start[k_of, s_of, d_of] = table.start_s[keep]
    dur[k_of, s_of, d_of] = table.dur_s[keep]
    assert not np.isnan(start).any() and not np.isnan(dur).any(), "complete steps have every op"
    start -= start.min(axis=(0, 2), keepdims=True)
    end = start + dur
    rank = np.zeros((meta.pp, n_dp), dtype=np.int64)
    rank[table.stage[keep], d_of] = table.rank[keep]
    chunk = np.zeros(K, dtype=np.int64)
    gchunk = np.zeros(K, dtype=np.int64)
    first = np.flatnonzero(keep & (table.step == steps[0]) & (table.dp == dps[0]))
    chunk[k_of[np.searchsorted(np.flatnonzero(keep), first)]] = table.chunk[first]
    gchunk[k_of[np.searchsorted(np.flatnonzero(keep), first)]] = table.gchunk[first]

    # --- dependencies and groups, from the reference worker times (first complete step, dp 0)
    ref_start, ref_end = start[:, 0, 0], end[:, 0, 0]
    deps: list[set[int]] = [set() for _ in range(K)]
    by = _Index(t_stage, t_type, t_seq, ref_start)
    use_dp = n_dp * meta.dsp > 1            # the artifact's test: dp x dsp > 1
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
    node_order = _topological(src, dep_t, group_of, groups, t_stage, t_type, t_seq)

    own = dur.copy()
    for grp in groups:
        m = list(grp.members)
        gstart = start[m].max(axis=0)
        if grp.across_dp:
            gstart = gstart.max(axis=1, keepdims=True)
        own[m] = np.maximum(end[m] - gstart, 0.0)
    return Program(meta=meta, stage=t_stage, optype=t_type, seq=t_seq, rank=rank, deps=dep_t,
                   group_of=group_of, groups=tuple(groups), order=node_order, steps=np.array(steps),
                   own_s=own, start_s=start, end_s=end, skipped=tuple(skipped))


def _partial(step: int, sigs: dict[tuple[int, int, int], tuple[int, ...]], expected: dict[int, tuple[int, ...]],
             dps: list[int], pp: int, names: np.ndarray, nseq: int) -> str:
    """Why *step* is not complete ('' if it is): the first worker with missing or extra ops."""
    for s in range(pp):
        for d in dps:
            sig = sigs.get((step, s, d))
            if sig is None:
                return f"dp_rank {d}, stage {s} recorded no ops"
            if sig != expected[s]:
                have, want = set(sig), set(expected[s])
                miss, extra = sorted(want - have), sorted(have - want)
                def show(c: int) -> str:
                    return f"{names[(c // nseq) % len(names)]} #{c % nseq}"

                parts = []
                if miss:
                    parts.append(f"missing {', '.join(show(c) for c in miss[:3])}"
                                 f"{' ...' if len(miss) > 3 else ''} ({len(miss)} op(s))")
                if extra:
                    parts.append(f"extra {', '.join(show(c) for c in extra[:3])} ({len(extra)} op(s))")
                return f"dp_rank {d}, stage {s}: " + "; ".join(parts)
    return ""


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
    comp = sorted(by(s, FWD, BWD), key=lambda k: (ref_start[k], k))
    if not comp:
        raise ConfigError(f"{src}: stage {s} records no forward/backward compute")
    _chain(deps, comp)
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
    bwd_pos = next((i for i, k in enumerate(comp) if k in set(by(s, BWD))), 0)
    if bwd_pos >= 2:
        for optype in ("backward-recv", "backward-send"):
            if ops := by(s, optype):
                deps[ops[0]].add(comp[bwd_pos - 2])

    # data parallel and the step's tail
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
