"""The dependencies of a data-parallel training step whose gradient sync overlaps the backward
(PyTorch DDP's bucketed all-reduce; ZeRO / FSDP's reduce-scatter), as a ``Program``.

The ops of one worker and step (``sim.traces.kineto`` reads them from profiler traces):
``params-all-gather`` #0..a-1, ``forward-compute``, ``backward-compute`` #0..n,
``grads-reduce-scatter`` #0..n-1, ``optimizer``. Dependencies:
- the parameter gathers run in order, and the forward after the last of them;
- the backward segments run one after another after the forward (one compute stream);
- gradient sync i runs after backward segment i (its bucket's gradients are then ready) and after
  sync i-1 (one communication stream, NCCL runs collectives in order);
- the optimizer runs after the last backward segment and the last gradient sync;
- a gather or a sync is one collective over all dp ranks: it ends at the latest start over the
  ranks plus its own transfer time (the measured end minus that latest start), as
  ``sim.traces.dependencies`` has it for the 1F1B model.
Every (step, dp rank) must record the same ops; other steps are skipped (``Program.skipped``).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..errors import ConfigError
from .dependencies import AG, BWD, FWD, OPT, RS, Group
from .program import Program, measured_times, own_times
from .table import OpTable, TraceMeta

__all__ = ["DP_OPTYPES", "build_dp_program"]

DP_OPTYPES = frozenset({AG, FWD, BWD, RS, OPT})


def _template(n_ag: int, n_rs: int) -> list[tuple[str, int]]:
    """The ops of one worker's step in a dependency order."""
    ops = [(AG, j) for j in range(n_ag)] + [(FWD, 0)]
    for i in range(n_rs):
        ops += [(BWD, i), (RS, i)]
    return ops + [(BWD, n_rs), (OPT, 0)]


def _deps(tmpl: list[tuple[str, int]]) -> tuple[tuple[int, ...], ...]:
    at = {op: k for k, op in enumerate(tmpl)}
    n_ag = sum(t == AG for t, _ in tmpl)
    n_rs = sum(t == RS for t, _ in tmpl)
    deps: list[tuple[int, ...]] = []
    for t, i in tmpl:
        if t == AG:
            d = [at[(AG, i - 1)]] if i else []
        elif t == FWD:
            d = [at[(AG, n_ag - 1)]] if n_ag else []
        elif t == BWD:
            d = [at[(BWD, i - 1)] if i else at[(FWD, 0)]]
        elif t == RS:
            d = [at[(BWD, i)], at[(RS, i - 1)] if i else (at[(AG, n_ag - 1)] if n_ag else at[(BWD, i)])]
        else:
            d = [at[(BWD, n_rs)]] + ([at[(RS, n_rs - 1)]] if n_rs else [])
        deps.append(tuple(sorted(set(d))))
    return tuple(deps)


def _collective_counts(table: OpTable) -> dict[tuple[int, int], tuple[int, int]]:
    """(step, dp) -> (parameter gathers, gradient syncs) of each (step, dp) that records ops."""
    order = np.lexsort((table.dp, table.step))
    key = np.stack([table.step, table.dp], axis=1)[order]
    firsts = np.concatenate([[0], np.flatnonzero(np.any(np.diff(key, axis=0) != 0, axis=1)) + 1])
    n_ag = np.add.reduceat((table.optype == AG)[order].astype(np.int64), firsts)
    n_rs = np.add.reduceat((table.optype == RS)[order].astype(np.int64), firsts)
    return {(int(key[a, 0]), int(key[a, 1])): (int(g), int(r)) for a, g, r in zip(firsts, n_ag, n_rs)}


def build_dp_program(table: OpTable, meta: TraceMeta) -> Program:
    """The program of a data-parallel *table* (one stage; ops as in the module docstring)."""
    src = table.source
    if unknown := sorted(set(table.optype.tolist()) - DP_OPTYPES):
        raise ConfigError(f"{src}: op type(s) {unknown} are not data-parallel step ops {sorted(DP_OPTYPES)}")
    dps = np.unique(table.dp).tolist()
    all_steps = np.unique(table.step).tolist()
    counts = _collective_counts(table)
    n_ag, n_rs = Counter(counts.values()).most_common(1)[0][0]
    steps, skipped = [], []
    for step in all_steps:
        bad = [(d, counts.get((step, d))) for d in dps if counts.get((step, d)) != (n_ag, n_rs)]
        if bad:
            d, c = bad[0]
            r = int(table.rank[table.dp == d][0])
            why = "records no ops" if c is None else f"records {c[1]} gradient sync(s) and {c[0]} parameter gather(s)"
            skipped.append(f"step {step}: rank {r} {why}; most record {n_rs} and {n_ag}")
        else:
            steps.append(step)
    if not steps:
        raise ConfigError(f"{src}: no step in which every rank records the same collectives: {skipped[0]}")
    tmpl = _template(n_ag, n_rs)
    at = {op: k for k, op in enumerate(tmpl)}
    keep = np.isin(table.step, steps)
    k_of = np.array([at[(str(t), int(q))] for t, q in zip(table.optype[keep], table.seq[keep])], dtype=np.int64)
    K = len(tmpl)
    start, dur, end, d_of = measured_times(table, keep, k_of, steps, dps, K)
    rank = np.zeros((1, len(dps)), dtype=np.int64)
    rank[0, d_of] = table.rank[keep]
    groups = tuple(Group((k,), across_dp=True) for k, (t, _) in enumerate(tmpl) if t in (AG, RS))
    group_of = np.full(K, -1, dtype=np.int64)
    for g, grp in enumerate(groups):
        group_of[grp.members[0]] = g
    own = own_times(start, dur, end, groups)
    order = tuple(K + int(group_of[k]) if group_of[k] >= 0 else k for k in range(K))
    return Program(meta=meta, stage=np.zeros(K, dtype=np.int64), optype=np.array([t for t, _ in tmpl], dtype=object),
                   seq=np.array([q for _, q in tmpl], dtype=np.int64), rank=rank, deps=_deps(tmpl),
                   group_of=group_of, groups=groups, order=order, steps=np.array(steps), own_s=own,
                   start_s=start, end_s=end, skipped=tuple(skipped), notes=table.notes)
