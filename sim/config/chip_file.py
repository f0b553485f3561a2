"""``cluster.chip: FILE.yaml``: a GPU that is not in the catalogue, described by its owner
(issue 33), and calibrated by their kernel tables (``software.kernel_tables``).

The file gives what the catalogue gives each chip (``sim.hardware.Chip``), in the units its keys
name; every field is required but those marked optional::

    name: my-gpu                 # not a catalogue name
    arch: hopper                 # ampere | hopper | blackwell: which bundled kernel fits it starts from
    family: H100                 # optional (default by arch: A100, H100, B200): the software-stack
                                 # efficiencies and validation group it shares
    bf16_TFLOPS: 989             # dense peaks; fp8_TFLOPS and fp4_TFLOPS optional (none: no such path)
    hbm_GB: 80                   # memory (GB = 1e9 bytes); hbm_usable_GiB optional (what CUDA reports)
    hbm_GBps: 3350               # HBM bandwidth
    sms: 132                     # streaming multiprocessors (the GEMM wave model)
    scaleup_links: 18            # NVLink links per GPU and the bandwidth of one, per direction
    scaleup_link_GBps: 25
    nvlink_sharp: false          # optional: NVSwitch in-network reduction (NVLS)
    tdp_W: 700                   # power
    usd_per_chip_hour: 2.5       # price
    host_memory_GB: 256          # optional: host DRAM per GPU (activation offload)

The chip replaces the one the GPU topology's file names (its NVLink, NVSwitches, NICs and fabric
stay those of the file); a TPU topology takes no chip file.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..hardware import CATALOGUE, Chip
from ..units import GB, TFLOPS, GiB
from .fields import Section, show
from .yamlio import read_yaml

__all__ = ["CHIP_FILE_KEYS", "is_chip_file", "load_chip_file"]

ARCH_FAMILY = {"ampere": "A100", "hopper": "H100", "blackwell": "B200"}
_REQUIRED = ("name", "arch", "bf16_TFLOPS", "hbm_GB", "hbm_GBps", "sms", "scaleup_links",
             "scaleup_link_GBps", "tdp_W", "usd_per_chip_hour")
_OPTIONAL = ("family", "vendor", "fp8_TFLOPS", "fp4_TFLOPS", "hbm_usable_GiB", "nvlink_sharp",
             "host_memory_GB", "price_source")
CHIP_FILE_KEYS = frozenset(_REQUIRED + _OPTIONAL)
_FAMILIES = frozenset(c.family for c in CATALOGUE.values() if not c.is_tpu)


def is_chip_file(value: object) -> bool:
    """Whether a ``cluster.chip`` value names a chip file rather than a catalogue chip."""
    return isinstance(value, str) and value.lower().endswith((".yaml", ".yml"))


def load_chip_file(path: Path, where: str) -> Chip:
    """The chip described in the YAML file at *path*; one line naming the file and field when a
    field is missing, of the wrong type or out of range."""
    if not path.is_file():
        raise ConfigError(f"{where}: no such chip file {str(path)!r}; give a YAML file describing "
                          f"the chip ({', '.join(_REQUIRED)})")
    s = Section(read_yaml(path, "chip"), f"{path}:", CHIP_FILE_KEYS)
    if missing := [k for k in _REQUIRED if not s.has(k)]:
        raise ConfigError(f"{path}: {', '.join(missing)}: required; a chip file gives "
                          f"{', '.join(_REQUIRED)} (sim/config/chip_file.py)")
    name = s.text("name")
    if not name.isprintable() or not 0 < len(name) <= 64:
        raise ConfigError(f"{s.at('name')}: {show(name)}: give a printable name of 1-64 characters")
    if name in CATALOGUE:
        raise ConfigError(f"{s.at('name')}: {name!r} is a catalogue chip; give your chip its own name "
                          f"or use cluster.chip: {name} itself")
    s.text("vendor", "nvidia", choices=("nvidia",))
    arch = s.text("arch", choices=tuple(ARCH_FAMILY))
    family = s.text("family", ARCH_FAMILY[arch])
    if family not in _FAMILIES:
        raise ConfigError(f"{s.at('family')}: got {family!r}; valid: {', '.join(sorted(_FAMILIES))}")
    bf16 = s.number("bf16_TFLOPS", minimum=1.0, maximum=1e5) * TFLOPS
    fp8 = _peak(s, "fp8_TFLOPS", bf16)
    fp4 = _peak(s, "fp4_TFLOPS", fp8 or bf16)
    hbm = s.number("hbm_GB", minimum=1.0, maximum=1e5) * GB
    usable = s.number("hbm_usable_GiB", minimum=1.0) * GiB if s.has("hbm_usable_GiB") else None
    if usable is not None and usable > hbm * 1.1:
        raise ConfigError(f"{s.at('hbm_usable_GiB')}: {usable / GiB:g} GiB is more than hbm_GB "
                          f"{hbm / GB:g} GB holds")
    return Chip(
        name=name, vendor="nvidia", family=family, arch=arch, bf16_flops=bf16, fp8_flops=fp8,
        hbm_bytes=hbm, hbm_Bps=s.number("hbm_GBps", minimum=1.0, maximum=1e6) * GB,
        scaleup_links=s.integer("scaleup_links", minimum=1, maximum=1024),
        scaleup_link_Bps=s.number("scaleup_link_GBps", minimum=0.1, maximum=1e5) * GB,
        tdp_W=s.number("tdp_W", minimum=1.0, maximum=1e5),
        usd_per_chip_hour=s.number("usd_per_chip_hour", minimum=0.0, maximum=10_000.0, strict_min=True),
        in_network_reduction=s.flag("nvlink_sharp", False),
        sms=s.integer("sms", minimum=1, maximum=100_000),
        price_source=s.text("price_source", f"chip file {path.name}"),
        host_memory_bytes=(s.number("host_memory_GB", minimum=0.0, maximum=1e6) * GB
                           if s.has("host_memory_GB") else None),
        fp4_flops=fp4, hbm_usable_bytes=usable)


def _peak(s: Section, key: str, below: float) -> float | None:
    """An optional lower-precision peak, at least the wider format's (*below*)."""
    if not s.has(key):
        return None
    v = s.number(key, minimum=1.0, maximum=1e6) * TFLOPS
    if v < below:
        raise ConfigError(f"{s.at(key)}: {v / TFLOPS:g} is below the wider format's "
                          f"{below / TFLOPS:g} TFLOPS; a narrower format runs at least as fast")
    return v
