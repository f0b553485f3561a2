"""Which device holds which rank: Megatron's order, tensor-parallel innermost.

Rank coordinates (tp, cp, dp, pp) map to device ``((pp * dp_size + dp) * cp_size + cp) * tp_size
+ tp`` (Megatron-LM ``RankGenerator`` default order "tp-cp-ep-dp-pp"), so a TP group is 8
consecutive GPUs of one DGX node and a TPU's TP group is a line along the fastest torus axis.
Expert-parallel groups are consecutive data-parallel ranks. With ``zero_group`` (hybrid sharding),
a ZeRO/FSDP shard group is ``zero_group`` consecutive data-parallel ranks (one TPU slice when
``zero_group = dp / slices``) and the ranks at the same place in the other groups hold replicas.
Pipeline stages are the outermost coordinate, so with ``pp > 1`` on several TPU slices a slice
holds whole stages (pipeline transfers cross the DCN) and ``dp / slices`` is no longer one slice.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ParallelismConfig

__all__ = ["Layout"]


@dataclass(frozen=True, slots=True)
class Layout:
    """The rank <-> device mapping of a plan; its sizes are the config's (``Layout.of``)."""

    tp: int
    cp: int
    dp: int
    pp: int
    ep: int
    shard_dp: int                 # data-parallel ranks per ZeRO shard group (all of dp unless hybrid)
    replicas: int                 # copies of the sharded state: dp / shard_dp
    offset: int = 0               # the job's first device (a second job on the same fabric)

    @classmethod
    def of(cls, par: ParallelismConfig, offset: int = 0) -> "Layout":
        return cls(par.tp, par.cp, par.dp, par.pp, par.ep, par.shard_dp, par.replicas, offset)

    def __post_init__(self) -> None:
        assert self.shard_dp * self.replicas == self.dp, self

    def device(self, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        return self.offset + ((pp * self.dp + dp) * self.cp + cp) * self.tp + tp

    def tp_group(self, stage: int = 0) -> list[int]:
        return [self.device(t, 0, 0, stage) for t in range(self.tp)]

    def cp_group(self, stage: int = 0) -> list[int]:
        return [self.device(0, c, 0, stage) for c in range(self.cp)]

    def dp_group(self, stage: int = 0) -> list[int]:
        """Ranks that hold the same parameters: data- and context-parallel ranks of one stage."""
        return [self.device(0, c, d, stage) for d in range(self.dp) for c in range(self.cp)]

    def shard_group(self, stage: int = 0) -> list[int]:
        """Ranks that split one copy of the ZeRO-sharded state: the first shard group's ranks."""
        return [self.device(0, c, d, stage) for d in range(self.shard_dp) for c in range(self.cp)]

    def replica_groups(self, stage: int = 0) -> list[list[int]]:
        """Every set of ranks that hold the same shard in different replicas (hybrid sharding);
        all of them reduce their gradients at once, so they share the links between replicas."""
        k = self.shard_dp
        return [[self.device(t, c, d + r * k, stage) for r in range(self.replicas)]
                for d in range(k) for c in range(self.cp) for t in range(self.tp)]

    def ep_group(self, stage: int = 0) -> list[int]:
        return [self.device(0, 0, d, stage) for d in range(self.ep)]

    # Every group of one kind in a stage (they run their collectives at the same moment).

    def tp_groups(self, stage: int = 0) -> list[list[int]]:
        return [[self.device(t, c, d, stage) for t in range(self.tp)]
                for d in range(self.dp) for c in range(self.cp)]

    def cp_groups(self, stage: int = 0) -> list[list[int]]:
        return [[self.device(t, c, d, stage) for c in range(self.cp)]
                for d in range(self.dp) for t in range(self.tp)]

    def ep_groups(self, stage: int = 0) -> list[list[int]]:
        return [[self.device(t, c, e * self.ep + d, stage) for d in range(self.ep)]
                for e in range(self.dp // self.ep) for c in range(self.cp) for t in range(self.tp)]

    def dp_groups(self, stage: int = 0) -> list[list[int]]:
        return [[self.device(t, c, d, stage) for d in range(self.dp) for c in range(self.cp)]
                for t in range(self.tp)]

    def shard_groups(self, stage: int = 0) -> list[list[int]]:
        k = self.shard_dp
        return [[self.device(t, c, r * k + d, stage) for d in range(k) for c in range(self.cp)]
                for r in range(self.replicas) for t in range(self.tp)]

    def stage_pairs(self, stage: int, step: int = 1) -> list[tuple[int, int]]:
        """Every rank of *stage* with its peer in stage + *step* (pipeline send/recv)."""
        other = (stage + step) % self.pp
        return [(self.device(t, c, d, stage), self.device(t, c, d, other))
                for d in range(self.dp) for c in range(self.cp) for t in range(self.tp)]

    def groups(self, stage: int) -> dict[str, list[list[int]]]:
        return {"tp": self.tp_groups(stage), "cp": self.cp_groups(stage),
                "ep": self.ep_groups(stage), "dp": self.dp_groups(stage)}

    def local_group(self, kind: str, local: int) -> tuple[tuple[int, ...], int]:
        """(group id, size) of the *kind* group ("tp", "cp", "ep", "dp") of the stage-local rank
        *local* = (dp * cp + cp) * tp + tp: the mapping of ``device`` within one stage."""
        t = local % self.tp
        c = (local // self.tp) % self.cp
        d = local // (self.tp * self.cp)
        if kind == "tp":
            return (d, c), self.tp
        if kind == "cp":
            return (d, t), self.cp
        if kind == "ep":
            return (d // self.ep, c, t), self.ep
        return (t,), self.dp * self.cp

    def stage_pair(self, stage: int) -> tuple[int, int]:
        """Representative devices of stage and stage + 1 (pipeline send/recv)."""
        return self.device(0, 0, 0, stage), self.device(0, 0, 0, (stage + 1) % self.pp)
