"""Which device holds which rank: Megatron's order, tensor-parallel innermost.

Rank coordinates (tp, cp, dp, pp) map to device ``((pp * dp_size + dp) * cp_size + cp) * tp_size
+ tp`` (Megatron-LM ``RankGenerator`` default order "tp-cp-ep-dp-pp"), so a TP group is 8
consecutive GPUs of one DGX node and a TPU's TP group is a line along the fastest torus axis.
With ``zero_group`` (hybrid sharding), a ZeRO/FSDP shard group is ``zero_group`` consecutive
data-parallel ranks (one TPU slice when ``zero_group = dp / slices``) and the ranks at the same
place in the other groups hold replicas.
Pipeline stages are the outermost coordinate, so with ``pp > 1`` on several TPU slices a slice
holds whole stages (pipeline transfers cross the DCN) and ``dp / slices`` is no longer one slice.

Expert layers fold the same ranks again (MoE parallel folding, Liu et al. 2025, arXiv 2504.14960;
Megatron-LM megatron/core/parallel_state.py @d98e8a6, ``initialize_model_parallel``: a second
``RankGenerator`` with tp = expert_tensor_parallel_size, ep = expert_model_parallel_size, dp =
world / (etp x ep x pp), cp = 1, in the same order "tp-cp-ep-dp-pp"). A stage's tp x cp x dp
devices, taken in the order above, are re-split as etp x ep x edp with etp fastest: stage-local
rank ``(edp * ep + ep_rank) * etp + etp_rank``. An expert-parallel group is ep ranks ``etp`` apart,
an expert tensor-parallel group ``etp`` consecutive ranks, and an expert data-parallel group
(the ranks that hold the same experts and reduce their gradients together) edp ranks
``ep x etp`` apart. With etp = tp and cp = 1 the expert-parallel groups are ep consecutive
data-parallel ranks at the same tensor-parallel position, as before folding; with cp > 1 they
take the context-parallel ranks first, as Megatron-Core's do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

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
    etp: int = 0                  # expert tensor parallelism; 0: tp (Megatron-Core's default)

    @classmethod
    def of(cls, par: ParallelismConfig, offset: int = 0) -> "Layout":
        return cls(par.tp, par.cp, par.dp, par.pp, par.ep, par.shard_dp, par.replicas, offset,
                   par.etp)

    def __post_init__(self) -> None:
        if self.etp == 0:
            object.__setattr__(self, "etp", self.tp)
        assert self.shard_dp * self.replicas == self.dp, self

    @property
    def stage_ranks(self) -> int:
        """Devices of one pipeline stage: tp x cp x dp, folded as etp x ep x edp for experts."""
        return self.tp * self.cp * self.dp

    @property
    def edp(self) -> int:
        """Expert data parallelism: tp x cp x dp / (etp x ep), whole where the plan is valid
        (``sim.config.parallelism.plan_problem``); the expert groups are read only of such plans."""
        return self.stage_ranks // (self.etp * self.ep)

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
        # (replica, d, c, t) -> [d, c, t] rows of replicas
        g = self._grid(stage).reshape(self.replicas, self.shard_dp, self.cp, self.tp)
        return g.transpose(1, 2, 3, 0).reshape(-1, self.replicas).tolist()

    def ep_group(self, stage: int = 0) -> list[int]:
        """Ranks that exchange tokens for the experts: the first expert-parallel group."""
        return [self.device(pp=stage) + e * self.etp for e in range(self.ep)]

    def etp_group(self, stage: int = 0) -> list[int]:
        """Ranks that split each expert's weights: the first expert tensor-parallel group."""
        return [self.device(pp=stage) + t for t in range(self.etp)]

    def edp_group(self, stage: int = 0) -> list[int]:
        """Ranks that hold the same experts and reduce their gradients together: the first
        expert data-parallel group."""
        return [self.device(pp=stage) + k * self.ep * self.etp for k in range(self.edp)]

    # Every group of one kind in a stage (they run their collectives at the same moment).
    # PERF: index arithmetic on the stage's (dp, cp, tp) grid of devices, the same numbers as
    # ``device`` in the same order (98,304 GPUs: 6,144 ranks a stage, groups of every kind for
    # each of 16 stages; benchmarks/test_bench_training.py).

    def _grid(self, stage: int) -> np.ndarray:
        """Devices of *stage* indexed [dp, cp, tp]."""
        n = self.dp * self.cp * self.tp
        return (self.offset + stage * n + np.arange(n)).reshape(self.dp, self.cp, self.tp)

    def tp_groups(self, stage: int = 0) -> list[list[int]]:
        return self._grid(stage).reshape(-1, self.tp).tolist()

    def cp_groups(self, stage: int = 0) -> list[list[int]]:
        return self._grid(stage).transpose(0, 2, 1).reshape(-1, self.cp).tolist()

    def _expert_grid(self, stage: int) -> np.ndarray:
        """Devices of *stage* indexed [edp, ep, etp]: the same devices as ``_grid``, refolded."""
        return self._grid(stage).reshape(self.edp, self.ep, self.etp)

    def ep_groups(self, stage: int = 0) -> list[list[int]]:
        """Every expert-parallel group of *stage*, ordered by (edp, etp) rank."""
        return self._expert_grid(stage).transpose(0, 2, 1).reshape(-1, self.ep).tolist()

    def etp_groups(self, stage: int = 0) -> list[list[int]]:
        """Every expert tensor-parallel group of *stage*, ordered by (edp, ep) rank."""
        return self._expert_grid(stage).reshape(-1, self.etp).tolist()

    def edp_groups(self, stage: int = 0) -> list[list[int]]:
        """Every expert data-parallel group of *stage*, ordered by (ep, etp) rank."""
        return self._expert_grid(stage).transpose(1, 2, 0).reshape(-1, self.edp).tolist()

    @property
    def expert_shard(self) -> int:
        """Ranks that split one copy of the routed experts' ZeRO-sharded state: the expert data-
        parallel ranks of one shard group (``ParallelismConfig.expert_shard_ranks``)."""
        return max(1, self.edp * self.shard_dp // self.dp)

    def expert_shard_group(self, stage: int = 0) -> list[int]:
        """The first expert shard group of *stage* (``expert_shard`` ranks of its EDP group)."""
        return self.edp_group(stage)[:self.expert_shard]

    def expert_shard_groups(self, stage: int = 0) -> list[list[int]]:
        """Every expert shard group of *stage*: each expert data-parallel group, cut into the
        expert ranks of one shard group under hybrid sharding."""
        n = self.expert_shard
        return [g[i:i + n] for g in self.edp_groups(stage) for i in range(0, self.edp, n)]

    def dp_groups(self, stage: int = 0) -> list[list[int]]:
        return self._grid(stage).transpose(2, 0, 1).reshape(self.tp, -1).tolist()

    def shard_groups(self, stage: int = 0) -> list[list[int]]:
        g = self._grid(stage).reshape(self.replicas, self.shard_dp, self.cp, self.tp)
        return g.transpose(0, 3, 1, 2).reshape(self.replicas * self.tp, -1).tolist()

    def stage_pairs(self, stage: int, step: int = 1) -> np.ndarray:
        """Every rank of *stage* with its peer in stage + *step* (pipeline send/recv): an (n, 2)
        array of (rank, peer) rows."""
        other = (stage + step) % self.pp
        return np.stack([self._grid(stage).ravel(), self._grid(other).ravel()], axis=1)

    def groups(self, stage: int) -> Mapping[str, list[list[int]]]:
        """Every group of each kind in *stage*, by kind ("tp", "cp", "ep", "dp", "etp", "edp").

        PERF: a kind's groups are listed when first asked for: a layer's collectives name one or
        two kinds, and a chip-wide FSDP layout has thousands of one-rank groups of the others
        (benchmarks/release.py run-tpu-v4)."""
        return _StageGroups(self, stage)

    def local_group(self, kind: str, local: int) -> tuple[tuple[int, ...], int]:
        """(group id, size) of the *kind* group ("tp", "cp", "dp"; "ep", "etp", "edp" of the
        expert fold) of the stage-local rank *local* = (dp * cp + cp) * tp + tp, the mapping of
        ``device`` within one stage, = (edp * ep + ep) * etp + etp in the expert fold."""
        if kind in ("ep", "etp", "edp"):
            et = local % self.etp
            e = (local // self.etp) % self.ep
            ed = local // (self.etp * self.ep)
            return {"ep": ((ed, et), self.ep), "etp": ((ed, e), self.etp),
                    "edp": ((e, et), self.edp)}[kind]
        t = local % self.tp
        c = (local // self.tp) % self.cp
        d = local // (self.tp * self.cp)
        if kind == "tp":
            return (d, c), self.tp
        if kind == "cp":
            return (d, t), self.cp
        return (t,), self.dp * self.cp

    def stage_pair(self, stage: int) -> tuple[int, int]:
        """Representative devices of stage and stage + 1 (pipeline send/recv)."""
        return self.device(0, 0, 0, stage), self.device(0, 0, 0, (stage + 1) % self.pp)


class _StageGroups(Mapping[str, list[list[int]]]):
    """``Layout.groups``: each kind's groups of one stage, listed on first use."""

    _KINDS = ("tp", "cp", "ep", "dp", "etp", "edp")

    def __init__(self, lay: Layout, stage: int) -> None:
        self._lay, self._stage = lay, stage
        self._made: dict[str, list[list[int]]] = {}

    def __getitem__(self, kind: str) -> list[list[int]]:
        got = self._made.get(kind)
        if got is None:
            if kind not in self._KINDS:
                raise KeyError(kind)
            got = self._made[kind] = getattr(self._lay, f"{kind}_groups")(self._stage)
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._KINDS)

    def __len__(self) -> int:
        return len(self._KINDS)
