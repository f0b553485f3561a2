"""The simulator behind the suites: the same models as ``clustersim run`` and ``collective``.

``CasePredictor`` answers a collectives-suite point with ``sim.collectives.CollectiveModel``;
``TrainingPredictor`` answers a training-suite scenario with ``sim.run.run``. The suites
themselves take any callable of the same shape (tests pass fakes), so this is the one module of
``sim.validate`` that loads the network and engine stack; ``sim.validate`` does not import it and
the command line imports it only for the suite that needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..calibration import NCCL_TESTS_LAUNCH_PER_GPU_S, TORCH_CALL_OVERHEAD_S
from ..collectives import CollectiveModel
from ..config import load_cluster, scenario_from_dict
from ..job import network_of
from ..results import StepResult
from ..run import run
from ..topology import Topology, build_topology
from .collectives import CaseSpec
from .training import play_key

__all__ = ["CasePredictor", "TrainingPredictor"]


class CasePredictor:
    """Collectives-suite predictor: one measured nccl-tests point -> predicted seconds.

    Keeps one ``CollectiveModel`` per (topology, size, SHARP, NCCL release) so a run's sizes share
    the per-byte costs. *efficiency* overrides ``sim.calibration.LINK_EFFICIENCY`` and
    *net_latency_us* ``sim.calibration.NET_LATENCY_US``, *proxy_step_us*
    ``sim.calibration.PROXY_STEP_US``, *peer_us* ``NET_PEER_US`` and *torch_call_s*
    ``sim.calibration.TORCH_CALL_OVERHEAD_S`` (for their fits).

    What the harness adds to the collective's own time: nccl-tests times a stream of iterations,
    and a thread driving g GPUs issues g calls per iteration, so an iteration takes no less than g
    launches; ml-engineering's all_reduce_bench.py (as the data's runs used it) times one
    torch.distributed call on an idle device, its host overhead included (``HARNESSES``).
    """

    def __init__(self, efficiency: dict[str, float] | None = None,
                 net_latency_us: dict[str, float] | None = None,
                 torch_call_s: float | None = None,
                 proxy_step_us: float | None = None,
                 peer_us: dict[str, tuple[float, float]] | None = None) -> None:
        self._models: dict[tuple[str, int, bool, tuple[int, int] | None, int | None],
                           CollectiveModel] = {}
        self._efficiency = efficiency
        self._net_latency_us = net_latency_us
        self._proxy_step_us = proxy_step_us
        self._peer_us = peer_us
        self._torch_call_s = TORCH_CALL_OVERHEAD_S if torch_call_s is None else torch_call_s

    def model(self, topology: str, chips: int, sharp: bool,
              nccl_version: tuple[int, int] | None = None,
              nvl_domain: int | None = None) -> CollectiveModel:
        key = (topology, chips, sharp, nccl_version, nvl_domain)
        if key not in self._models:
            cluster = load_cluster(topology, chips, sharp=sharp, where="validate",
                                   nvl_domain=nvl_domain)
            self._models[key] = CollectiveModel(build_topology(cluster), self._efficiency, nccl_version,
                                                self._net_latency_us, self._proxy_step_us,
                                                self._peer_us)
        return self._models[key]

    def __call__(self, case: CaseSpec) -> float:
        m = self.model(case.topology, case.gpus, case.sharp, case.nccl_version, case.nvl_domain)
        t = m.time(case.op, int(case.size_bytes), algo=case.algo).time_s
        if case.harness == "torch-single-call":
            return t + self._torch_call_s
        return max(t, case.gpus_per_thread * NCCL_TESTS_LAUNCH_PER_GPU_S)


@dataclass
class TrainingPredictor:
    """Training-suite predictor: scenario mapping -> StepResult (cached models).

    *stack_efficiency* overrides ``sim.calibration.STACK_EFFICIENCY`` (for its fit).
    """

    stack_efficiency: dict[tuple[str, str, str], float] | None = None

    def __post_init__(self) -> None:
        self._nets: dict[Any, tuple[Topology, CollectiveModel]] = {}
        # PERF: runs that map to the same scenario (one configuration measured by two stacks or
        # sources: MegaScale's Megatron-LM and MegaScale rows) are played once
        self._steps: dict[str, StepResult] = {}

    def __call__(self, raw: Mapping[str, Any]) -> StepResult:
        key = play_key(raw)
        hit = self._steps.get(key)
        if hit is None:
            hit = self._steps[key] = self._play(raw)
        return hit

    def _play(self, raw: Mapping[str, Any]) -> StepResult:
        scn = scenario_from_dict(raw, str(raw.get("name", "<validation>")))
        c = scn.cluster                          # frozen: the cluster is its own cache key
        if c not in self._nets:
            self._nets[c] = network_of(c)
        topo, net = self._nets[c]
        return run(scn, topo=topo, net=net, stack_efficiency=self.stack_efficiency,
                   extras=False).step
