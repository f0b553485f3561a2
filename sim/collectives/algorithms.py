"""The registry of collective algorithms: one record per algorithm, in one tuple.

Each record (an ``Algorithm``, ``sim.collectives.algorithm``) holds everything about its
algorithm: the operations and platforms it serves and why it is refused elsewhere, its phases on
the graph, and NCCL's cost model for it. The tuner (``sim.collectives.nccl``) and the model
(``sim.collectives.CollectiveModel``) only ask the records. Adding an algorithm: its class (a new
module beside these, or a class in the module of its family) and its line in ``REGISTRY``.

The order of ``REGISTRY`` is the order the tuner weighs them in (the first of equal costs is
picked) and the order ``--algo`` lists them; on TPU slices the slice's own algorithms come before
the ring (``Algorithm.tpu_fallback``).
"""

from __future__ import annotations

import types
from collections.abc import Mapping

from ..topology import Topology
from .algorithm import Algorithm
from .hierarchical import HIERARCHICAL
from .pat import PAT
from .ring import RING
from .sendrecv import P2P, PAIRWISE
from .sharp import COLLNET, NVLS, NVLS_TREE
from .stages import GroupInfo, Stage
from .torus import TORUS
from .tree import TREE

__all__ = ["ALGORITHMS", "BY_NAME", "REGISTRY", "build"]

REGISTRY: tuple[Algorithm, ...] = (RING, TREE, NVLS, NVLS_TREE, COLLNET, HIERARCHICAL, TORUS,
                                   PAIRWISE, P2P, PAT)
ALGORITHMS = tuple(a.name for a in REGISTRY)
BY_NAME: Mapping[str, Algorithm] = types.MappingProxyType({a.name: a for a in REGISTRY})


def build(algo: str, op: str, gi: GroupInfo, size: float, topo: Topology) -> list[Stage]:
    """Stages of *algo* for *op* (the caller has checked that the pair is valid)."""
    return BY_NAME[algo].stages(op, gi, size, topo)
