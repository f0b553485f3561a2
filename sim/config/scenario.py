"""Scenario files -> a validated, frozen ``Scenario`` (schema in DESIGN.md).

Every error is a ConfigError that names the file, the dotted field, the value found and what
would be valid. Nothing downstream sees a dict.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..hardware import get_chip
from ..models import PRESETS
from ..precision import PRECISIONS, check_chip, check_stack
from ..software import FRAMEWORKS, MOE_DISPATCHERS, resolve_software
from ..topology_spec import GpuClusterSpec, TopologySpec
from .chip_file import is_chip_file, load_chip_file
from .fields import Section, parse_tokens, show
from .model_section import check_model_sequence, read_model
from .overrides import apply_overrides
from .parallelism import read_parallelism, resolve_plan
from .paths import check_name, scenario_dir
from .reliability_sections import read_failures, read_stragglers
from .remat import LOGIT_BYTES, OPTIMIZER_STATES, RECOMPUTE_MODULES, parse_remat_policy
from .schema import (
    CLUSTER_KEYS,
    SECTION_KEYS,
    TOP_KEYS,
    ClusterConfig,
    CostConfig,
    Scenario,
    TrainingConfig,
)
from .topology_specs import bundled_topologies, load_topology_spec
from .yamlio import read_yaml

__all__ = ["load_cluster", "load_scenario", "read_scenario_raw", "scenario_from_dict", "with_layout"]


def read_scenario_raw(path: str | os.PathLike[str]) -> tuple[Mapping[str, Any], str, str]:
    """(parsed mapping, source path, default name) of a scenario file or bundled scenario name."""
    check_name(os.fspath(path), "scenario")
    p = Path(path)
    if not p.is_file():
        bundled = scenario_dir() / f"{p}.yaml"
        if p.suffix == "" and bundled.is_file():
            p = bundled
        else:
            raise ConfigError(f"{path}: no such scenario file")
    return read_yaml(p, "scenario"), str(p), p.stem


def load_scenario(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> Scenario:
    """Read and validate a scenario file (DESIGN.md schema), with ``--set KEY=VALUE`` overrides."""
    raw, source, name = read_scenario_raw(path)
    return scenario_from_dict(apply_overrides(raw, overrides), source, default_name=name)


def scenario_from_dict(raw: Mapping[str, Any], source: str = "<dict>",
                       default_name: str = "scenario") -> Scenario:
    """Validate an already-parsed scenario mapping; *source* prefixes every message."""
    try:
        return _scenario(raw, source, default_name)
    except ConfigError as e:
        msg = str(e)
        raise ConfigError(msg if msg.startswith(source) else f"{source}: {msg}") from None


def _scenario(raw: Mapping[str, Any], source: str, default_name: str) -> Scenario:
    top = Section(raw, "scenario", TOP_KEYS)
    cluster = _cluster(top.section("cluster", CLUSTER_KEYS), _relative_to(source))
    neighbour = None
    if isinstance(raw.get("cluster"), Mapping) and raw["cluster"].get("shared_with") is not None:
        neighbour = _shared_with(raw["cluster"]["shared_with"], source, cluster)
        cluster = replace(cluster, shared_with=neighbour.source)
    if not top.has("model"):
        raise ConfigError(f"model: required; a preset name ({', '.join(sorted(PRESETS))}) "
                          "or a mapping with layers, hidden, ffn_hidden, heads, kv_heads, vocab")
    training, model, par = _layout_sections(top, raw, cluster, None)
    soft_s = top.section("software", SECTION_KEYS["software"])
    software = resolve_software(soft_s.text("framework") if soft_s.has("framework") else None,
                                soft_s.text("attention") if soft_s.has("attention") else None,
                                cluster.chip)
    if soft_s.has("moe_dispatcher"):
        software = replace(software, moe_dispatcher=soft_s.text("moe_dispatcher",
                                                                choices=MOE_DISPATCHERS))
    if soft_s.has("ep_overlap"):
        software = replace(software, ep_comm_overlap=soft_s.flag("ep_overlap", False))
    if soft_s.has("kernel_tables"):
        software = replace(software, kernel_tables=_kernel_tables(soft_s, cluster, source))
    check_stack(training.precision, cluster.chip, software)
    if training.optimizer_offload and not software.optimizer_offload:
        able = ", ".join(f for f, p in FRAMEWORKS.items() if p.optimizer_offload)
        raise ConfigError(f"training.optimizer_offload: true keeps the optimizer state on the host "
                          f"(MaxText's optimizer_memory_host_offload); software.framework "
                          f"{software.framework} has no such mode; valid: false, or "
                          f"software.framework {able}")
    strag = (read_stragglers(top.section("stragglers", SECTION_KEYS["stragglers"]))
             if "stragglers" in raw else None)
    fail = (read_failures(top.section("failures", SECTION_KEYS["failures"]))
            if "failures" in raw else None)
    cost_s = top.section("cost", SECTION_KEYS["cost"])
    cost = CostConfig(cost_s.number("usd_per_chip_hour") if cost_s.has("usd_per_chip_hour")
                      else cluster.chip.usd_per_chip_hour)     # None: no price known
    name = top.label("name", default_name)
    seed = top.integer("seed", 0, minimum=0)
    par = resolve_plan(par, model, training, source)
    return Scenario(name=name, source=source, cluster=cluster, model=model, training=training,
                    parallelism=par, stragglers=strag, failures=fail, cost=cost, seed=seed,
                    software=software, raw=raw, neighbour=neighbour)


def with_layout(scn: Scenario, raw: Mapping[str, Any]) -> Scenario:
    """``scenario_from_dict(raw, scn.source)`` where *raw* is *scn*'s mapping but for its training
    and parallelism sections (the plan search's layouts of one size): those read as it reads
    them, every other section kept as *scn* read it (tests/test_plan.py checks they agree)."""
    try:
        training, model, par = _layout_sections(Section(raw, "scenario", TOP_KEYS), raw,
                                                scn.cluster, scn)
        check_stack(training.precision, scn.cluster.chip, scn.software)
        par = resolve_plan(par, model, training, scn.source)
    except ConfigError as e:
        msg = str(e)
        raise ConfigError(msg if msg.startswith(scn.source) else f"{scn.source}: {msg}") from None
    return replace(scn, model=model, training=training, parallelism=par, raw=raw)


def _layout_sections(top: Section, raw: Mapping[str, Any], cluster: ClusterConfig,
                     like: Scenario | None) -> tuple[TrainingConfig, Any, Any]:
    """The training section, the model checked against its sequence (*like*'s where it read the
    same model for the same sequence) and the parallelism section, unresolved."""
    model = read_model(raw["model"]) if like is None else None
    training = _read_once(_training, top.section("training", SECTION_KEYS["training"]), cluster)
    if like is not None and like.raw.get("model") == raw["model"] \
            and like.training.seq_len == training.seq_len:
        model = like.model
    else:
        model = check_model_sequence(model or read_model(raw["model"]), raw["model"],
                                     training.seq_len)
    return training, model, _read_once(read_parallelism,
                                       top.section("parallelism", SECTION_KEYS["parallelism"]), cluster)


# PERF: the plan search's layouts of one size repeat a few training and parallelism sections
# (the v5p search's 3,910 layouts: 4 training and ~60 parallelism sections a size), each read
# once per cluster. A section of scalars alone is keyed by its items with their types (1, 1.0
# and True read differently); an entry holds the cluster (a reused id cannot hit) and what was
# read (frozen); a section that is refused is not kept, so its error is raised again.
_READ: dict[tuple[Any, ...], tuple[ClusterConfig, Any]] = {}
_SCALARS = (str, int, float, bool, type(None))


def _read_once(read: Any, s: Section, cluster: ClusterConfig) -> Any:
    """``read(s, cluster)``, memoised where the section holds scalars alone."""
    raw = s.raw
    if not all(type(v) in _SCALARS for v in raw.values()):
        return read(s, cluster)
    key = (read, s.where, id(cluster), tuple((k, type(v), v) for k, v in raw.items()))
    hit = _READ.get(key)
    if hit is not None and hit[0] is cluster:
        return hit[1]
    out = read(s, cluster)
    if len(_READ) >= 4096:
        _READ.clear()
    _READ[key] = (cluster, out)
    return out


def _kernel_tables(s: Section, cluster: ClusterConfig, source: str) -> str:
    """``software.kernel_tables``: a folder of the user's kernel tables (``clustersim bench``),
    relative to the scenario file's folder; checked here, fitted by the compute model."""
    from ..compute.folder_fit import check_tables_folder  # PERF: the table reader, only when used

    where = s.at("kernel_tables")
    folder = Path(check_name(s.text("kernel_tables"), where))
    if not folder.is_absolute():
        folder = _relative_to(source) / folder
    if cluster.chip.is_tpu:
        raise ConfigError(f"{where}: kernel tables are CUDA kernel timings; {cluster.chip.name} is a "
                          "TPU, whose kernels are not fitted from tables; remove the key")
    return str(check_tables_folder(folder, where))


def _relative_to(source: str) -> Path:
    """The folder a scenario's relative paths start from: its file's, else the working folder."""
    return Path(source).parent if Path(source).is_file() else Path(".")


def _cluster(s: Section, base: Path = Path(".")) -> ClusterConfig:
    spec = load_topology_spec(s.text("topology", "dgx-h100"), s.at("topology"))
    if s.has("chip") and is_chip_file(s.raw["chip"]):
        if not isinstance(spec, GpuClusterSpec):
            raise ConfigError(f"{s.at('chip')}: a chip file describes a GPU; {spec.name} is a TPU "
                              "topology (its chip is the catalogue's)")
        path = Path(check_name(s.text("chip"), s.at("chip")))
        spec = replace(spec, chip=load_chip_file(path if path.is_absolute() else base / path,
                                                 s.at("chip")))
    elif s.has("chip"):
        _check_cluster_chip(s, spec)
    chips = s.opt_int("chips")
    twisted = s.flag("twisted", False)
    over = s.number("oversubscription", minimum=1.0) if s.has("oversubscription") else None
    sharp = s.flag("sharp", False) if s.has("sharp") else None
    # Other jobs' traffic on the fabric: the fraction of every inter-node link (InfiniBand, DCN)
    # it takes. 0.95 at most: a fabric with nothing left is not a cluster this job runs on.
    load = s.number("background_load", 0.0, minimum=0.0, maximum=0.95)
    edits = _degraded_links(s)
    if isinstance(spec, GpuClusterSpec):
        if s.has("slice"):
            raise ConfigError(f"{s.at('slice')}: only TPU topologies take a slice shape; "
                              f"{spec.name} is sized by cluster.chips")
        if twisted:
            raise ConfigError(f"{s.at('twisted')}: only TPU 3-D tori can be twisted, not {spec.name}")
        if s.has("slices"):
            raise ConfigError(f"{s.at('slices')}: only TPU topologies join slices over a DCN; "
                              f"{spec.name} is sized by cluster.chips")
        if s.has("nvl_domain"):                # the job's GPUs in each NVLink domain (rack)
            spec = spec.with_domain(s.integer("nvl_domain"), s.at("nvl_domain"))
        return ClusterConfig(spec, spec.resolve_chips(chips, s.at("chips")), oversubscription=over,
                             sharp=sharp, background_load=load, degraded_links=edits)
    if sharp:
        raise ConfigError(f"{s.at('sharp')}: InfiniBand SHARP is for GPU fat-trees, not {spec.name}")
    if s.has("nvl_domain"):
        raise ConfigError(f"{s.at('nvl_domain')}: only GPU topologies have NVLink domains, not {spec.name}")
    if over is not None:
        raise ConfigError(f"{s.at('oversubscription')}: only fat-tree GPU topologies have one")
    slice_ = s.text("slice") if s.has("slice") else None
    shape, pods = spec.resolve_shape(chips, slice_, s.where, s.opt_int("slices"))
    if twisted:
        spec.check_twist(shape, s.where)
    return ClusterConfig(spec, math.prod(shape) * pods, shape=shape, pods=pods, twisted=twisted,
                         background_load=load, degraded_links=edits)


def _check_cluster_chip(s: Section, spec: TopologySpec) -> None:
    """``cluster.chip``: a catalogue chip name, which must be the one the topology is built for
    (the topology file names its chip; this key states it, so a scenario written for one chip
    is refused on another's topology). The one place the key is parsed: issue 33 adds FILE.yaml."""
    where = s.at("chip")
    name = get_chip(s.text("chip"), where).name
    built_for = spec.chip.name
    if name == built_for:
        return
    others = [t for t in bundled_topologies() if load_topology_spec(t).chip.name == name]
    hint = (f", or a topology built for {name}: {', '.join(others)}" if others
            else f"; no bundled topology is built for {name}")
    raise ConfigError(f"{where}: {name} does not match topology {spec.name} (built for "
                      f"{built_for}); valid: {built_for}{hint}")


_LINK_EDIT_KEYS = frozenset({"link", "factor"})


def _degraded_links(s: Section) -> tuple[tuple[int | str, int | str, float], ...]:
    """``cluster.degraded_links``: a list of {link: [A, B], factor: F}, A and B graph node names
    (a chip number, or a switch / NIC name as ``clustersim topo show --json`` lists them), F the
    share of the link's bandwidth left (0: the link is down). Whether the link exists is checked
    when the graph is built."""
    if not s.has("degraded_links"):
        return ()
    raw = s.raw["degraded_links"]
    where = s.at("degraded_links")
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: expected a list of {{link: [A, B], factor: F}}, got {show(raw)}")
    out = []
    seen: dict[frozenset[int | str], int] = {}
    for i, item in enumerate(raw):
        e = Section(item, f"{where}[{i}]", _LINK_EDIT_KEYS)
        ends = e.raw.get("link")
        if (not isinstance(ends, list) or len(ends) != 2
                or not all(isinstance(x, (int, str)) and not isinstance(x, bool) for x in ends)
                or ends[0] == ends[1]):
            raise ConfigError(f"{e.at('link')}: expected two different node names or chip numbers, "
                              f"e.g. [n3/nic0, leaf/s0/r0] or [12, 13], got {show(ends)}")
        factor = e.number("factor", minimum=0.0, maximum=1.0)
        if factor >= 1.0:
            raise ConfigError(f"{e.at('factor')}: the share of the link's bandwidth left, 0 (down) "
                              f"to below 1, got {factor}")
        pair = frozenset(ends)
        if pair in seen:
            # two factors on one link would compound (5,000 copies made a step 10x slower)
            raise ConfigError(f"{e.at('link')}: {show(ends)} is listed already at {where}"
                              f"[{seen[pair]}]; list each link once, with the share of it left")
        seen[pair] = i
        out.append((ends[0], ends[1], factor))
    return tuple(out)


def _shared_with(value: object, source: str, cluster: ClusterConfig) -> Scenario:
    """``cluster.shared_with``: the scenario (file, relative to this one, or bundled name) of a
    second job on the same fabric, read once here and checked: it loads, runs on the same GPU
    topology and does not itself share."""
    where = "cluster.shared_with"
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a scenario file or bundled scenario name, got "
                          f"{show(value)}")
    check_name(value, where)
    path = Path(value)
    if not path.is_absolute() and (_relative_to(source) / path).is_file():
        path = _relative_to(source) / path
    try:
        other_raw, other_source, other_name = read_scenario_raw(path)
    except ConfigError as e:
        if path.is_file():              # the neighbour's own error, not "no such file"
            raise ConfigError(f"{where}: {e}") from None
        raise ConfigError(f"{where}: {value!r} is neither a scenario file (relative to "
                          f"{source}) nor a bundled scenario") from None
    if isinstance(other_raw.get("cluster"), Mapping) and other_raw["cluster"].get("shared_with"):
        raise ConfigError(f"{where}: {other_source} shares with a third job itself; one neighbour "
                          "at a time")
    other = scenario_from_dict(other_raw, other_source, other_name)
    if other.stragglers is not None:
        raise ConfigError(f"{where}: {other_source} has a stragglers section; the shared step plays "
                          "both jobs with one rank per stage and no stragglers; remove it there")
    if not isinstance(cluster.topology, GpuClusterSpec):
        raise ConfigError(f"{where}: TPU slices do not share their ICI with other jobs; for traffic "
                          "on the data-center network use cluster.background_load")
    if other.cluster.topology.name != cluster.topology.name:
        raise ConfigError(f"{where}: {other_source} runs on {other.cluster.topology.name}, this "
                          f"job on {cluster.topology.name}; both jobs must be on one fabric")
    both = cluster.chips + other.cluster.chips
    try:
        cluster.topology.resolve_chips(both, where)
    except ConfigError as e:
        raise ConfigError(f"{where}: the two jobs need {both} chips together; "
                          f"{str(e).split(': ', 1)[-1]}") from None
    return other


def _training(s: Section, cluster: ClusterConfig) -> TrainingConfig:
    t = TrainingConfig(
        seq_len=s.integer("seq_len", 4096),
        global_batch=s.opt_int("global_batch"),
        micro_batch=s.integer("micro_batch", 1),
        precision=s.text("precision", "bf16", PRECISIONS),
        recompute=s.text("recompute", "selective", ("none", "selective", "full")),
        tokens=parse_tokens(s.raw["tokens"], s.at("tokens")) if s.has("tokens") else None,
        optimizer_state=s.text("optimizer_state", "fp32", OPTIMIZER_STATES),
        master_weights=s.flag("master_weights", True),
        optimizer_offload=s.flag("optimizer_offload", False),
        vocab_tiling=s.integer("vocab_tiling", 1),
        logits_dtype=s.text("logits_dtype", "fp32", tuple(LOGIT_BYTES)),
    )
    check_chip(t.precision, cluster.chip, s.at("precision"))
    if t.vocab_tiling > t.micro_batch * t.seq_len:
        # the logits are cut into chunks of a micro-batch's tokens: one token is the smallest
        raise ConfigError(f"{s.at('vocab_tiling')}: {t.vocab_tiling} chunks of a micro-batch's "
                          f"{t.micro_batch * t.seq_len:,} tokens (micro_batch x seq_len) leaves "
                          "chunks of no token; valid: 1 to that many")
    if s.has("recompute_modules"):
        if t.recompute != "selective":
            raise ConfigError(f"{s.at('recompute_modules')}: names what a selective recompute "
                              f"recomputes, but training.recompute is {t.recompute!r}; valid: "
                              "training.recompute: selective")
        t = replace(t, recompute_modules=s.text_list("recompute_modules", (), RECOMPUTE_MODULES))
    if t.optimizer_offload and cluster.chip.host_memory_bytes is None:
        raise ConfigError(f"{s.at('optimizer_offload')}: true keeps the optimizer state in host "
                          f"memory, but the catalogue has no host memory for {cluster.chip.name}; "
                          "valid here: false")
    if s.has("remat_policy"):           # the per-tensor policy decides; `recompute` then does not
        name, policy = parse_remat_policy(s.raw["remat_policy"], s.at("remat_policy"))
        t = replace(t, remat_policy_name=name, remat_policy=policy)
        chip = cluster.chip
        if t.offloads and chip.host_memory_bytes is None:
            raise ConfigError(f"{s.at('remat_policy')}: {name!r} offloads activations to host "
                              f"memory, but the catalogue has no host memory for {chip.name}; "
                              "valid here: device or remat for every tensor")
    return t


def load_cluster(topology: str, chips: int | None = None, slice_: str | None = None,
                 twisted: bool = False, oversubscription: float | None = None,
                 sharp: bool | None = None, where: str = "cluster",
                 slices: int | None = None, background_load: float | None = None,
                 nvl_domain: int | None = None) -> ClusterConfig:
    """A sized cluster from command-line style options (``topo show``, ``collective``)."""
    given = {"chips": chips, "slice": slice_, "oversubscription": oversubscription, "sharp": sharp,
             "slices": slices, "background_load": background_load, "nvl_domain": nvl_domain}
    raw: dict[str, Any] = {"topology": topology, "twisted": twisted,
                           **{k: v for k, v in given.items() if v is not None}}
    return _cluster(Section(raw, where, CLUSTER_KEYS))
