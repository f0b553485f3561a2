"""A measured trace as a per-worker program: the ops of one step of every worker, their
dependencies as Megatron's 1F1B (interleaved when vpp > 1) pipeline schedule has them, and the
measured time of every op in every step.

Every (data-parallel rank, step) runs the same program, so the program is a *template*: op ``k``
is (stage, optype, seq); its measured times form arrays of shape (ops, steps, dp ranks).

The dependencies are the artifact's model of a 1F1B schedule (Lin et al., OSDI 2025;
``sim.traces.dependencies`` lists them); the measured transfer time of a group op is its end minus
its group's latest start (the wait excluded), as the artifact has it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from .dependencies import AG, BWD, CLIP, EMB, FWD, GC, LN, OPT, P2P, RS, SEP, Group, dependencies
from .table import OpTable, TraceMeta

__all__ = ["COMM_OPTYPES", "KNOWN_OPTYPES", "Group", "Program", "build_program", "measured_times", "own_times"]

KNOWN_OPTYPES = frozenset({FWD, BWD, *P2P, AG, RS, SEP, LN, EMB, CLIP, OPT, GC})
# Communication op types: their "typical" duration is a median (the artifact's
# analysis_util.simulation_analysis_reduce_dim_v4); compute-like types take a mean.
COMM_OPTYPES = frozenset({*P2P, AG, RS, SEP, LN, EMB, CLIP})


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
    notes: tuple[str, ...] = field(default=())     # the reader's warnings (OpTable.notes)

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
    expected, steps, skipped = _complete_steps(table, meta, code, dps, names, nseq)

    # --- template ops
    tcode = np.array(sorted(c for s in range(meta.pp) for c in expected[s]), dtype=np.int64)
    t_seq = tcode % nseq
    t_opc = (tcode // nseq) % len(names)
    t_stage = tcode // nseq // len(names)
    t_type = names[t_opc]

    start, dur, end, rank, chunk, gchunk = _measured(table, meta, code, tcode, steps, dps)
    dep_t, groups, group_of, node_order = dependencies(src, meta, t_stage, t_type, t_seq, start, end,
                                                       chunk, gchunk)
    own = own_times(start, dur, end, groups)
    return Program(meta=meta, stage=t_stage, optype=t_type, seq=t_seq, rank=rank, deps=dep_t,
                   group_of=group_of, groups=tuple(groups), order=node_order, steps=np.array(steps),
                   own_s=own, start_s=start, end_s=end, skipped=tuple(skipped),
                   notes=table.notes)


def _complete_steps(table: OpTable, meta: TraceMeta, code: np.ndarray, dps: list[int], names: np.ndarray,
                    nseq: int) -> tuple[dict[int, tuple[int, ...]], list[int], list[str]]:
    """Per stage the op codes most of its (step, dp) workers record, the complete steps (every
    worker records its stage's set) and why each other step is skipped."""
    src = table.source
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
    return expected, steps, skipped


def measured_times(table: OpTable, keep: np.ndarray, k_of: np.ndarray, steps: list[int],
                   dps: list[int], n_ops: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Starts (from the step's first op), durations and ends (ops, steps, dp ranks) of the rows
    *keep* of *table*, the i-th of them op ``k_of[i]`` of a template of *n_ops*, over the complete
    *steps*; and the dp index (into *dps*) of each of those rows."""
    s_of = np.searchsorted(np.array(steps), table.step[keep])
    d_of = np.searchsorted(np.array(dps), table.dp[keep])
    start = np.full((n_ops, len(steps), len(dps)), np.nan)
    dur = np.full((n_ops, len(steps), len(dps)), np.nan)
    start[k_of, s_of, d_of] = table.start_s[keep]
    dur[k_of, s_of, d_of] = table.dur_s[keep]
    assert not np.isnan(start).any() and not np.isnan(dur).any(), "complete steps have every op"
    start -= start.min(axis=(0, 2), keepdims=True)
    return start, dur, start + dur, d_of


def own_times(start: np.ndarray, dur: np.ndarray, end: np.ndarray, groups: Sequence[Group]) -> np.ndarray:
    """``Program.own_s``: an op's duration; for a group op, its end minus the group's latest start
    (over its members, and over the dp ranks when ``across_dp``), the wait excluded."""
    own = dur.copy()
    for grp in groups:
        m = list(grp.members)
        gstart = start[m].max(axis=0)
        if grp.across_dp:
            gstart = gstart.max(axis=1, keepdims=True)
        own[m] = np.maximum(end[m] - gstart, 0.0)
    return own


def _measured(table: OpTable, meta: TraceMeta, code: np.ndarray, tcode: np.ndarray, steps: list[int],
              dps: list[int]) -> tuple[np.ndarray, ...]:
    """``measured_times`` of the template ops *tcode*; the rank of each (stage, dp); each op's
    chunk and model chunk."""
    K = len(tcode)
    keep = np.isin(table.step, steps)
    k_of = np.searchsorted(tcode, code[keep])
    start, dur, end, d_of = measured_times(table, keep, k_of, steps, dps, K)
    rank = np.zeros((meta.pp, len(dps)), dtype=np.int64)
    rank[table.stage[keep], d_of] = table.rank[keep]
    chunk = np.zeros(K, dtype=np.int64)
    gchunk = np.zeros(K, dtype=np.int64)
    first = np.flatnonzero(keep & (table.step == steps[0]) & (table.dp == dps[0]))
    chunk[k_of[np.searchsorted(np.flatnonzero(keep), first)]] = table.chunk[first]
    gchunk[k_of[np.searchsorted(np.flatnonzero(keep), first)]] = table.gchunk[first]
    return start, dur, end, rank, chunk, gchunk


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


