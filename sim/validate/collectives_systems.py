"""Which systems the collectives suite models, and the families its report groups them in.

A supported run (``systems.csv``) names any bundled GPU topology (``TOPOLOGIES``); its GPU, hosts
and fabric are read from that topology's spec (``family_of``), not from a list of names, so a new
topology lands in its family.
"""

from __future__ import annotations

import functools
import types

from ..errors import ConfigError
from ..topology_spec import GpuClusterSpec

__all__ = ["FABRIC_FAMILY", "SYSTEM_FAMILIES", "TOPOLOGIES", "family_of", "family_of_spec", "gpu_name",
           "host_gpus"]

def _bundled_gpu_topologies() -> frozenset[str]:
    """Every bundled topology but the TPU pods (named ``tpu*``); ``_spec`` checks the kind."""
    from ..config.topology_specs import bundled_topologies

    return frozenset(n for n in bundled_topologies() if not n.startswith("tpu"))


TOPOLOGIES = _bundled_gpu_topologies()

# System families the report summarises separately, in this order (``family_of``).
SYSTEM_FAMILIES = ("DGX/HGX IB", "NVL72", "EFA", "GCP", "RoCE", "mesh+dragonfly")


@functools.lru_cache(maxsize=None)
def _spec(topology: str) -> GpuClusterSpec:
    from ..config.topology_specs import load_topology_spec  # lazily: YAML only when scoring

    spec = load_topology_spec(topology, where="systems.csv topology")
    if not isinstance(spec, GpuClusterSpec):
        raise ConfigError(f"systems.csv topology: {topology!r} is not a GPU cluster")
    return spec


def gpu_name(topology: str) -> str:
    """The GPU's name as runs' hardware column writes it and the report labels a system ("H200 1
    node"): the catalogue chip's name up to its variant ("A100-SXM-80GB": A100), not its family
    (an H200 is family H100 there: sim.hardware)."""
    return _spec(topology).chip.name.split("-")[0]


def host_gpus(topology: str) -> int:
    """GPUs per host as runs.csv counts nodes: an NVL72 rack's compute trays hold 4 GPUs each
    (``gpus_per_host``), else the node is the host (a 4-GPU HGX board, an 8-GPU DGX)."""
    spec = _spec(topology)
    return spec.gpus_per_host or spec.gpus_per_node


# The scale-out fabric family of topologies that are not InfiniBand DGX/HGX clusters, as the report
# labels a system ("H100 EFA multi-node"): errors are reported per fabric family.
FABRIC_FAMILY = types.MappingProxyType({"aws-p5": "EFA", "aws-p4de": "EFA", "gcp-a3-mega": "GCP",
                                         "gcp-a3-high": "GCP", "gcp-a3-ultra": "GCP",
                                         "oci-h200-roce": "RoCE", "oci-a100-roce": "RoCE",
                                         "polaris": "Slingshot", "perlmutter": "Slingshot",
                                         "slingshot-dragonfly": "Slingshot",
                                         "gcp-a4": "GCP", "gcp-a4-roce": "GCP",
                                         "aws-p6-b200": "EFA"})


_FAMILY_KEYWORDS = (
    # (family, words any of which in the topology's transport / name marks it), first match wins
    ("EFA", ("efa",)),
    ("GCP", ("tcpx", "gib", "gcp")),
    ("RoCE", ("roce",)),
    ("mesh+dragonfly", ("slingshot", "dragonfly")),
)


def family_of(topology: str) -> str:
    """The system family of a bundled GPU topology, from its spec rather than a list of names, so
    a new topology lands in its family: a scale-up NVLink domain larger than one host (GB200
    NVL72, MNNVL) is "NVL72"; then the scale-out transport (``transport``: EFA; GCP's TCPX/TCPXO
    and gIB; RoCE; Slingshot) or, for a node whose GPUs are wired straight to each other without
    NVSwitch (``mesh_links``), "mesh+dragonfly"; everything else (NVSwitch nodes on InfiniBand,
    the DGX and HGX designs) is "DGX/HGX IB". Fields a spec does not have count as absent."""
    return family_of_spec(_spec(topology))


def family_of_spec(spec: object) -> str:
    """``family_of`` for a topology spec already loaded (any object with its fields)."""
    if getattr(spec, "kind", "") != "gpu_cluster":
        return "TPU"
    per_node = int(getattr(spec, "gpus_per_node", 8))
    per_host = int(getattr(spec, "gpus_per_host", 0) or per_node)
    if per_node > per_host or per_node > 8:
        return "NVL72"
    words = f"{getattr(spec, 'transport', 'ib')} {getattr(spec, 'name', '')}".lower()
    for family, keys in _FAMILY_KEYWORDS:
        if any(k in words for k in keys):
            return family
    if getattr(spec, "mesh_links", 0) or getattr(spec, "nvswitches_per_node", 1) == 0:
        return "mesh+dragonfly"
    return "DGX/HGX IB"
