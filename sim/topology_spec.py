"""Topology specifications: what a file in topologies/ describes, and how a size is resolved.

Pure data and arithmetic (no YAML, no graphs): ``sim.config`` parses a topology file into one of
these specs, and ``sim.topology.build_topology`` turns a spec plus a size into a networkx graph.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from .errors import ConfigError
from .hardware import Chip

__all__ = ["GpuClusterSpec", "TpuPodSpec", "TopologySpec", "SliceShape", "parse_shape"]

SliceShape = tuple[int, ...]


def parse_shape(text: str, ndims: int, where: str) -> SliceShape:
    """'4x4x8' -> (4, 4, 8); a ConfigError naming *where* for anything else."""
    parts = str(text).lower().split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) != ndims or any(d <= 0 for d in dims):
        example = "x".join(["4"] * ndims)
        raise ConfigError(f"{where}: {text!r} is not a {ndims}-D slice shape like {example!r}")
    return dims


def shape_str(shape: SliceShape) -> str:
    return "x".join(str(d) for d in shape)


# NCCL's protocols, in NCCL's order (sim.collectives.platform.PROTOCOLS; ``fabric.net_protocols``)
NCCL_PROTOCOLS = ("LL", "LL128", "Simple")
# Scale-out transports (``fabric.transport``, topologies/README.md "Fabrics"): each is the link kind
# of a fabric's NIC and switch links, with its own achievable fraction of line rate
# (sim.calibration.LINK_EFFICIENCY). "gib" is RoCE driven by Google's gIB NCCL net plugin.
TRANSPORTS = ("ib", "roce", "gib", "efa", "tcpxo", "tcpx", "slingshot")
# What each transport is, in words, for reports (``topo show``)
TRANSPORT_NAMES = {
    "ib": "InfiniBand", "roce": "RoCEv2, NCCL's IB verbs", "gib": "RoCEv2 through Google's gIB plugin",
    "efa": "AWS EFA through aws-ofi-nccl", "tcpxo": "GPUDirect-TCPXO", "tcpx": "GPUDirect-TCPX",
    "slingshot": "HPE Slingshot, aws-ofi-nccl on libfabric CXI",
}


@dataclass(frozen=True, slots=True)
class GpuClusterSpec:
    """NVLink/NVSwitch nodes joined by a rail-optimized InfiniBand fat-tree (DGX SuperPOD RA).

    Fabric rules (NV-SPOD-H100, NV-SPOD-B200 switch-count table in FACTS.md 2a): scalable units (SU)
    of ``su_nodes`` nodes; one leaf switch per rail per SU with ``leaf_down_ports`` down and
    ``leaf_up_ports`` up; up to ``two_tier_max_sus`` SUs every leaf reaches every spine (4 spines per
    SU); above that, spines form one group per rail (8 per SU in all) and a core layer (4 per SU)
    joins the groups.
    """

    name: str
    chip: Chip
    gpus_per_node: int
    nvswitches_per_node: int
    gpu_switch_links: tuple[int, ...]     # NVLink links from each GPU to each NVSwitch
    nvlink_latency_s: float
    nics_per_node: int
    nic_Bps: float                        # per NIC, one direction
    pcie_Bps: float                       # GPU <-> NIC through the PCIe switch, one direction
    pcie_latency_s: float
    ib_port_Bps: float                    # one switch port, one direction
    ib_latency_s: float                   # per IB link, switch traversal included
    su_nodes: int
    leaf_down_ports: int
    leaf_up_ports: int
    two_tier_max_sus: int
    max_gpus: int
    ib_sharp: bool                        # InfiniBand SHARP in the switches
    oversubscription: float               # leaf (and spine) down:up capacity ratio, 1 = non-blocking
    default_chips: int
    source: str = ""
    # Scale-up domains other than one 8-GPU NVSwitch node (topologies/README.md):
    # NVLink links joining each pair of GPUs of a node that has no NVSwitch (4-GPU HGX boards:
    # every GPU wired straight to every other); 0 = the GPUs meet in NVSwitches.
    mesh_links: int = 0
    # GPUs per host (a compute tray of an NVL72 rack: 4); 0 = the whole node is one host.
    gpus_per_host: int = 0
    # The file's NVLink domain when a job uses only part of each (``cluster.nvl_domain``,
    # ``with_domain``); 0 = the job has whole domains of ``gpus_per_node``.
    rack_gpus: int = 0
    # Scale-out transport (``TRANSPORTS``): the link kind of every NIC and switch link.
    transport: str = "ib"
    nics_per_gpu: int = 1                 # NICs striped by one GPU (AWS p5: 4 EFA per GPU)
    # Per-step network latency of the transport as its NCCL net plugin models it (seconds), in
    # place of NCCL's own NET hwLat table (InfiniBand); None: NCCL's table. Simple adds
    # ``net_simple_overhead_s`` (completion handling), as aws-ofi-nccl's tuner does.
    net_latency_s: float | None = None
    net_simple_overhead_s: float = 0.0
    # NCCL protocols a call that crosses nodes may use (``fabric.net_protocols``): all three unless
    # the net plugin or the GPU-NIC path rules some out (aws-ofi-nccl forces Simple on P4d/P4de;
    # NCCL enables LL128 across nodes only when GPU and NIC share a PCIe switch, or through PXN
    # on Hopper and later).
    net_protocols: tuple[str, ...] = NCCL_PROTOCOLS
    # The net plugin's own tuner (``fabric.tuner_plugin``): a table of sim.collectives.plugin_tuner
    # that picks algorithm and protocol where it has a region for the call (NCCL >= 2.19); None:
    # NCCL's tuner alone.
    tuner_plugin: str | None = None
    # Channels NCCL's topology search finds for rings and trees across nodes (the graph's
    # nChannels, before its run-time doubling; ``fabric.net_channels``) where a system's NCCL log
    # shows them; None: NCCL's default (sim.collectives.stages.NET_GRAPH_CHANNELS: 16, two per NIC on
    # 8-NIC 400 Gb/s nodes).
    net_channels: int | None = None
    # Frontier-scale three-tier fabric (0: the SuperPOD layout above). Pods of ``pod_sus`` SUs,
    # each a non-blocking leaf-spine per rail plane (the spines of rail r join only rail r's
    # leaves); a core layer joins the pods' spines with ``core_oversubscription``:1 (Llama 3
    # paper section 3.3.1: 3,072-GPU pods at full bisection, 1:7 above them).
    pod_sus: int = 0
    core_oversubscription: float = 1.0
    # Dragonfly (``layout: dragonfly``, HPE Slingshot): ``su_nodes`` nodes on each switch (all
    # their NICs), ``group_switches`` switches per group joined all-to-all by ``local_links``
    # cables per pair, every pair of groups by ``global_links`` cables; ``system_groups``: the
    # groups of the whole machine (0: only the job's), whose others carry the job's non-minimal
    # routes (sim.network.routing.dragonfly).
    layout: str = "fat-tree"
    group_switches: int = 0
    local_links: int = 0
    global_links: int = 0
    system_groups: int = 0

    kind = "gpu_cluster"

    @property
    def host_gpus(self) -> int:
        """GPUs per host: a node (NVLink domain) may span several hosts (MNNVL)."""
        return self.gpus_per_host or self.gpus_per_node

    @property
    def ocs_spares(self) -> bool:
        """A failed GPU means a node swap (no optical switch to route around it)."""
        return False

    def rail_of(self, local: int) -> int:
        """Rail (= NIC index) of the node's GPU *local*: one NIC per GPU, or per
        ``gpus_per_node / nics_per_node`` neighbouring GPUs behind one PCIe switch; with several
        NICs per GPU (``nics_per_gpu``) the GPU's NICs form one rail (its NIC group)."""
        return local * self.rails // self.gpus_per_node

    @property
    def rails(self) -> int:
        """Rails of the fabric: NICs per node, or NIC groups where a GPU stripes several NICs."""
        return self.nics_per_node // self.nics_per_gpu

    def with_domain(self, gpus: int, where: str) -> "GpuClusterSpec":
        """The spec a job sees when it uses *gpus* GPUs of each NVLink domain (whole hosts, with
        their NICs): e.g. 64 of an NVL72 rack's 72, or 4 of a DGX node's 8 with their 4 NICs. The
        fabric is the file's; only the GPUs (and their NICs) in the job are in the graph."""
        full = self.rack_gpus or self.gpus_per_node
        host = self.host_gpus
        # A node that is one host may run part of its GPUs (nccl-tests with 1, 2 or 4 GPUs a
        # node), each with its own NICs; a domain of several hosts takes whole hosts.
        unit = 1 if host == full else host
        if gpus < 1 or gpus > full or gpus % unit or (self.nics_per_node * gpus) % full:
            raise ConfigError(
                f"{where}: {gpus} GPUs per NVLink domain of {self.name!r}; valid: "
                + (f"a multiple of {host} (whole hosts) up to {full}" if unit > 1 else
                   f"up to {full}, each with whole NICs ({self.nics_per_node} NICs a node)"))
        return replace(self, gpus_per_node=gpus, nics_per_node=self.nics_per_node * gpus // full,
                       max_gpus=self.max_gpus * gpus // full, default_chips=gpus,
                       gpus_per_host=0 if host == gpus else host, rack_gpus=full)

    def resolve_chips(self, chips: int | None, where: str) -> int:
        """Validated GPU count: whole nodes, at most ``max_gpus``."""
        n = self.default_chips if chips is None else chips
        g = self.gpus_per_node
        field = "cluster.nvl_domain" if self.rack_gpus else "node.gpus"
        unit = f"{g}-GPU NVLink domains ({field})" if self.gpus_per_host or self.rack_gpus else f"{g}-GPU nodes"
        if not isinstance(n, int) or n <= 0 or n % g or n > self.max_gpus:
            raise ConfigError(
                f"{where}: {n!r} GPUs is not a whole number of {unit} up to "
                f"{self.max_gpus} for topology {self.name!r}; valid: {g}, {2 * g}, ..., {self.max_gpus}"
            )
        return n


@dataclass(frozen=True, slots=True)
class TpuPodSpec:
    """TPU slices: 3-D tori of 4x4x4 cubes joined by OCS (v4, v5p) or 2-D 16x16 pods (v5e, v6e)."""

    name: str
    chip: Chip
    ndims: int                            # 3: cubes + OCS; 2: single-pod 2-D torus, pods over DCN
    cube: int                             # edge of a cube (4) for 3-D; 0 for 2-D
    max_shape: SliceShape                 # the largest single slice, e.g. (16, 16, 16)
    subcube_shapes: tuple[SliceShape, ...]  # 3-D slices smaller than a cube (no wraparound)
    pod_shapes: tuple[SliceShape, ...]    # 2-D slice shapes inside one pod
    wrap_len: int                         # 2-D: an axis wraps only at this length (16)
    chips_per_host: int
    ici_latency_s: float
    pcie_Bps: float
    pcie_latency_s: float
    dcn_latency_s: float
    twisted_allowed: bool
    multi_pod: bool                       # 2-D: more chips = whole pods joined over DCN
    default_chips: int
    source: str = ""
    # 3-D: a slice of whole cubes may take any AxBxC within max_shape of at most this many cubes
    # (TPU7x: 144, xpk's generate_tpu_topologies); 0 = max_shape is the largest slice itself.
    max_cubes: int = 0

    kind = "tpu_pod"

    @property
    def ocs_spares(self) -> bool:
        """3-D slices are cubes joined by optical circuit switches, which swap a spare cube in
        for a failed one in seconds (v4, v5p); 2-D pods (v5e, v6e) have no OCS and swap a host."""
        return self.ndims == 3

    @property
    def max_chips(self) -> int:
        if self.max_cubes:
            return self.max_cubes * self.cube ** 3
        return math.prod(self.max_shape)

    def _cubes_ok(self, dims: SliceShape) -> bool:
        return not self.max_cubes or math.prod(d // self.cube for d in dims) <= self.max_cubes

    def resolve_shape(self, chips: int | None, slice_: str | None, where: str,
                      slices: int | None = None) -> tuple[SliceShape, int]:
        """(per-slice shape, number of slices) from ``cluster.chips``, ``cluster.slice`` and
        ``cluster.slices`` (Multislice: that many identical ICI slices joined over the DCN)."""
        if slices is not None:
            return self._resolve_slices(chips, slice_, where, slices)
        if slice_ is not None:
            shape = parse_shape(slice_, self.ndims, f"{where}.slice")
            self._check_shape(shape, f"{where}.slice")
            pods = 1
            if chips is not None and chips != math.prod(shape):
                if self.multi_pod and shape == self.max_shape and chips % math.prod(shape) == 0:
                    pods = chips // math.prod(shape)
                else:
                    raise ConfigError(
                        f"{where}.chips: {chips} disagrees with slice {slice_!r} "
                        f"({math.prod(shape)} chips); give one of them")
            return shape, pods
        n = self.default_chips if chips is None else chips
        if not isinstance(n, int) or n <= 0:
            raise ConfigError(f"{where}.chips: must be a positive integer, got {n!r}")
        if self.multi_pod and n > self.max_chips:
            if n % self.max_chips:
                raise ConfigError(
                    f"{where}.chips: {n} chips on {self.name} needs whole {self.max_chips}-chip pods "
                    f"beyond one pod; valid: {self.max_chips}, {2 * self.max_chips}, ...")
            return self.max_shape, n // self.max_chips
        standard = self.standard_shape(n)
        if standard is None:
            raise ConfigError(
                f"{where}.chips: {n} is not a valid {self.name} slice size; valid: "
                f"{self.valid_counts_text()}")
        return standard, 1

    def _resolve_slices(self, chips: int | None, slice_: str | None, where: str,
                        slices: int) -> tuple[SliceShape, int]:
        if slices > 1 and self.chip.dcn_Bps is None:
            raise ConfigError(f"{where}.slices: {slices} slices need a data-center network, and "
                              f"chip {self.chip.name} has no DCN bandwidth in the catalogue")
        if slice_ is not None:
            shape = parse_shape(slice_, self.ndims, f"{where}.slice")
            self._check_shape(shape, f"{where}.slice")
            if chips is not None and chips != slices * math.prod(shape):
                raise ConfigError(
                    f"{where}.chips: {chips} disagrees with {slices} slices of {slice_!r} "
                    f"({slices * math.prod(shape)} chips); give one of them")
            return shape, slices
        if chips is None:
            per = self.default_chips
        else:
            if not isinstance(chips, int) or chips <= 0 or chips % slices:
                raise ConfigError(
                    f"{where}.chips: {chips!r} is not {slices} equal slices (slices: {slices}); "
                    f"valid: {slices} x a slice size ({self.valid_counts_text(pods=False)})")
            per = chips // slices
        standard = self.standard_shape(per) if per <= self.max_chips else None
        if standard is None:
            raise ConfigError(
                f"{where}.chips: {chips} chips in {slices} slices is {per} per slice, not a valid "
                f"{self.name} slice size; valid: {self.valid_counts_text(pods=False)}")
        return standard, slices

    def standard_shape(self, chips: int) -> SliceShape | None:
        """The most cubic valid slice with *chips* chips, or None."""
        small = [s for s in (self.subcube_shapes if self.ndims == 3 else self.pod_shapes)
                 if math.prod(s) == chips]
        if small:
            return small[0]
        if self.ndims == 2:
            return None
        c = self.cube
        best: SliceShape | None = None
        for dims in itertools.combinations_with_replacement(range(c, max(self.max_shape) + 1, c), 3):
            if math.prod(dims) != chips or not _fits(dims, self.max_shape) or not self._cubes_ok(dims):
                continue
            if best is None or dims[-1] - dims[0] < best[-1] - best[0]:
                best = dims
        return best

    def _check_shape(self, shape: SliceShape, where: str) -> None:
        if self.ndims == 2:
            if shape not in self.pod_shapes:
                raise ConfigError(f"{where}: {shape_str(shape)} is not a {self.name} slice; valid: "
                                  f"{', '.join(shape_str(s) for s in self.pod_shapes)}")
            return
        if all(d % self.cube == 0 for d in shape):
            if not _fits(tuple(sorted(shape)), self.max_shape):
                raise ConfigError(
                    f"{where}: {shape_str(shape)} exceeds the largest {self.name} slice "
                    f"{shape_str(self.max_shape)}")
            if not self._cubes_ok(shape):
                raise ConfigError(
                    f"{where}: {shape_str(shape)} is {math.prod(d // self.cube for d in shape)} "
                    f"cubes; a {self.name} slice has at most {self.max_cubes}")
            return
        if tuple(sorted(shape)) not in {tuple(sorted(s)) for s in self.subcube_shapes}:
            raise ConfigError(
                f"{where}: {shape_str(shape)} is not a {self.name} slice; valid: whole "
                f"{self.cube}x{self.cube}x{self.cube} cubes (every dimension a multiple of "
                f"{self.cube}, up to {shape_str(self.max_shape)}) or "
                f"{', '.join(shape_str(s) for s in self.subcube_shapes)}")

    def wraps(self, shape: SliceShape) -> tuple[bool, ...]:
        """Which axes have wraparound links.

        3-D: only slices of whole cubes wrap, on every axis (SB-TPU: "wraparounds only on full-cube
        multiples"). 2-D: an axis wraps only at the full pod length (SB-TPU: "8x16 wraps the long axis").
        """
        if self.ndims == 3:
            whole = all(d % self.cube == 0 for d in shape)
            return tuple(whole for _ in shape)
        return tuple(d == self.wrap_len for d in shape)

    def check_twist(self, shape: SliceShape, where: str) -> None:
        """Twisted tori: GCP-v4 allows AxBxC with 2A=B=C or 2A=2B=C (sorted), whole cubes."""
        a, b, c = sorted(shape) if len(shape) == 3 else (0, 0, 0)
        ok = (self.twisted_allowed and len(shape) == 3 and all(self.wraps(shape))
              and (2 * a == b == c or 2 * a == 2 * b == c))
        if not ok:
            raise ConfigError(
                f"{where}.twisted: {self.name} slice {shape_str(shape)} cannot be twisted; valid: "
                "whole-cube 3-D slices AxBxC with 2A=B=C or 2A=2B=C (e.g. 4x4x8, 4x8x8, 8x8x16)"
                + ("" if self.twisted_allowed else f" on a topology that allows twists (not {self.name})"))

    def valid_counts_text(self, pods: bool = True) -> str:
        if self.ndims == 2:
            counts = sorted({math.prod(s) for s in self.pod_shapes})
            more = (f", then multiples of {self.max_chips} (pods over DCN)"
                    if self.multi_pod and pods else "")
            return ", ".join(str(c) for c in counts) + more
        counts = sorted({math.prod(s) for s in self.subcube_shapes})
        c3 = self.cube ** 3
        if self.max_cubes:
            return (", ".join(str(c) for c in counts)
                    + f", or multiples of {c3} that form an AxBxC slice of at most "
                      f"{self.max_cubes} whole cubes, each axis up to {max(self.max_shape)} "
                      f"({self.max_chips} chips)")
        return (", ".join(str(c) for c in counts)
                + f", or multiples of {c3} that form an AxBxC slice of whole cubes up to "
                  f"{shape_str(self.max_shape)} ({self.max_chips} chips)")


def _fits(dims: SliceShape, max_shape: SliceShape) -> bool:
    return all(d <= m for d, m in zip(sorted(dims), sorted(max_shape)))


TopologySpec = GpuClusterSpec | TpuPodSpec
