"""The catalogue agrees with the sourced reference numbers it cites."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.hardware import CATALOGUE, get_chip
from sim.units import GB, TFLOPS, GiB

# catalogue name -> specs.yaml accelerator key
KEYS = {
    "A100-SXM-80GB": "nvidia_a100_sxm_80gb",
    "H100-SXM": "nvidia_h100_sxm",
    "H200": "nvidia_h200_sxm",
    "B200": "nvidia_b200_hgx",
    "TPU-v4": "google_tpu_v4",
    "TPU-v5e": "google_tpu_v5e",
    "TPU-v5p": "google_tpu_v5p",
    "TPU-v6e": "google_tpu_v6e",
}


def test_catalogue_has_every_required_chip() -> None:
    assert set(KEYS) <= set(CATALOGUE)


@pytest.mark.parametrize("name", sorted(KEYS))
def test_peaks_and_memory_match_reference(name: str, specs_yaml: dict) -> None:
    ref = specs_yaml["accelerators"][KEYS[name]]
    chip = CATALOGUE[name]
    assert chip.bf16_flops == pytest.approx(ref["bf16_tflops"] * TFLOPS)
    if ref.get("fp8_tflops") is None:
        assert chip.fp8_flops is None
    else:
        assert chip.fp8_flops == pytest.approx(ref["fp8_tflops"] * TFLOPS)
    hbm = ref["hbm_gb"] * GB if "hbm_gb" in ref else ref["hbm_gib"] * GiB
    assert chip.hbm_bytes == pytest.approx(hbm)
    assert chip.hbm_Bps == pytest.approx(ref["hbm_GBps"] * GB)
    links = ref.get("nvlink_links", ref.get("ici_links"))
    assert chip.scaleup_links == links


@pytest.mark.parametrize("name", ["A100-SXM-80GB", "H100-SXM", "H200", "B200"])
def test_nvlink_per_direction_matches_reference(name: str, specs_yaml: dict) -> None:
    ref = specs_yaml["accelerators"][KEYS[name]]
    assert CATALOGUE[name].scaleup_Bps == pytest.approx(ref["scaleup_GBps_per_dir"] * GB)


@pytest.mark.parametrize("name", ["TPU-v5e", "TPU-v5p", "TPU-v6e"])
def test_tpu_ici_from_googles_per_chip_bidirectional_figure(name: str, specs_yaml: dict) -> None:
    ref = specs_yaml["accelerators"][KEYS[name]]
    assert 2 * CATALOGUE[name].scaleup_Bps == pytest.approx(ref["ici_chip_GBps_bidi"] * GB)


def test_fp8_on_a100_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="fp8 is not supported on A100"):
        CATALOGUE["A100-SXM-80GB"].peak_flops("fp8")


def test_unknown_chip_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown chip 'H300'.*H100-SXM"):
        get_chip("H300")


def test_gpu_or_tpu_is_one_property_of_the_chip() -> None:
    """``Chip.is_tpu`` is the one test of GPU versus TPU: the TPUs are Google's, the rest NVIDIA
    GPUs with streaming multiprocessors; every bundled TPU topology is on a TPU, every GPU one not."""
    from sim.config import load_topology_spec, topology_dir
    from sim.topology_spec import TpuPodSpec

    for chip in CATALOGUE.values():
        assert chip.is_tpu == (chip.family == "TPU") == (chip.sms is None), chip.name
    for path in sorted(topology_dir().glob("*.yaml")):
        spec = load_topology_spec(path.stem)
        assert spec.chip.is_tpu == isinstance(spec, TpuPodSpec), path.stem


def test_fp8_faster_is_an_fp8_peak_above_the_bf16_one() -> None:
    assert CATALOGUE["H100-SXM"].fp8_faster and CATALOGUE["B200"].fp8_faster
    assert not CATALOGUE["A100-SXM-80GB"].fp8_faster and not CATALOGUE["TPU-v4"].fp8_faster
    for chip in CATALOGUE.values():
        assert chip.fp8_faster == (chip.fp8_flops is not None and chip.fp8_flops > chip.bf16_flops)
