"""DGX nodes on a rail-optimized InfiniBand fat-tree, as a networkx graph.

A node is one NVLink domain: the GPUs of a DGX/HGX board on their NVSwitches, an NVL72 rack's 72
GPUs on the NVLink switch trays (18 compute trays of 4 GPUs, one host each: the GPU's ``host``
attribute), or a 4-GPU board without NVSwitch whose GPUs are wired to each other (``mesh_links``).
Node ids: devices are ints 0..N-1 in rank order (GPU g of node n is ``n * gpus_per_node + g``);
everything else is a string: ``n3/nvs1`` (NVSwitch), ``n3/nic5`` (NIC of rail 5; on nodes with
fewer NICs than GPUs neighbouring GPUs share one), ``leaf/s2/r5`` (leaf of rail 5 in scalable unit
2), ``spine/r5/7`` or ``spine/7``, ``core/4``.
Edges carry ``bandwidth_GBps`` (one direction), ``latency_us``, ``kind`` and ``cables`` (physical
links bundled into the edge; may be fractional where a spine's ports are shared by more leaves than
it has ports, see ``_spread``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import networkx as nx

from ..config import ClusterConfig
from ..errors import TopologyError
from ..topology_spec import GpuClusterSpec
from ..units import Bps_to_GBps, s_to_us
from .fabric import GpuFabric
from .writes import graph_writers


def build_gpu_cluster(cluster: ClusterConfig) -> tuple[nx.Graph, GpuFabric]:
    """Graph of ``cluster.chips`` GPUs and the fabric facts of the Topology record."""
    spec = cluster.topology
    assert isinstance(spec, GpuClusterSpec)
    g = nx.Graph()
    nodes = cluster.chips // spec.gpus_per_node
    over = cluster.oversubscription if cluster.oversubscription is not None else spec.oversubscription
    # Oversubscription N:1 at the leaf: down ports stay, up ports shrink (and with them the spines).
    up_ports = spec.leaf_down_ports / over
    if up_ports < 1:
        raise TopologyError(f"cluster.oversubscription: {over} leaves a leaf switch less than one "
                            f"uplink ({spec.leaf_down_ports} down ports)")
    sharp = spec.ib_sharp if cluster.sharp is None else cluster.sharp
    port = spec.ib_port_Bps
    radix = spec.leaf_down_ports + spec.leaf_up_ports
    nvl_lat, pcie_lat, ib_lat = (s_to_us(x) for x in (spec.nvlink_latency_s, spec.pcie_latency_s,
                                                      spec.ib_latency_s))

    _, edge = graph_writers(g)

    def link(u: object, v: object, Bps: float, lat_us: float, kind: str, cables: float) -> None:
        edge(u, v, bandwidth_GBps=Bps_to_GBps(Bps), latency_us=lat_us, kind=kind, cables=cables)

    sus = math.ceil(nodes / spec.su_nodes)
    rails = spec.rails
    net = spec.transport                  # link kind of every NIC and switch link
    dragonfly = spec.layout == "dragonfly"
    build_node = _node_builder(g, spec, sharp, (nvl_lat, pcie_lat, ib_lat))
    for n in range(nodes):
        build_node(n)

    tiers = 1 if nodes == 1 else (2 if sus <= spec.two_tier_max_sus else 3)
    if dragonfly:
        tiers = _build_dragonfly(g, spec, sus, port, ib_lat, net, link) if nodes > 1 else 1
    elif spec.pod_sus and nodes > 1:
        tiers = _build_pods(g, spec, sus, rails, up_ports, radix, port, ib_lat, net, sharp, link)
    elif tiers == 2:
        _build_spines(g, sus, rails, up_ports, radix, port, ib_lat, net, sharp, link)
    elif tiers == 3:
        _build_rail_spines(g, sus, rails, up_ports, radix, port, ib_lat, net, sharp, link)
    nvls = spec.chip.in_network_reduction and spec.nvswitches_per_node > 0
    return g, GpuFabric(nodes=nodes, tiers=tiers, scalable_units=sus, oversubscription=over,
                        sharp=sharp, nvls=nvls)


def _node_builder(g: nx.Graph, spec: GpuClusterSpec, sharp: bool,
                  lat_us: tuple[float, float, float]) -> Callable[[int], None]:
    """``build(n)`` adds node *n*: its NVSwitches, its GPUs wired to them (or to each other), its
    NICs and the leaf (or dragonfly switch) each NIC is the first to reach; *lat_us*: NVLink,
    PCIe, network.

    PERF: every attribute value worked out once per build, not once an edge (147,456 edges at
    16,384 GPUs: benchmarks/release.py run-16k)."""
    nvl_lat, pcie_lat, ib_lat = lat_us
    node, edge = graph_writers(g)
    gpn = spec.gpus_per_node
    nvlink_Bps = spec.chip.scaleup_link_Bps
    nvls = spec.chip.in_network_reduction
    dragonfly = spec.layout == "dragonfly"
    n_switches = spec.nvswitches_per_node
    to_switch = [(s, Bps_to_GBps(nl * nvlink_Bps), nl) for s, nl in enumerate(spec.gpu_switch_links)]
    mesh, mesh_GBps, mesh_lat = spec.mesh_links, Bps_to_GBps(spec.mesh_links * nvlink_Bps), 2 * nvl_lat
    k = spec.nics_per_gpu                 # a GPU striping several NICs reaches its leaf over all
    nic_GBps = Bps_to_GBps(k * min(spec.nic_Bps, spec.ib_port_Bps))
    pcie_GBps = Bps_to_GBps(spec.pcie_Bps)
    net = spec.transport
    rails = [spec.rail_of(local) for local in range(gpn)]
    host_gpus = spec.host_gpus
    hosts = gpn // host_gpus

    def build(n: int) -> None:
        su = n // spec.su_nodes
        switches = [f"n{n}/nvs{s}" for s in range(n_switches)]
        for sw in switches:
            node(sw, kind="nvswitch", node=n, nvls=nvls)
        base = n * gpn
        for local in range(gpn):
            dev = base + local
            rail = rails[local]
            node(dev, kind="gpu", node=n, local=local, rail=rail, host=n * hosts + local // host_gpus)
            for s, bw, nl in to_switch:
                edge(dev, switches[s], bandwidth_GBps=bw, latency_us=nvl_lat, kind="nvlink", cables=nl)
            # No NVSwitch (4-GPU HGX boards): mesh_links NVLinks straight to every earlier GPU;
            # one hop GPU to GPU, so each edge carries both halves of the switch path's latency.
            for peer in range(base, dev) if mesh else ():
                edge(peer, dev, bandwidth_GBps=mesh_GBps, latency_us=mesh_lat, kind="nvlink",
                     cables=mesh)
            nic = f"n{n}/nic{rail}"
            if nic not in g:           # GPUs sharing a NIC reach it over their own PCIe lanes
                node(nic, kind="nic", node=n, rail=rail)
                # a dragonfly switch takes every NIC of its nodes (no rail planes)
                leaf = f"sw/{su}" if dragonfly else f"leaf/s{su}/r{rail}"
                if leaf not in g:
                    node(leaf, kind="leaf", su=su, rail=None if dragonfly else rail, sharp=sharp)
                edge(nic, leaf, bandwidth_GBps=nic_GBps, latency_us=ib_lat, kind=net, cables=k)
            edge(dev, nic, bandwidth_GBps=pcie_GBps, latency_us=pcie_lat, kind="pcie", cables=1)

    return build


def _build_spines(g: nx.Graph, sus: int, rails: int, up_ports: float, radix: int, port: float,
                  lat_us: float, net: str, sharp: bool, link: Any) -> None:
    """Adds the two-tier spine layer: every leaf reaches every spine (NV-SPOD-H100 4-SU layout:
    32 leaves x 2 cables to 16 spines)."""
    leaves = [(su, r) for su in range(sus) for r in range(rails)]
    n_spines = math.ceil(len(leaves) * up_ports / radix)
    spines = [f"spine/{i}" for i in range(n_spines)]
    for sp in spines:
        g.add_node(sp, kind="spine", sharp=sharp)
    for su, r in leaves:
        for sp in spines:
            link(f"leaf/s{su}/r{r}", sp, up_ports * port / n_spines, lat_us, net, up_ports / n_spines)


def _build_rail_spines(g: nx.Graph, sus: int, rails: int, up_ports: float, radix: int, port: float,
                       lat_us: float, net: str, sharp: bool, link: Any) -> None:
    """Adds the three-tier layers: one spine group per rail (half of each spine's ports down),
    cores joining the groups."""
    per_rail = math.ceil(sus * up_ports / (radix / 2))
    n_cores = math.ceil(rails * per_rail * (radix / 2) / radix)
    cores = [f"core/{i}" for i in range(n_cores)]
    for c in cores:
        g.add_node(c, kind="core", sharp=sharp)
    for r in range(rails):
        group = [f"spine/r{r}/{i}" for i in range(per_rail)]
        for i, sp in enumerate(group):
            g.add_node(sp, kind="spine", rail=r, sharp=sharp)
            # Spine i of every rail uses the same slice of cores, so the core layer mixes rails.
            for ci, share in _spread(i, radix // 2, n_cores).items():
                link(sp, cores[ci], share * port, lat_us, net, share)
        for su in range(sus):
            leaf = f"leaf/s{su}/r{r}"
            for sp in group:
                link(leaf, sp, up_ports * port / per_rail, lat_us, net, up_ports / per_rail)


def _build_pods(g: nx.Graph, spec: GpuClusterSpec, sus: int, rails: int, up_ports: float,
                radix: int, port: float, lat_us: float, net: str, sharp: bool, link: Any) -> int:
    """Frontier-scale three tiers (``pod_sus``): per pod and rail plane a non-blocking leaf-spine
    (every leaf of rail r in the pod reaches every spine of plane r), spines with half their ports
    down; a core layer takes ``1 / core_oversubscription`` of the spines' down capacity up and
    joins every pod's plane-r spines (spine i of every plane and pod starts at the same core slice,
    so the core mixes planes). Tiers built: 2 for one pod, 3 above. Leaves and spines carry their
    ``pod``; the router's trunks follow them (``sim.network.routing``)."""
    pods = math.ceil(sus / spec.pod_sus)
    per_plane = math.ceil(spec.pod_sus * up_ports / (radix / 2))
    spine_up = (radix / 2) / spec.core_oversubscription
    n_cores = math.ceil(pods * rails * per_plane * spine_up / radix) if pods > 1 else 0
    cores = [f"core/{i}" for i in range(n_cores)]
    for c in cores:
        g.add_node(c, kind="core", sharp=sharp)
    reach = min(n_cores, max(1, math.ceil(spine_up)))     # cores each spine is cabled to
    for p in range(pods):
        for r in range(rails):
            group = [f"spine/p{p}/r{r}/{i}" for i in range(per_plane)]
            for i, sp in enumerate(group):
                g.add_node(sp, kind="spine", rail=r, pod=p, sharp=sharp)
                for k in range(reach):
                    ci = (i * reach + k) % n_cores
                    link(sp, cores[ci], spine_up * port / reach, lat_us, net, spine_up / reach)
            for su in range(p * spec.pod_sus, min(sus, (p + 1) * spec.pod_sus)):
                leaf = f"leaf/s{su}/r{r}"
                g.nodes[leaf]["pod"] = p
                for sp in group:
                    link(leaf, sp, up_ports * port / per_plane, lat_us, net, up_ports / per_plane)
    return 3 if pods > 1 else 2


def _build_dragonfly(g: nx.Graph, spec: GpuClusterSpec, switches: int, port: float,
                     lat_us: float, net: str, link: Any) -> int:
    """A dragonfly over the *switches* edge switches (``sw/i``): groups of ``group_switches``
    joined all-to-all inside by ``local_links`` cables per switch pair, and every pair of groups
    by ``global_links`` cables, cable j of groups (a, b) from switch (b + j) of a to switch
    (a + j) of b (Kim et al., ISCA 2008, "Technology-Driven, Highly-Scalable Dragonfly Topology":
    the balanced dragonfly's global-link arrangement). Tiers: 1 for one group (a switch hop and
    the local all-to-all), 2 with global links."""
    S = spec.group_switches
    groups = math.ceil(switches / S)
    for gr in range(groups):
        members = [i for i in range(gr * S, min(switches, (gr + 1) * S))]
        for a in members:
            g.nodes[f"sw/{a}"]["group"] = gr
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                link(f"sw/{a}", f"sw/{b}", spec.local_links * port, lat_us, net, spec.local_links)
    if spec.system_groups and groups > spec.system_groups:
        raise TopologyError(f"cluster.chips: {switches} dragonfly switches make {groups} groups of "
                            f"{S} but the machine has system_groups = {spec.system_groups}")

    def ends(a: int, b: int) -> list[int]:
        """The switches of group *a* its cables to group *b* leave from: cable j from switch
        (b + j) of a."""
        size = min(S, switches - a * S)
        return [a * S + (b + j) % size for j in range(spec.global_links)]

    cables: dict[tuple[int, int], int] = {}
    for a in range(groups):
        for b in range(a + 1, groups):
            for u, v in zip(ends(a, b), ends(b, a)):
                cables[(u, v)] = cables.get((u, v), 0) + 1
    for (u, v), c in sorted(cables.items()):
        link(f"sw/{u}", f"sw/{v}", c * port, lat_us, net, c)
    # The machine's other groups: each one node ("dfg/x", its switches and local cables taken
    # as never the bottleneck of traffic passing through) with its cables to every job group,
    # arranged as between job groups; they carry the non-minimal routes.
    for x in range(groups, spec.system_groups if groups > 1 else 0):
        g.add_node(f"dfg/{x}", kind="transit", group=x)
        transit: dict[int, int] = {}
        for a in range(groups):
            for u in ends(a, x):
                transit[u] = transit.get(u, 0) + 1
        for u, c in sorted(transit.items()):
            link(f"sw/{u}", f"dfg/{x}", c * port, lat_us, net, c)
    return 2 if groups > 1 else 1


def _spread(i: int, ports: int, targets: int) -> dict[int, float]:
    """Cables from the i-th switch's *ports* up-ports to *targets* switches, round-robin.

    Switch i starts at target ``i * ports mod targets``; with more ports than targets each target
    gets ``ports / targets`` cables.
    """
    out: dict[int, float] = {}
    if ports >= targets:
        return {t: ports / targets for t in range(targets)}
    for k in range(ports):
        t = (i * ports + k) % targets
        out[t] = out.get(t, 0.0) + 1.0
    return out
