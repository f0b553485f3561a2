"""Scenario and topology files -> validated, frozen config objects.

The package is the edge where input is parsed once: ``yamlio`` (the only importer of ``yaml``),
``fields`` (the section reader), ``topology_specs`` (topology files), ``schema`` (the typed
records), ``scenario`` (the scenario loader), ``parallelism`` (every rule a parallel plan must
meet and every value derived from it, resolved once), ``overrides`` (``--set``/``--over`` keys)
and ``paths`` (bundled data and output files). Every error is a ConfigError that names the file,
the dotted field, the value found and what would be valid. Nothing downstream sees a dict.
"""

from __future__ import annotations

from ..models import PRESETS
from .fields import parse_tokens
from .overrides import apply_overrides, parse_value, set_key
from .parallelism import data_parallel
from .paths import DATA_DIR, PLOT_SUFFIXES, check_output_path, scenario_dir, topology_dir
from .scenario import load_cluster, load_scenario, read_scenario_raw, scenario_from_dict, with_layout
from .schema import (
    ClusterConfig,
    CostConfig,
    FailuresConfig,
    ParallelismConfig,
    PlanSizes,
    Scenario,
    StragglersConfig,
    TrainingConfig,
    scenario_keys,
)
from .topology_specs import load_topology_spec, resolve_topology_path
from .yamlio import MAX_YAML_DEPTH, decode_utf8

__all__ = [
    "ClusterConfig", "CostConfig", "FailuresConfig", "ParallelismConfig", "PlanSizes", "Scenario",
    "StragglersConfig", "TrainingConfig", "load_scenario", "load_topology_spec", "scenario_from_dict",
    "topology_dir", "scenario_dir", "load_cluster", "apply_overrides", "set_key", "parse_value",
    "read_scenario_raw", "scenario_keys", "parse_tokens", "check_output_path", "PLOT_SUFFIXES",
    "PRESETS_NAMES", "DATA_DIR", "MAX_YAML_DEPTH", "decode_utf8", "resolve_topology_path",
    "data_parallel", "with_layout",
]

PRESETS_NAMES = tuple(sorted(PRESETS))
