"""How much of a layer's tensor-parallel all-gathers and reduce-scatters its GEMMs hide, per
software stack (``SoftwareProfile.tp_comm_overlap`` and ``tp_overlap_forward``).

With overlap everywhere (Transformer Engine's userbuffers, Megatron ``--tp-comm-overlap``) a
collective is pipelined with the GEMMs it feeds or drains. Without collective matmul (XLA as
MaxText runs it) a collective hides only behind work that does not wait for it: in the forward and
its recomputation every TP collective feeds the GEMM after it or drains the one before it, so it
waits; in the backward, the weight-gradient GEMMs need none of the data-gradient collectives, and
the layer's TP collectives there hide behind them, one pool of their time a layer.
"""

from __future__ import annotations

from .compute.model import ComputeModel
from .workload.transformer import Comm, Item, Op

__all__ = ["overlap_gemm_s", "tp_exposed_s"]


def overlap_gemm_s(items: tuple[Item, ...], i: int, cm: ComputeModel) -> float:
    """GEMM time a TP collective at ``items[i]`` can hide behind under userbuffers overlap: the
    GEMMs that consume an all-gather's output (those right after it) or produce a reduce-scatter's
    input (those right before it)."""
    comm = items[i]
    step = 1 if isinstance(comm, Comm) and comm.op == "allgather" else -1
    total, j = 0.0, i + step
    while 0 <= j < len(items):
        op = items[j]
        if not (isinstance(op, Op) and op.kind == "gemm"):
            break
        total += cm.op_time_s(op)
        j += step
    return total


def _wgrad_s(items: tuple[Item, ...], start: int, cm: ComputeModel) -> float:
    """The weight-gradient GEMMs' time among ``items[start:]`` (``sim.workload.transformer``
    names each backward GEMM's weight gradient ``<gemm>-wgrad``)."""
    return sum(cm.op_time_s(o) for o in items[start:]
               if isinstance(o, Op) and o.kind == "gemm" and o.name.endswith("-wgrad"))


def tp_exposed_s(items: tuple[Item, ...], i: int, cm: ComputeModel, seconds: float,
                 backward_from: int, pool: float | None) -> tuple[float, float | None]:
    """(what the TP all-gather or reduce-scatter at ``items[i]``, *seconds* alone, leaves exposed;
    the backward's weight-gradient time still free to hide behind). *backward_from*: the index of
    the backward's first item (the forward and recomputation before it); *pool*: None until the
    first backward collective of the layer sums it."""
    if cm.profile.tp_overlap_forward:
        return max(0.0, seconds - overlap_gemm_s(items, i, cm)), pool
    if i < backward_from:
        return seconds, pool
    free = _wgrad_s(items, backward_from, cm) if pool is None else pool
    hide = min(seconds, free)
    return seconds - hide, free - hide
