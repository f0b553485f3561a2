"""Topology files -> TopologySpec: a bundled name or a path, parsed once per content.

The file's schema (topologies/README.md) is read with the same section reader as scenarios, so
every error names the file, the field, the value and what would be valid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..hardware import Chip, get_chip
from ..topology_spec import NCCL_PROTOCOLS, TRANSPORTS, GpuClusterSpec, TopologySpec, TpuPodSpec
from ..units import GB, Gbps_to_Bps, us_to_s
from .fields import Section
from .paths import check_name, topology_dir
from .yamlio import parse_yaml, read_text

__all__ = ["load_topology_spec", "resolve_topology_path"]


_GPU_NODE_KEYS = frozenset({"gpus", "nvswitches", "gpu_switch_links", "nvlink_latency_us", "nics",
                            "nic_Gbps", "pcie_GBps", "pcie_latency_us", "mesh_links",
                            "gpus_per_host"})
_GPU_FABRIC_KEYS = frozenset({"ib_port_Gbps", "ib_latency_us", "su_nodes", "leaf_down_ports",
                              "leaf_up_ports", "two_tier_max_sus", "max_gpus", "sharp",
                              "oversubscription", "transport", "port_Gbps", "link_latency_us",
                              "net_latency_us", "net_simple_overhead_us", "net_protocols", "tuner_plugin", "pod_sus",
                              "net_channels",
                              "core_oversubscription", "layout", "group_switches",
                              "local_links", "global_links", "system_groups", "global_ports"})
LAYOUTS = ("fat-tree", "dragonfly")
# Scale-out transports: sim.topology_spec.TRANSPORTS. InfiniBand names its port fields ib_*; the
# others port_Gbps / link_latency_us.
# Net plugins' tuner tables, for ``fabric.tuner_plugin``: sim.collectives.plugin_tuner.PLATFORMS's
# keys (not imported: sim.collectives loads the config package; a test keeps the two equal)
TUNER_PLUGINS = ("aws-p5", "aws-p6")
_TPU_KEYS = frozenset({"name", "kind", "chip", "default_chips", "ndims", "cube", "max_shape",
                       "subcube_shapes", "pod_shapes", "wrap_len", "chips_per_host", "ici_latency_us",
                       "pcie_GBps", "pcie_latency_us", "dcn_latency_us", "twisted_allowed",
                       "multi_pod", "max_cubes"})


def bundled_topologies() -> list[str]:
    """The names of the topology files bundled in ``topologies/``, sorted."""
    return sorted(f.stem for f in topology_dir().glob("*.yaml"))


def resolve_topology_path(name_or_path: str, where: str = "cluster.topology") -> Path:
    """A bundled topology name (``dgx-h100``) or a path to a YAML file."""
    check_name(name_or_path, where)
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise ConfigError(f"{where}: no topology file {str(p)!r}")
        return p
    bundled = topology_dir() / f"{name_or_path}.yaml"
    if bundled.is_file():
        return bundled
    raise ConfigError(f"{where}: unknown topology {name_or_path!r}; valid: "
                      f"{', '.join(bundled_topologies())} "
                      "or a path to a topology YAML file")


# Parsed topology files by (path, content): every scenario names one, and the validation suites
# load hundreds of scenarios on the same few files. Specs are frozen, so sharing them is safe.
_SPECS: dict[tuple[str, str], TopologySpec] = {}


def load_topology_spec(name_or_path: str, where: str = "cluster.topology") -> TopologySpec:
    """Parse a topology file (bundled name or path) into a spec."""
    path = resolve_topology_path(name_or_path, where)
    text = read_text(path, "topology")
    key = (str(path), text)
    if key not in _SPECS:
        _SPECS[key] = _topology_spec(path, parse_yaml(text, path, "topology"))
    return _SPECS[key]


def _topology_spec(path: Path, raw: Mapping[str, Any]) -> TopologySpec:
    kind = raw.get("kind")
    f = str(path)
    if kind == "gpu_cluster":
        return _gpu_spec(Section(raw, f"{f}:", {"name", "kind", "chip", "default_chips", "node",
                                                  "fabric"}))
    if kind == "tpu_pod":
        return _tpu_spec(Section(raw, f"{f}:", _TPU_KEYS))
    raise ConfigError(f"{f}: kind: got {kind!r}; valid: gpu_cluster, tpu_pod")


def _chip(s: Section) -> Chip:
    return get_chip(s.text("chip"), s.at("chip"))


def _net_protocols(fab: Section) -> tuple[str, ...]:
    """``fabric.net_protocols``: NCCL's protocols a call across nodes may use; Simple is always
    among them (every algorithm has it; the others are NCCL's low-latency variants)."""
    names = fab.text_list("net_protocols", NCCL_PROTOCOLS, NCCL_PROTOCOLS)
    if "Simple" not in names:
        raise ConfigError(f"{fab.at('net_protocols')}: must include Simple (every NCCL algorithm "
                          f"runs it), got {list(names)}")
    return names


def _gpu_spec(s: Section) -> GpuClusterSpec:
    node = s.section("node", _GPU_NODE_KEYS)
    fab = s.section("fabric", _GPU_FABRIC_KEYS)
    chip = _chip(s)
    gpus = node.integer("gpus")
    nvswitches, links, mesh = _nvlink_layout(node, chip, gpus)
    host = node.opt_int("gpus_per_host") or 0
    if host and gpus % host:
        raise ConfigError(f"{node.at('gpus_per_host')}: must divide node.gpus ({gpus}), got {host}")
    transport = fab.text("transport", "ib", choices=TRANSPORTS)
    port_key, lat_key = (("ib_port_Gbps", "ib_latency_us") if transport == "ib"
                         else ("port_Gbps", "link_latency_us"))
    for wrong in ({"ib_port_Gbps", "ib_latency_us", "port_Gbps", "link_latency_us"}
                  - {port_key, lat_key}):
        if fab.has(wrong):
            raise ConfigError(f"{fab.at(wrong)}: not a field of a {transport} fabric; give "
                              f"{port_key} and {lat_key}")
    nics = node.integer("nics")
    nics_per_gpu = nics // gpus if nics > gpus else 1
    if nics > gpus and nics % gpus:
        raise ConfigError(f"{node.at('nics')}: {nics} NICs for {gpus} GPUs; valid: a divisor of "
                          f"{gpus} or a multiple of it (several NICs per GPU)")
    net_lat = fab.number("net_latency_us") if fab.has("net_latency_us") else None
    layout = fab.text("layout", "fat-tree", choices=LAYOUTS)
    df = layout == "dragonfly"
    if not df:
        for key in ("group_switches", "local_links", "global_links", "system_groups",
                    "global_ports"):
            if fab.has(key):
                raise ConfigError(f"{fab.at(key)}: a field of a dragonfly (layout: dragonfly), "
                                  f"not of a {layout}")
    spec = GpuClusterSpec(
        name=s.text("name"), chip=chip, gpus_per_node=gpus, nvswitches_per_node=nvswitches,
        gpu_switch_links=links, nvlink_latency_s=us_to_s(node.number("nvlink_latency_us")),
        nics_per_node=nics, nic_Bps=Gbps_to_Bps(node.number("nic_Gbps", strict_min=True)),
        pcie_Bps=node.number("pcie_GBps", strict_min=True) * GB,
        pcie_latency_s=us_to_s(node.number("pcie_latency_us")),
        ib_port_Bps=Gbps_to_Bps(fab.number(port_key, strict_min=True)),
        ib_latency_s=us_to_s(fab.number(lat_key)), su_nodes=fab.integer("su_nodes"),
        leaf_down_ports=fab.integer("leaf_down_ports"), leaf_up_ports=fab.integer("leaf_up_ports"),
        two_tier_max_sus=fab.integer("two_tier_max_sus", 1 if df else None), max_gpus=fab.integer("max_gpus"),
        ib_sharp=fab.flag("sharp", False),
        oversubscription=fab.number("oversubscription", 1.0, minimum=1.0),
        default_chips=s.integer("default_chips", gpus), mesh_links=mesh,
        gpus_per_host=host if host != gpus else 0,
        transport=transport, nics_per_gpu=nics_per_gpu,
        net_latency_s=None if net_lat is None else us_to_s(net_lat),
        net_simple_overhead_s=us_to_s(fab.number("net_simple_overhead_us", 0.0)),
        net_protocols=_net_protocols(fab),
        tuner_plugin=fab.text("tuner_plugin", choices=TUNER_PLUGINS) if fab.has("tuner_plugin") else None,
        net_channels=fab.integer("net_channels", maximum=32) if fab.has("net_channels") else None,
        pod_sus=fab.opt_int("pod_sus") or 0,
        core_oversubscription=fab.number("core_oversubscription", 1.0, minimum=1.0),
        layout=layout,
        group_switches=fab.integer("group_switches") if df else 0,
        local_links=fab.integer("local_links", 1) if df else 0,
        global_links=_global_links(fab) if df else 0,
        system_groups=fab.integer("system_groups", 0, minimum=0) if df else 0,
    )
    if spec.nics_per_node <= 0 or (nics <= gpus and gpus % spec.nics_per_node):
        raise ConfigError(f"{node.at('nics')}: rail-optimized fabrics need the node's {gpus} GPUs "
                          f"spread evenly over its NICs; valid: a divisor or a multiple of {gpus}, got "
                          f"{spec.nics_per_node}")
    if spec.max_gpus % gpus:
        raise ConfigError(f"{fab.at('max_gpus')}: the largest cluster is whole {gpus}-GPU nodes "
                          f"(node.gpus); valid: a multiple of {gpus}, got {spec.max_gpus}")
    spec.resolve_chips(spec.default_chips, s.at("default_chips"))
    return spec


def _nvlink_layout(node: Section, chip: Chip, gpus: int) -> tuple[int, tuple[int, ...], int]:
    """(NVSwitches, links from a GPU to each, links per GPU pair): a node's GPUs meet in NVSwitches
    (``nvswitches`` > 0, ``gpu_switch_links``) or, with ``nvswitches: 0``, are wired straight to
    each other (``mesh_links`` links per pair, 4-GPU HGX boards). Either way a GPU uses all of its
    chip's NVLink links."""
    nvswitches = node.integer("nvswitches", minimum=0)
    if nvswitches == 0:
        if node.has("gpu_switch_links"):
            raise ConfigError(f"{node.at('gpu_switch_links')}: a node with nvswitches: 0 has no "
                              "GPU-switch links; give mesh_links (NVLink links per GPU pair)")
        mesh = node.integer("mesh_links")
        if mesh * (gpus - 1) != chip.scaleup_links:
            raise ConfigError(f"{node.at('mesh_links')}: {mesh} links to each of {gpus - 1} peers "
                              f"is {mesh * (gpus - 1)} in all, but a {chip.name} has "
                              f"{chip.scaleup_links} NVLink links")
        return 0, (), mesh
    if node.has("mesh_links"):
        raise ConfigError(f"{node.at('mesh_links')}: only for nodes without NVSwitch "
                          f"(nvswitches: 0), got nvswitches: {nvswitches}")
    links = node.int_list("gpu_switch_links")
    if len(links) != nvswitches:
        raise ConfigError(f"{node.at('gpu_switch_links')}: needs one entry per NVSwitch "
                          f"({nvswitches}), got {len(links)}")
    if sum(links) != chip.scaleup_links:
        raise ConfigError(f"{node.at('gpu_switch_links')}: {sum(links)} links in all, but a "
                          f"{chip.name} has {chip.scaleup_links} NVLink links")
    return nvswitches, links, 0


def _tpu_spec(s: Section) -> TpuPodSpec:
    ndims = s.integer("ndims")
    if ndims not in (2, 3):
        raise ConfigError(f"{s.at('ndims')}: got {ndims}; valid: 2, 3")
    max_shape = s.int_list("max_shape")
    if len(max_shape) != ndims:
        raise ConfigError(f"{s.at('max_shape')}: needs {ndims} dimensions, got {list(max_shape)}")
    spec = TpuPodSpec(
        name=s.text("name"), chip=_chip(s), ndims=ndims,
        cube=s.integer("cube") if ndims == 3 else 0, max_shape=max_shape,
        subcube_shapes=s.shapes("subcube_shapes", ndims), pod_shapes=s.shapes("pod_shapes", ndims),
        wrap_len=s.integer("wrap_len", max(max_shape)), chips_per_host=s.integer("chips_per_host"),
        ici_latency_s=us_to_s(s.number("ici_latency_us")),
        pcie_Bps=s.number("pcie_GBps", strict_min=True) * GB,
        pcie_latency_s=us_to_s(s.number("pcie_latency_us")),
        dcn_latency_s=us_to_s(s.number("dcn_latency_us")),
        twisted_allowed=s.flag("twisted_allowed", False), multi_pod=s.flag("multi_pod", False),
        default_chips=s.integer("default_chips", math.prod(max_shape)),
        max_cubes=s.opt_int("max_cubes") or 0,
    )
    if spec.max_cubes and ndims != 3:
        raise ConfigError(f"{s.at('max_cubes')}: only 3-D slices of cubes have one, got ndims: {ndims}")
    if ndims == 2 and not spec.pod_shapes:
        raise ConfigError(f"{s.at('pod_shapes')}: a 2-D pod needs its list of slice shapes")
    if spec.chip.dcn_Bps is None and spec.multi_pod:
        raise ConfigError(f"{s.at('multi_pod')}: chip {spec.chip.name} has no DCN bandwidth")
    spec.resolve_shape(spec.default_chips, None, s.at("default_chips"))
    return spec


def _global_links(fab: Section) -> int:
    """Cables between each pair of dragonfly groups: ``global_links`` as given, or the port
    budget of a balanced dragonfly (Kim et al., ISCA 2008), each group's ``global_ports`` per
    switch x ``group_switches`` spread evenly over the machine's ``system_groups`` - 1 others."""
    if fab.has("global_links"):
        if fab.has("global_ports"):
            raise ConfigError(f"{fab.at('global_ports')}: global_links is given too; valid: "
                              "either the cables per pair of groups or the ports they come from")
        return fab.integer("global_links")
    if not (fab.has("global_ports") and fab.has("system_groups")):
        raise ConfigError(f"{fab.at('global_links')}: required (an integer), or global_ports and "
                          "system_groups to derive it from")
    ports, groups = fab.integer("global_ports"), fab.integer("system_groups")
    links = ports * fab.integer("group_switches") // max(1, groups - 1)
    if links < 1:
        raise ConfigError(f"{fab.at('global_ports')}: {ports} a switch leave no cable between "
                          f"each pair of {groups} groups; valid: at least "
                          f"{-(-(groups - 1) // fab.integer('group_switches'))}")
    return links
