"""Which chip a folder of the user's kernel tables was measured on (``validate --suite compute
--data DIR``): ``--chip`` (a catalogue name or a chip file), else a ``chip.yaml`` in the folder
(``cluster.chip: FILE.yaml`` format), else the GPU its ``env.json`` names (what ``clustersim
bench`` records: the CUDA device name, e.g. "NVIDIA H100 80GB HBM3")."""

from __future__ import annotations

import json
from pathlib import Path

from ..config.chip_file import is_chip_file, load_chip_file
from ..errors import ConfigError
from ..hardware import Chip, chip_of_device_name, get_chip

__all__ = ["chip_of_folder"]

def chip_of_folder(folder: Path, chip_arg: str | None) -> Chip:
    """The chip of *folder*'s tables (see the module docstring)."""
    if chip_arg is not None:
        if is_chip_file(chip_arg):
            return load_chip_file(Path(chip_arg), "--chip")
        return get_chip(chip_arg, "--chip")
    if (folder / "chip.yaml").is_file():
        return load_chip_file(folder / "chip.yaml", f"{folder}/chip.yaml")
    env = folder / "env.json"
    device = ""
    if env.is_file():
        try:
            data = json.loads(env.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(f"{env}: not a JSON file ({e}); give the chip with --chip") from None
        device = data.get("gpu", "") if isinstance(data, dict) else ""
        if not isinstance(device, str):
            raise ConfigError(f"{env}: field 'gpu': expected the device name, got {type(device).__name__}")
        name = chip_of_device_name(device)
        if name is not None:
            return get_chip(name)
    said = (f"its env.json names {device[:80]!r}, not a catalogue chip" if device
            else "it has no env.json naming the GPU")
    raise ConfigError(f"{folder}: which chip were these tables measured on? {said}; give --chip NAME "
                      "or --chip FILE.yaml (a chip file), or put a chip.yaml in the folder")
