"""Scenario and topology files -> validated, frozen config objects.

The only module that reads YAML (``yaml.SafeLoader``, duplicate keys and deep nesting refused). Every error is a ``ConfigError`` that
names the file, the dotted field, the value found and what would be valid. Nothing downstream sees
a dict.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .hardware import Chip, get_chip
from .models import PRESETS, MoE, ModelSpec
from .software import SoftwareProfile, resolve_software
from .topology_spec import GpuClusterSpec, SliceShape, TopologySpec, TpuPodSpec
from .units import Gbps_to_Bps, GB, us_to_s

__all__ = [
    "ClusterConfig", "CostConfig", "FailuresConfig", "ParallelismConfig", "Scenario",
    "StragglersConfig", "TrainingConfig", "load_scenario", "load_topology_spec", "scenario_from_dict",
    "topology_dir", "scenario_dir", "load_cluster", "apply_overrides", "set_key", "parse_value",
    "read_scenario_raw", "scenario_keys",
]

PRESETS_NAMES = tuple(sorted(PRESETS))

# The bundled data ships inside the package (sim/data/; the repository's top-level topologies/,
# scenarios/ and validation/ are links to it), so an installed clustersim finds it anywhere.
DATA_DIR = Path(__file__).resolve().parent / "data"


def topology_dir() -> Path:
    """Folder of the bundled topologies (``$CLUSTERSIM_TOPOLOGIES`` overrides)."""
    return Path(os.environ.get("CLUSTERSIM_TOPOLOGIES", DATA_DIR / "topologies"))


def scenario_dir() -> Path:
    """Folder of the bundled scenarios: ``clustersim run default`` finds ``default.yaml`` there."""
    return DATA_DIR / "scenarios"


# ----------------------------------------------------------------------------- field readers

class _Section:
    """A mapping being read: tracks its place for messages and rejects unknown keys."""

    def __init__(self, raw: object, where: str, allowed: frozenset[str] | set[str]) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {_show(raw)}")
        if unknown := sorted(set(map(str, raw)) - set(allowed)):
            raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
        self.raw = raw
        self.where = where

    def at(self, key: str) -> str:
        if self.where == "scenario":           # top level: fields are named by their own key
            return key
        return f"{self.where}.{key}" if not self.where.endswith(":") else f"{self.where} {key}"

    def has(self, key: str) -> bool:
        return key in self.raw and self.raw[key] is not None

    def integer(self, key: str, default: int | None = None, minimum: int | None = 1,
                maximum: int | None = None) -> int:
        v = self.raw.get(key, default)
        if v is None:
            raise ConfigError(f"{self.at(key)}: required (an integer)")
        if isinstance(v, float) and v.is_integer() and abs(v) < 2**63:
            v = int(v)                    # YAML reads 1e6 as a float; a whole one is an integer
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{self.at(key)}: expected an integer, got {_show(v)}")
        if minimum is not None and v < minimum:
            raise ConfigError(f"{self.at(key)}: must be >= {minimum}, got {v}")
        limit = maximum if maximum is not None else _MAX_INT.get(key)
        if limit is not None and v > limit:
            raise ConfigError(f"{self.at(key)}: must be <= {limit:,}, got {v:,}")
        return v

    def opt_int(self, key: str, minimum: int = 1) -> int | None:
        return self.integer(key, minimum=minimum) if self.has(key) else None

    def number(self, key: str, default: float | None = None, minimum: float | None = 0.0,
              maximum: float | None = None, strict_min: bool = False) -> float:
        v = self.raw.get(key, default)
        if v is None:
            raise ConfigError(f"{self.at(key)}: required (a number)")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"{self.at(key)}: expected a finite number, got {_show(v)}")
        if minimum is not None and (v < minimum or (strict_min and v == minimum)):
            op = ">" if strict_min else ">="
            raise ConfigError(f"{self.at(key)}: must be {op} {minimum}, got {v}")
        limit = maximum if maximum is not None else _MAX_NUMBER.get(key)
        if limit is not None and v > limit:
            raise ConfigError(f"{self.at(key)}: must be <= {limit:g}, got {v:g}")
        if key in _MIN_NUMBER and v < _MIN_NUMBER[key]:
            raise ConfigError(f"{self.at(key)}: must be >= {_MIN_NUMBER[key]:g}, got {v:g}")
        return float(v)

    def text(self, key: str, default: str | None = None, choices: tuple[str, ...] | None = None) -> str:
        v = self.raw.get(key, default)
        if v is None:
            raise ConfigError(f"{self.at(key)}: required (a string)")
        if not isinstance(v, str):
            raise ConfigError(f"{self.at(key)}: expected a string, got {_show(v)}")
        if choices is not None and v not in choices:
            raise ConfigError(f"{self.at(key)}: got {v!r}; valid: {', '.join(choices)}")
        return v

    def flag(self, key: str, default: bool) -> bool:
        v = self.raw.get(key, default)
        if not isinstance(v, bool):
            raise ConfigError(f"{self.at(key)}: expected true or false, got {_show(v)}")
        return v

    def int_list(self, key: str) -> tuple[int, ...]:
        v = self.raw.get(key)
        if not isinstance(v, list) or not v or any(isinstance(x, bool) or not isinstance(x, int)
                                                  or x <= 0 for x in v):
            raise ConfigError(f"{self.at(key)}: expected a list of positive integers, got {_show(v)}")
        return tuple(v)

    def shapes(self, key: str, ndims: int) -> tuple[SliceShape, ...]:
        v = self.raw.get(key, [])
        if not isinstance(v, list):
            raise ConfigError(f"{self.at(key)}: expected a list of shapes, got {_show(v)}")
        out = []
        for i, s in enumerate(v):
            if (not isinstance(s, list) or len(s) != ndims
                    or any(isinstance(x, bool) or not isinstance(x, int) or x <= 0 for x in s)):
                raise ConfigError(f"{self.at(key)}[{i}]: expected {ndims} positive integers, got {_show(s)}")
            out.append(tuple(s))
        return tuple(out)

    def section(self, key: str, allowed: frozenset[str] | set[str]) -> "_Section":
        return _Section(self.raw.get(key), self.at(key), allowed)


# Upper bounds of fields, by key: beyond them a value is physically absurd (or would make the
# simulation run for hours); each names why. Lower bounds are at the readers' call sites.
_MAX_INT: dict[str, int] = {
    "chips": 1_000_000,              # a million accelerators: beyond any cluster built
    "layers": 10_000, "hidden": 1_000_000, "ffn_hidden": 10_000_000, "heads": 100_000,
    "kv_heads": 100_000, "head_dim": 65_536, "vocab": 100_000_000,
    "experts": 100_000, "top_k": 100_000,
    "seq_len": 100_000_000,          # 100 M tokens per sequence
    "global_batch": 1_000_000_000, "micro_batch": 1_000_000,
    "tp": 1_000_000, "pp": 100_000, "cp": 1_000_000, "ep": 1_000_000, "virtual_stages": 10_000,
    "zero_group": 1_000_000, "slices": 1_000,
    "monte_carlo_runs": 100_000,     # the failure Monte Carlo: 100 runs give 5-95% bands
    "seed": 2**63 - 1,
    "gpus": 1_024, "nvswitches": 1_024, "nics": 1_024, "su_nodes": 100_000,
    "leaf_down_ports": 10_000, "leaf_up_ports": 10_000, "two_tier_max_sus": 100_000,
    "max_gpus": 10_000_000, "cube": 1_024, "wrap_len": 100_000, "chips_per_host": 1_024,
    "default_chips": 10_000_000,
}
_MAX_NUMBER: dict[str, float] = {
    "compute_jitter_sigma": 1.0,     # log-normal sigma: 1 already spreads steps over e^+-2
    "slow_factor": 1_000.0,          # a chip 1,000x slower is a dead chip
    "horizon_days": 3_650.0,         # ten years
    "checkpoint_interval_min": 525_600.0, "checkpoint_write_s": 86_400.0,
    "checkpoint_load_s": 86_400.0, "detect_s": 86_400.0, "restart_s": 86_400.0,
    "swap_s": 86_400.0,              # a day for any one recovery step
    "planned_per_day": 1_000.0, "rate_scale": 10_000.0, "tokens": 1e18,
    "usd_per_chip_hour": 10_000.0, "oversubscription": 1_000.0, "capacity_factor": 1_000.0,
    "nvlink_latency_us": 1e6, "pcie_latency_us": 1e6, "ib_latency_us": 1e6,
    "ici_latency_us": 1e6, "dcn_latency_us": 1e6,          # one second per hop
    "nic_Gbps": 1e6, "ib_port_Gbps": 1e6, "pcie_GBps": 1e5,
}

# Lower bounds where a positive value can still be absurd: a 1 Gb/s NIC or a 0.1 GB/s PCIe link is
# slower than anything an accelerator has been attached with.
_MIN_NUMBER: dict[str, float] = {"nic_Gbps": 1.0, "ib_port_Gbps": 1.0, "pcie_GBps": 0.1}


def _show(v: object) -> str:
    text = repr(v)
    return (text[:60] + "...") if len(text) > 60 else f"{text} ({type(v).__name__})"


def _read_yaml(path: Path, what: str) -> Mapping[str, Any]:
    return _parse_yaml(_read_text(path, what), path, what)


def _read_text(path: Path, what: str) -> str:
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a {what} file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read {what}: {e.strerror}") from None
    return decode_utf8(data, str(path), what)


def decode_utf8(data: bytes, where: str, what: str) -> str:
    """*data* as UTF-8 text, or a ConfigError saying where the first bad byte is."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: a {what} file must be UTF-8 text; byte 0x{data[e.start]:02x} at "
                          f"offset {e.start} is not (binary, UTF-16 or Latin-1?); save it as UTF-8") from None


# Deepest nesting a scenario or topology file may have: the schemas need 4 levels; 50 leaves room
# and keeps yaml's recursive composer far from Python's recursion limit.
MAX_YAML_DEPTH = 50


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that rejects duplicate keys and nesting deeper than MAX_YAML_DEPTH."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            mark = self.peek_event().start_mark
            raise ConfigError(f"line {mark.line + 1}: nested deeper than {MAX_YAML_DEPTH} levels; "
                              "no clustersim file needs more than 4")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise ConfigError(f"line {key_node.start_mark.line + 1}: a mapping key must be a "
                                  f"plain value, got {type(key).__name__}") from None
            if key in seen:
                raise ConfigError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r} "
                                  f"(first on line {seen[key]}); each key may appear once")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def _parse_yaml(text: str, path: Path, what: str) -> Mapping[str, Any]:
    try:
        raw = yaml.load(text, Loader=_StrictLoader)      # noqa: S506 - a SafeLoader subclass
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}:{at}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: a {what} file must be a YAML mapping, got {_show(raw)}")
    return raw


# ----------------------------------------------------------------------------- topology files

_GPU_NODE_KEYS = frozenset({"gpus", "nvswitches", "gpu_switch_links", "nvlink_latency_us", "nics",
                            "nic_Gbps", "pcie_GBps", "pcie_latency_us"})
_GPU_FABRIC_KEYS = frozenset({"ib_port_Gbps", "ib_latency_us", "su_nodes", "leaf_down_ports",
                              "leaf_up_ports", "two_tier_max_sus", "max_gpus", "sharp",
                              "oversubscription"})
_TPU_KEYS = frozenset({"name", "kind", "chip", "default_chips", "ndims", "cube", "max_shape",
                       "subcube_shapes", "pod_shapes", "wrap_len", "chips_per_host", "ici_latency_us",
                       "pcie_GBps", "pcie_latency_us", "dcn_latency_us", "twisted_allowed",
                       "multi_pod"})


def resolve_topology_path(name_or_path: str, where: str = "cluster.topology") -> Path:
    """A bundled topology name (``dgx-h100``) or a path to a YAML file."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise ConfigError(f"{where}: no topology file {str(p)!r}")
        return p
    bundled = topology_dir() / f"{name_or_path}.yaml"
    if bundled.is_file():
        return bundled
    names = sorted(f.stem for f in topology_dir().glob("*.yaml"))
    raise ConfigError(f"{where}: unknown topology {name_or_path!r}; valid: {', '.join(names)} "
                      "or a path to a topology YAML file")


# Parsed topology files by (path, content): every scenario names one, and the validation suites
# load hundreds of scenarios on the same few files. Specs are frozen, so sharing them is safe.
_SPECS: dict[tuple[str, str], TopologySpec] = {}


def load_topology_spec(name_or_path: str, where: str = "cluster.topology") -> TopologySpec:
    """Parse a topology file (bundled name or path) into a spec."""
    path = resolve_topology_path(name_or_path, where)
    text = _read_text(path, "topology")
    key = (str(path), text)
    if key not in _SPECS:
        _SPECS[key] = _topology_spec(path, _parse_yaml(text, path, "topology"))
    return _SPECS[key]


def _topology_spec(path: Path, raw: Mapping[str, Any]) -> TopologySpec:
    kind = raw.get("kind")
    f = str(path)
    if kind == "gpu_cluster":
        return _gpu_spec(_Section(raw, f"{f}:", {"name", "kind", "chip", "default_chips", "node",
                                                  "fabric"}))
    if kind == "tpu_pod":
        return _tpu_spec(_Section(raw, f"{f}:", _TPU_KEYS))
    raise ConfigError(f"{f}: kind: got {kind!r}; valid: gpu_cluster, tpu_pod")


def _chip(s: _Section) -> Chip:
    return get_chip(s.text("chip"), s.at("chip"))


def _gpu_spec(s: _Section) -> GpuClusterSpec:
    node = s.section("node", _GPU_NODE_KEYS)
    fab = s.section("fabric", _GPU_FABRIC_KEYS)
    chip = _chip(s)
    nvswitches = node.integer("nvswitches")
    links = node.int_list("gpu_switch_links")
    if len(links) != nvswitches:
        raise ConfigError(f"{node.at('gpu_switch_links')}: needs one entry per NVSwitch "
                          f"({nvswitches}), got {len(links)}")
    if sum(links) != chip.scaleup_links:
        raise ConfigError(f"{node.at('gpu_switch_links')}: {sum(links)} links in all, but a "
                          f"{chip.name} has {chip.scaleup_links} NVLink links")
    gpus = node.integer("gpus")
    spec = GpuClusterSpec(
        name=s.text("name"), chip=chip, gpus_per_node=gpus, nvswitches_per_node=nvswitches,
        gpu_switch_links=links, nvlink_latency_s=us_to_s(node.number("nvlink_latency_us")),
        nics_per_node=node.integer("nics"), nic_Bps=Gbps_to_Bps(node.number("nic_Gbps", strict_min=True)),
        pcie_Bps=node.number("pcie_GBps", strict_min=True) * GB,
        pcie_latency_s=us_to_s(node.number("pcie_latency_us")),
        ib_port_Bps=Gbps_to_Bps(fab.number("ib_port_Gbps", strict_min=True)),
        ib_latency_s=us_to_s(fab.number("ib_latency_us")), su_nodes=fab.integer("su_nodes"),
        leaf_down_ports=fab.integer("leaf_down_ports"), leaf_up_ports=fab.integer("leaf_up_ports"),
        two_tier_max_sus=fab.integer("two_tier_max_sus"), max_gpus=fab.integer("max_gpus"),
        ib_sharp=fab.flag("sharp", False),
        oversubscription=fab.number("oversubscription", 1.0, minimum=1.0),
        default_chips=s.integer("default_chips", gpus),
    )
    if spec.nics_per_node <= 0 or gpus % spec.nics_per_node:
        raise ConfigError(f"{node.at('nics')}: rail-optimized fabrics need the node's {gpus} GPUs "
                          f"spread evenly over its NICs; valid: a divisor of {gpus}, got "
                          f"{spec.nics_per_node}")
    spec.resolve_chips(spec.default_chips, s.at("default_chips"))
    return spec


def _tpu_spec(s: _Section) -> TpuPodSpec:
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
    )
    if ndims == 2 and not spec.pod_shapes:
        raise ConfigError(f"{s.at('pod_shapes')}: a 2-D pod needs its list of slice shapes")
    if spec.chip.dcn_Bps is None and spec.multi_pod:
        raise ConfigError(f"{s.at('multi_pod')}: chip {spec.chip.name} has no DCN bandwidth")
    spec.resolve_shape(spec.default_chips, None, s.at("default_chips"))
    return spec


# ----------------------------------------------------------------------------- scenarios

@dataclass(frozen=True, slots=True)
class ClusterConfig:
    topology: TopologySpec
    chips: int
    shape: SliceShape | None = None       # TPU: per-pod slice shape
    pods: int = 1                         # TPU: slices (pods) joined over the DCN
    twisted: bool = False
    oversubscription: float | None = None # None: the topology file's value
    sharp: bool | None = None             # InfiniBand SHARP in the switches; None: the file's value
    background_load: float = 0.0          # share of every inter-node link taken by other jobs

    @property
    def chip(self) -> Chip:
        return self.topology.chip


@dataclass(frozen=True, slots=True)
class TrainingConfig:
    seq_len: int = 4096
    global_batch: int | None = None       # sequences per step; None: dp x micro_batch x max(1, 4 x pp)
    micro_batch: int = 1
    precision: str = "bf16"
    recompute: str = "selective"
    tokens: float | None = None           # token budget to train (time, chip-hours, cost, energy)


@dataclass(frozen=True, slots=True)
class ParallelismConfig:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1                           # derived: chips / (tp x pp x cp)
    zero: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1
    sequence_parallel: bool = True
    zero_group: int = 0                   # dp ranks one ZeRO/FSDP shard group spans; 0: all of dp

    @property
    def shard_dp(self) -> int:
        """Data-parallel ranks that split the ZeRO-sharded states (the rest hold replicas)."""
        return self.zero_group or self.dp


@dataclass(frozen=True, slots=True)
class StragglersConfig:
    compute_jitter_sigma: float = 0.0
    slow_fraction: float = 0.0
    slow_factor: float = 1.0
    link_degrade_fraction: float = 0.0
    link_bandwidth_factor: float = 1.0


@dataclass(frozen=True, slots=True)
class FailuresConfig:
    horizon_days: float = 30.0
    checkpoint_interval_min: float | None = None   # None: "auto" (Young/Daly)
    checkpoint_write_s: float = 60.0
    checkpoint_load_s: float = 120.0
    detect_s: float = 300.0
    restart_s: float = 600.0
    swap_s: float | None = None          # None: 600 s GPU node swap, 10 s TPU OCS cube swap
    planned_per_day: float = 0.0         # planned interruptions (Llama 3: 47 in 54 days = 0.87)
    rate_scale: float = 1.0              # multiplies the catalogue failure rates
    tokens: float | None = None          # token budget: report the time to train it
    monte_carlo_runs: int = 100


@dataclass(frozen=True, slots=True)
class CostConfig:
    usd_per_chip_hour: float


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    source: str                           # file it came from ("<dict>" when built in code)
    cluster: ClusterConfig
    model: ModelSpec
    training: TrainingConfig
    parallelism: ParallelismConfig
    stragglers: StragglersConfig | None
    failures: FailuresConfig | None
    cost: CostConfig
    seed: int = 0
    software: SoftwareProfile | None = None   # None only for scenarios built by hand in tests
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


_CLUSTER_KEYS = frozenset({"topology", "chips", "slice", "slices", "twisted", "oversubscription",
                           "sharp", "background_load"})
_TOP_KEYS = frozenset({"name", "cluster", "model", "training", "parallelism", "stragglers",
                       "failures", "cost", "seed", "software"})
_MODEL_KEYS = frozenset({"preset", "name", "layers", "hidden", "ffn_hidden", "heads", "kv_heads",
                         "head_dim", "vocab", "mlp", "moe"})


# Figure formats matplotlib writes for --plot.
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def check_output_path(path: str, flag: str, suffixes: Sequence[str] = ()) -> Path:
    """An output file the command can write (with one of *suffixes*, when given), checked before
    any work: a ConfigError otherwise."""
    if not path:
        raise ConfigError(f"{flag}: empty file name; give the path of the file to write")
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag}: {path!r} is a folder; give a file name inside it")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{flag}: folder {str(parent)!r} does not exist; create it first")
    if (p.exists() and not os.access(p, os.W_OK)) or (not p.exists() and not os.access(parent, os.W_OK)):
        raise ConfigError(f"{flag}: cannot write {path!r} (permission denied)")
    if suffixes and p.suffix not in suffixes:
        raise ConfigError(f"{flag}: {path!r}: valid suffixes are {', '.join(suffixes)}")
    return p



def read_scenario_raw(path: str | os.PathLike[str]) -> tuple[Mapping[str, Any], str, str]:
    """(parsed mapping, source path, default name) of a scenario file or bundled scenario name."""
    p = Path(path)
    if not p.is_file():
        bundled = scenario_dir() / f"{p}.yaml"
        if p.suffix == "" and bundled.is_file():
            p = bundled
        else:
            raise ConfigError(f"{path}: no such scenario file")
    return _read_yaml(p, "scenario"), str(p), p.stem


def load_scenario(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> Scenario:
    """Read and validate a scenario file (DESIGN.md schema), with ``--set KEY=VALUE`` overrides."""
    raw, source, name = read_scenario_raw(path)
    return scenario_from_dict(apply_overrides(raw, overrides), source, default_name=name)


# Keys of each scenario section (for the readers below and for --set / --over).
_SECTION_KEYS: dict[str, frozenset[str]] = {
    "training": frozenset({"seq_len", "global_batch", "micro_batch", "precision", "recompute",
                           "tokens"}),
    "parallelism": frozenset({"tp", "pp", "cp", "ep", "zero", "zero_group", "schedule",
                              "virtual_stages", "sequence_parallel"}),
    "software": frozenset({"framework", "attention"}),
    "cost": frozenset({"usd_per_chip_hour"}),
    "stragglers": frozenset(StragglersConfig.__slots__),
    "failures": frozenset(FailuresConfig.__slots__),
}


def scenario_keys() -> dict[str, frozenset[str]]:
    """Every section and its keys (``cluster``, ``model`` included): what --set may name."""
    return {"cluster": _CLUSTER_KEYS, "model": _MODEL_KEYS, **_SECTION_KEYS}


_TOKEN_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}


def parse_tokens(v: object, where: str) -> float:
    """A token count: a number, or text like ``15T``, ``300B``, ``2.5e12`` (K/M/B/T = 10^3/6/9/12)."""
    if isinstance(v, str):
        t = v.strip().upper()
        if not re.fullmatch(r"\d+(\.\d*)?(E[+-]?\d+)?[KMBGTP]?", t, re.ASCII):
            raise ConfigError(f"{where}: expected a token count like 15T, 300B or 2.5e12, got {v!r}")
        mult = _TOKEN_SUFFIX.get(t[-1:], 1.0)
        v = float(t[:-1] if t[-1:] in _TOKEN_SUFFIX else t) * mult
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 1:
        raise ConfigError(f"{where}: expected a token count >= 1 like 15T or 300B, got {_show(v)}")
    if v > 1e18:
        raise ConfigError(f"{where}: must be <= 1e18 tokens, got {v:g}")
    return float(v)


def parse_value(text: str, where: str) -> Any:
    """A command-line value as a YAML scalar: ``2048`` int, ``0.5`` float, ``true``, ``bf16``."""
    if re.fullmatch(r"\s*[-+]?\d+(\.\d*)?[eE][-+]?\d+\s*", text, re.ASCII):
        return float(text)               # 1e12: YAML 1.1 would read it as text
    try:
        v = yaml.load(text, Loader=_StrictLoader) if text.strip() else ""   # noqa: S506
    except (yaml.YAMLError, ConfigError) as e:
        raise ConfigError(f"{where}: cannot read value {text!r} ({e})") from None
    if isinstance(v, (dict, list)):
        raise ConfigError(f"{where}: expected one value (a number, true/false or a name), got {text!r}")
    return v


def set_key(raw: dict[str, Any], dotted: str, value: Any, where: str) -> None:
    """Set a dotted scenario key (``cluster.chips``, ``model.moe.experts``, ``seed``) in *raw*,
    naming the valid keys when it is not one."""
    parts = dotted.split(".")
    keys = scenario_keys()
    top = parts[0]
    if top not in _TOP_KEYS:
        raise ConfigError(f"{where}: unknown key {dotted!r}; valid: {', '.join(sorted(_TOP_KEYS))} "
                          "and their fields (e.g. cluster.chips, parallelism.tp)")
    if len(parts) == 1:
        if top in keys and top != "model":
            raise ConfigError(f"{where}: {dotted!r} is a section; name one of its fields: "
                              f"{', '.join(f'{top}.{k}' for k in sorted(keys[top]))}")
        raw[top] = value
        return
    if top not in keys or parts[1] not in keys[top]:
        valid = sorted(keys.get(top, ()))
        raise ConfigError(f"{where}: unknown key {dotted!r}; valid under {top}: "
                          f"{', '.join(valid) if valid else '(none: it takes one value)'}")
    if len(parts) > 2 and not (top == "model" and parts[1] == "moe" and len(parts) == 3):
        raise ConfigError(f"{where}: {dotted!r} is nested too deeply; valid: SECTION.FIELD "
                          "(model.moe.FIELD for experts)")
    node = raw.get(top)
    if top == "model" and isinstance(node, str):
        node = {"preset": node}                  # a preset name becomes a preset plus overrides
    node = dict(node) if isinstance(node, Mapping) else {}
    raw[top] = node
    for p in parts[1:-1]:
        node[p] = dict(node[p]) if isinstance(node.get(p), Mapping) else {}
        node = node[p]
    node[parts[-1]] = value


def apply_overrides(raw: Mapping[str, Any], overrides: Sequence[str],
                    flag: str = "--set") -> dict[str, Any]:
    """A copy of *raw* with each ``KEY=VALUE`` of *overrides* applied (values as YAML scalars)."""
    out = dict(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag}: expected KEY=VALUE (e.g. cluster.chips=2048), got {item!r}")
        set_key(out, key.strip(), parse_value(text, f"{flag} {key.strip()}"), f"{flag} {key.strip()}")
    return out


def scenario_from_dict(raw: Mapping[str, Any], source: str = "<dict>",
                       default_name: str = "scenario") -> Scenario:
    """Validate an already-parsed scenario mapping; *source* prefixes every message."""
    try:
        return _scenario(raw, source, default_name)
    except ConfigError as e:
        msg = str(e)
        raise ConfigError(msg if msg.startswith(source) else f"{source}: {msg}") from None


def _scenario(raw: Mapping[str, Any], source: str, default_name: str) -> Scenario:
    top = _Section(raw, "scenario", _TOP_KEYS)
    cluster = _cluster(top.section("cluster", _CLUSTER_KEYS))
    if not top.has("model"):
        raise ConfigError(f"model: required; a preset name ({', '.join(sorted(PRESETS))}) "
                          "or a mapping with layers, hidden, ffn_hidden, heads, kv_heads, vocab")
    model = _model(raw["model"])
    training = _training(top.section("training", _SECTION_KEYS["training"]), cluster)
    par = _parallelism(top.section("parallelism", _SECTION_KEYS["parallelism"]), cluster, model)
    soft_s = top.section("software", _SECTION_KEYS["software"])
    software = resolve_software(soft_s.text("framework") if soft_s.has("framework") else None,
                                soft_s.text("attention") if soft_s.has("attention") else None,
                                cluster.chip)
    if training.precision == "fp8" and not software.fp8_linear:
        raise ConfigError(f"training.precision: fp8 needs a framework with FP8 linear layers; "
                          f"{software.framework} has none; use bf16, or software.framework: "
                          "megatron-te, pytorch-eager, torch-compile, pytorch-fsdp, llm-foundry, "
                          "maxtext or paxml")
    strag = (_stragglers(top.section("stragglers", _SECTION_KEYS["stragglers"]))
             if "stragglers" in raw else None)
    fail = (_failures(top.section("failures", _SECTION_KEYS["failures"]))
            if "failures" in raw else None)
    cost_s = top.section("cost", _SECTION_KEYS["cost"])
    default_price = cluster.chip.usd_per_chip_hour
    if not cost_s.has("usd_per_chip_hour") and default_price is None:
        raise ConfigError(f"cost.usd_per_chip_hour: required, the catalogue has no price for "
                          f"{cluster.chip.name}")
    cost = CostConfig(cost_s.number("usd_per_chip_hour", default_price))
    name = top.text("name", default_name)
    seed = top.integer("seed", 0, minimum=0)
    return Scenario(name=name, source=source, cluster=cluster, model=model, training=training,
                    parallelism=par, stragglers=strag, failures=fail, cost=cost, seed=seed,
                    software=software, raw=raw)


def _cluster(s: _Section) -> ClusterConfig:
    spec = load_topology_spec(s.text("topology", "dgx-h100"), s.at("topology"))
    chips = s.opt_int("chips")
    twisted = s.flag("twisted", False)
    over = s.number("oversubscription", minimum=1.0) if s.has("oversubscription") else None
    sharp = s.flag("sharp", False) if s.has("sharp") else None
    # Other jobs' traffic on the fabric: the fraction of every inter-node link (InfiniBand, DCN)
    # it takes. 0.95 at most: a fabric with nothing left is not a cluster this job runs on.
    load = s.number("background_load", 0.0, minimum=0.0, maximum=0.95)
    if isinstance(spec, GpuClusterSpec):
        if s.has("slice"):
            raise ConfigError(f"{s.at('slice')}: only TPU topologies take a slice shape; "
                              f"{spec.name} is sized by cluster.chips")
        if twisted:
            raise ConfigError(f"{s.at('twisted')}: only TPU 3-D tori can be twisted, not {spec.name}")
        if s.has("slices"):
            raise ConfigError(f"{s.at('slices')}: only TPU topologies join slices over a DCN; "
                              f"{spec.name} is sized by cluster.chips")
        return ClusterConfig(spec, spec.resolve_chips(chips, s.at("chips")), oversubscription=over,
                             sharp=sharp, background_load=load)
    if sharp:
        raise ConfigError(f"{s.at('sharp')}: InfiniBand SHARP is for GPU fat-trees, not {spec.name}")
    if over is not None:
        raise ConfigError(f"{s.at('oversubscription')}: only fat-tree GPU topologies have one")
    slice_ = s.text("slice") if s.has("slice") else None
    shape, pods = spec.resolve_shape(chips, slice_, s.where, s.opt_int("slices"))
    if twisted:
        spec.check_twist(shape, s.where)
    return ClusterConfig(spec, math.prod(shape) * pods, shape=shape, pods=pods, twisted=twisted,
                         background_load=load)


def _model(raw: object) -> ModelSpec:
    if isinstance(raw, str):
        raw = {"preset": raw}
    s = _Section(raw, "model", _MODEL_KEYS)
    base: ModelSpec | None = None
    if s.has("preset"):
        name = s.text("preset")
        if name not in PRESETS:
            raise ConfigError(f"model.preset: unknown model {name!r}; valid: {', '.join(sorted(PRESETS))}")
        base = PRESETS[name]

    def pick(key: str) -> int:
        if base is not None and not s.has(key):
            return int(getattr(base, key))
        return s.integer(key)

    moe = base.moe if base is not None else None
    if s.has("moe"):
        m = s.section("moe", {"experts", "top_k", "capacity_factor"})
        moe = MoE(experts=m.integer("experts"), top_k=m.integer("top_k"),
                  capacity_factor=m.number("capacity_factor", 1.0, minimum=0.0, strict_min=True))
        if moe.top_k > moe.experts:
            raise ConfigError(f"model.moe.top_k: {moe.top_k} exceeds experts = {moe.experts}")
    spec = ModelSpec(
        name=s.text("name", base.name if base else "custom"),
        layers=pick("layers"), hidden=pick("hidden"), ffn_hidden=pick("ffn_hidden"),
        heads=pick("heads"), kv_heads=pick("kv_heads"), vocab=pick("vocab"),
        mlp=s.text("mlp", base.mlp if base else "swiglu", ("swiglu", "gelu")), moe=moe,
        head_dim_=s.opt_int("head_dim") if s.has("head_dim") or base is None else base.head_dim_,
    )
    if spec.head_dim_ is None and spec.hidden % spec.heads:
        raise ConfigError(f"model.heads: {spec.heads} does not divide hidden = {spec.hidden}; "
                          f"give model.head_dim where the attention width is not hidden")
    if spec.heads % spec.kv_heads:
        raise ConfigError(f"model.kv_heads: {spec.kv_heads} does not divide heads = {spec.heads}")
    return spec


def _training(s: _Section, cluster: ClusterConfig) -> TrainingConfig:
    t = TrainingConfig(
        seq_len=s.integer("seq_len", 4096),
        global_batch=s.opt_int("global_batch"),
        micro_batch=s.integer("micro_batch", 1),
        precision=s.text("precision", "bf16", ("bf16", "fp8")),
        recompute=s.text("recompute", "selective", ("none", "selective", "full")),
        tokens=parse_tokens(s.raw["tokens"], s.at("tokens")) if s.has("tokens") else None,
    )
    if t.precision == "fp8" and cluster.chip.fp8_flops is None:
        raise ConfigError(f"training.precision: fp8 is not supported on {cluster.chip.name}; use bf16")
    return t


def _parallelism(s: _Section, cluster: ClusterConfig, model: ModelSpec) -> ParallelismConfig:
    tp, pp, cp, ep = (s.integer(k, 1) for k in ("tp", "pp", "cp", "ep"))
    chips = cluster.chips
    if chips % (tp * pp * cp):
        raise ConfigError(f"parallelism: tp*pp*cp = {tp}*{pp}*{cp} = {tp * pp * cp} does not divide "
                          f"the {chips} chips of the cluster; valid: a product that divides {chips}")
    dp = chips // (tp * pp * cp)
    schedule = s.text("schedule", "1f1b", ("1f1b", "interleaved", "gpipe"))
    vs = s.integer("virtual_stages", 1)
    if vs > 1 and schedule != "interleaved":
        raise ConfigError(f"parallelism.virtual_stages: {vs} needs schedule: interleaved, got {schedule!r}")
    zero = s.integer("zero", 1, minimum=0, maximum=3)       # ZeRO stages 0-3 (Rajbhandari 2020)
    group = s.opt_int("zero_group")
    if group is not None:
        if dp % group:
            divisors = [d for d in range(1, dp + 1) if dp % d == 0]
            shown = ", ".join(str(d) for d in divisors[:12]) + (", ..." if len(divisors) > 12 else "")
            raise ConfigError(f"{s.at('zero_group')}: {group} does not divide dp = {dp}; valid: "
                              f"a divisor of dp ({shown})")
        if zero == 0 and group != dp:
            raise ConfigError(f"{s.at('zero_group')}: {group} shards nothing with zero: 0; "
                              "set parallelism.zero to 1, 2 or 3, or leave zero_group out")
    return ParallelismConfig(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, zero=zero, schedule=schedule,
                             virtual_stages=vs, sequence_parallel=s.flag("sequence_parallel", True),
                             zero_group=0 if group is None or group == dp else group)


def _stragglers(s: _Section) -> StragglersConfig:
    return StragglersConfig(
        compute_jitter_sigma=s.number("compute_jitter_sigma", 0.0),
        slow_fraction=s.number("slow_fraction", 0.0, maximum=1.0),
        slow_factor=s.number("slow_factor", 1.0, minimum=1.0),
        link_degrade_fraction=s.number("link_degrade_fraction", 0.0, maximum=1.0),
        link_bandwidth_factor=s.number("link_bandwidth_factor", 1.0, minimum=0.0, maximum=1.0,
                                      strict_min=True),
    )


def _failures(s: _Section) -> FailuresConfig:
    interval: float | None = None
    if s.has("checkpoint_interval_min") and s.raw["checkpoint_interval_min"] != "auto":
        interval = s.number("checkpoint_interval_min", strict_min=True)
    f = FailuresConfig(
        horizon_days=s.number("horizon_days", 30.0, strict_min=True),
        checkpoint_interval_min=interval,
        checkpoint_write_s=s.number("checkpoint_write_s", 60.0),
        checkpoint_load_s=s.number("checkpoint_load_s", 120.0),
        detect_s=s.number("detect_s", 300.0),
        restart_s=s.number("restart_s", 600.0),
        swap_s=s.number("swap_s") if s.has("swap_s") else None,
        planned_per_day=s.number("planned_per_day", 0.0),
        rate_scale=s.number("rate_scale", 1.0),
        tokens=s.number("tokens", strict_min=True) if s.has("tokens") else None,
        monte_carlo_runs=s.integer("monte_carlo_runs", 100),
    )
    if interval is not None and interval * 60 <= f.checkpoint_write_s:
        raise ConfigError(f"failures.checkpoint_interval_min: {interval} min is not longer than "
                          f"checkpoint_write_s = {f.checkpoint_write_s} s")
    return f


def load_cluster(topology: str, chips: int | None = None, slice_: str | None = None,
                 twisted: bool = False, oversubscription: float | None = None,
                 sharp: bool | None = None, where: str = "cluster",
                 slices: int | None = None, background_load: float | None = None) -> ClusterConfig:
    """A sized cluster from command-line style options (``topo show``, ``collective``)."""
    raw: dict[str, Any] = {"topology": topology, "twisted": twisted}
    if chips is not None:
        raw["chips"] = chips
    if slice_ is not None:
        raw["slice"] = slice_
    if oversubscription is not None:
        raw["oversubscription"] = oversubscription
    if sharp is not None:
        raw["sharp"] = sharp
    if slices is not None:
        raw["slices"] = slices
    if background_load is not None:
        raw["background_load"] = background_load
    return _cluster(_Section(raw, where, _CLUSTER_KEYS))
