"""What one topology offers the collective library, read once from its fabric: ``Platform``."""

from __future__ import annotations

from dataclasses import dataclass

from ..calibration import NET_LATENCY_US, NET_PEER_US, PROXY_STEP_US
from ..topology import GpuFabric, Topology
from ..topology_spec import NCCL_PROTOCOLS, GpuClusterSpec
from .stages import NET_GRAPH_CHANNELS, NET_RAILS

__all__ = ["PROTOCOLS", "Platform", "platform"]

PROTOCOLS = NCCL_PROTOCOLS


@dataclass(frozen=True, slots=True)
class Platform:
    """What one topology offers the collective library, read once from its fabric."""

    topology: str                # name, for messages
    chip: str                    # catalogue chip name, for messages
    arch: str                    # "ampere", "hopper", ... (the rows of NCCL's tables)
    tpu: bool                    # TPU slices: XLA collectives on the ICI torus, no NCCL protocols
    nvls: bool                   # NVLink SHARP in the NVSwitches (NVLS, NVLSTree)
    sharp: bool                  # InfiniBand SHARP in the fabric's switches (CollNet)
    nccl: tuple[int, int] | None = None   # NCCL (major, minor) the calls run; None: a current one
    # The scale-out transport's own per-step network latency and Simple-protocol overhead (us),
    # where its net plugin models one (``Algorithm.latency_s``); None: NCCL's NET table.
    net_us: tuple[float, float] | None = None
    # Protocols a call across nodes may use (the topology's ``fabric.net_protocols``)
    net_protocols: tuple[str, ...] = PROTOCOLS
    # The net plugin's tuner table (``fabric.tuner_plugin``; sim.collectives.plugin_tuner)
    tuner_plugin: str | None = None
    # The proxy's time per channel step of an LL128 call across nodes (sim.calibration.PROXY_STEP_US)
    proxy_step_s: float = PROXY_STEP_US * 1e-6
    # Rings' and trees' graph channels across nodes (``Algorithm.channels``: the topology's
    # ``fabric.net_channels`` or NCCL's default) and the NICs a node's channels run on
    net_channels: int = NET_GRAPH_CHANNELS
    net_nics: int = NET_RAILS
    # The net plugin's cost per remote peer of an all-to-all, (large, small) messages, us
    # (sim.calibration.NET_PEER_US); None: none fitted for the transport
    peer_us: tuple[float, float] | None = None

    def since(self, major: int, minor: int) -> bool:
        """Whether the NCCL release has what (major, minor) introduced (unknown: yes)."""
        return self.nccl is None or self.nccl >= (major, minor)

    @property
    def where(self) -> str:
        """The topology and its chip, as messages name them: "dgx-h100 (H100-SXM-80GB)"."""
        return f"{self.topology} ({self.chip})"


def platform(topo: Topology, nccl_version: tuple[int, int] | None = None,
             net_latency_us: dict[str, float] | None = None,
             proxy_step_us: float | None = None,
             peer_us: dict[str, tuple[float, float]] | None = None) -> Platform:
    """The platform of *topo*: its chip and, on GPU clusters, the fabric's in-network reduction
    and the transport's network latency (the topology file's ``net_latency_us``, else the value
    fitted for the transport in ``sim.calibration.NET_LATENCY_US`` or the *net_latency_us* table
    that replaces it, else NCCL's table); *nccl_version* (major, minor) where the release matters
    (PAT: 2.23), None for a current one; *proxy_step_us* replaces
    ``sim.calibration.PROXY_STEP_US`` and *peer_us* ``NET_PEER_US`` (for their fits)."""
    table = NET_LATENCY_US if net_latency_us is None else net_latency_us
    step_us = PROXY_STEP_US if proxy_step_us is None else proxy_step_us
    fab = topo.fabric
    nvls, sharp = (fab.nvls, fab.sharp) if isinstance(fab, GpuFabric) else (False, False)
    net_us: tuple[float, float] | None = None
    net_protocols: tuple[str, ...] = PROTOCOLS
    tuner_plugin = None
    spec = topo.spec
    net_channels, net_nics = NET_GRAPH_CHANNELS, NET_RAILS
    peer_table = NET_PEER_US if peer_us is None else peer_us
    peer: tuple[float, float] | None = None
    if isinstance(spec, GpuClusterSpec):
        peer = peer_table.get(spec.transport)
        net_protocols = spec.net_protocols
        tuner_plugin = spec.tuner_plugin
        if spec.net_latency_s is not None:
            net_us = (spec.net_latency_s * 1e6, spec.net_simple_overhead_s * 1e6)
        elif spec.transport in table:
            net_us = (table[spec.transport], spec.net_simple_overhead_s * 1e6)
        if spec.net_channels is not None:
            net_channels = spec.net_channels
        net_nics = min(spec.rails, NET_RAILS)
    return Platform(topo.name, topo.spec.chip.name, topo.spec.chip.arch, topo.is_tpu, nvls, sharp,
                    nccl_version, net_us, net_protocols, tuner_plugin, step_us * 1e-6,
                    net_channels, net_nics, peer)
