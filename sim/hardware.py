"""Hardware catalogue: one frozen record per accelerator, every figure with its source.

Values come from ../shared/reference/specs.yaml and FACTS.md (source keys such as SB-GPU, GK-H100,
GCP-v5e are defined in FACTS.md "Source key"). Peaks are dense (no 2:4 sparsity). Units are SI:
FLOP/s, bytes, bytes/s (one direction of a full-duplex link), watts, US dollars per chip-hour.
Where two sources disagree the choice is stated next to the value.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError
from .units import GB, TFLOPS, Gbps_to_Bps, GiB, MiB

__all__ = ["Chip", "CATALOGUE", "chip_of_device_name", "get_chip"]


@dataclass(frozen=True, slots=True)
class Chip:
    """One accelerator model.

    ``scaleup_*`` is the chip's fast fabric: NVLink for GPUs, ICI for TPUs. ``links`` is the number
    of such links per chip and ``link_Bps`` the bandwidth of one link in one direction.
    ``dcn_Bps`` is a TPU's share of its host's data-center network, per direction.
    ``tdp_W`` and ``usd_per_chip_hour`` are None where no source gives them.
    """

    name: str
    vendor: str                 # "nvidia" | "google"
    family: str                 # "A100" | "H100" | "B200" | "TPU": the validation grouping
    arch: str                   # "ampere" | "hopper" | "blackwell" | "tpu-v4" | ...
    bf16_flops: float
    fp8_flops: float | None     # None: no FP8 tensor-core path
    hbm_bytes: float
    hbm_Bps: float
    scaleup_links: int
    scaleup_link_Bps: float
    tdp_W: float | None
    usd_per_chip_hour: float | None
    dcn_Bps: float | None = None
    in_network_reduction: bool = False   # NVSwitch SHARP (NVLS) on Hopper and later
    sms: int | None = None               # streaming multiprocessors (GPUs): one GEMM tile each per wave
    price_source: str = ""               # where usd_per_chip_hour comes from (printed by run)
    # Host DRAM per accelerator in its standard system (the host's memory / its accelerators):
    # what activation offload may fill. None: no source in the catalogue (offload is refused).
    host_memory_bytes: float | None = None
    fp4_flops: float | None = None       # dense FP4 (NVFP4 / MXFP4) peak; None: no FP4 tensor cores
    # HBM a program can allocate: the total CUDA reports (cudaGetDeviceProperties totalGlobalMem,
    # torch.cuda.get_device_properties().total_memory), where a measurement or a published query
    # gives it; None: the catalogue capacity (``hbm_bytes``). NVIDIA's "80 GB" / "192 GB" are
    # closer to GiB than to GB, so the catalogue figure understates what fits.
    hbm_usable_bytes: float | None = None

    @property
    def usable_hbm_bytes(self) -> float:
        """HBM the memory check may fill (``hbm_usable_bytes``, else ``hbm_bytes``)."""
        return self.hbm_bytes if self.hbm_usable_bytes is None else self.hbm_usable_bytes
    # The chip's own link to host memory, per direction, where it is not the topology's PCIe
    # (``node.pcie_GBps``): NVLink-C2C to the Grace CPU on Grace-based parts, that Grace's link
    # split evenly between the GPUs it serves. None: host copies cross the topology's PCIe.
    host_link_Bps: float | None = None
    # TPU: the int8 matmul peak (OP/s; None: no int8 path) and the MXU's systolic array side: a
    # matmul's contraction and output dimensions fill it in multiples of this (Google Cloud, "TPU
    # architecture": "An MXU is composed of either 256 x 256 (TPU v6e) or 128 x 128 (TPU versions
    # prior to v6e) multiply-accumulators in a systolic array"; GCP-v6e: "two 256x256 MXU").
    int8_flops: float | None = None
    mxu_dim: int | None = None

    @property
    def is_tpu(self) -> bool:
        """A Google TPU; every other chip in the catalogue is an NVIDIA GPU. The one test of GPU
        versus TPU: everything that differs between the two (kernels, fabrics, failure causes,
        software stacks) asks it."""
        return self.vendor == "google"

    @property
    def fp8_faster(self) -> bool:
        """The chip has an FP8 tensor-core path faster than its BF16 one (what makes FP8 worth
        modelling: without it an FP8 run is a BF16 run)."""
        return self.fp8_flops is not None and self.fp8_flops > self.bf16_flops

    @property
    def blackwell_ultra(self) -> bool:
        """Blackwell Ultra (family "B300": B300 and GB300), whose doubled SFU exponential rate gives
        its attention kernels their own fit (``sim.calibration.ATTENTION_BLACKWELL_ULTRA``)."""
        return self.family == "B300"

    @property
    def scaleup_Bps(self) -> float:
        """Total scale-up bandwidth per chip, one direction."""
        return self.scaleup_links * self.scaleup_link_Bps

    def peak_flops(self, precision: str) -> float:
        """Dense tensor-core peak of *precision*'s GEMMs, FLOP/s: bf16; fp8 and mxfp8 (FP8
        elements) at the FP8 peak; nvfp4 at the FP4 peak; int8 (TPUs) at the int8 peak. Which
        precisions a chip runs at all is ``sim.precision.precisions_of``."""
        peaks = {"bf16": self.bf16_flops, "fp8": self.fp8_flops, "mxfp8": self.fp8_flops,
                 "nvfp4": self.fp4_flops, "int8": self.int8_flops}
        if precision not in peaks:
            raise ConfigError(f"training.precision: got {precision!r}; valid: {', '.join(peaks)}")
        peak = peaks[precision]
        if peak is None:
            raise ConfigError(f"training.precision: {precision} is not supported on {self.name}; "
                              "use bf16")
        return peak


_GRACE_LPDDR5X_B = 480 * GB            # GRACE: LPDDR5X of one Grace CPU (block above GB200)
_GRACE_C2C_BIDI_Bps = 900 * GB         # GRACE: its NVLink-C2C, both directions together

# What CUDA lets a program allocate of the driver's (nvidia-smi's) memory total: H100 79.18 GiB
# (validation/compute/h100-sxm-80gb/env.json) of 81,559 MiB (modal-labs/modal-client#2797), B200
# 178.35 GiB (pytorch/ao#4002) of 183,359 MiB (NVIDIA/TensorRT-LLM#10278): 0.994 and 0.996.
_CUDA_SHARE = 0.995
# TPU usable HBM (hbm_usable_bytes): what XLA:TPU compiles a program against, the "of N hbm" of
# its out-of-memory error ("Used X of N hbm"; the runtime's own reservation is listed apart,
# outside N): v4 30.75 GiB beside 1.25 reserved (erfanzar/EasyDeL#166), v5e 15.48 GiB beside 0.53
# (LargeWorldModel/LWM#60, erfanzar/EasyDeL#142), v6e 31.25 GiB (EnzymeAD/Enzyme-JAX#2422: the
# allocator's "Limit: 31.246 GiB" and "of 31.25G hbm"). v5p keeps GCP's 95 GiB usable; TPU7x its
# catalogue 192 GiB.

_CHIPS = (
    Chip(
        name="A100-SXM-80GB", vendor="nvidia", family="A100", arch="ampere",
        bf16_flops=312 * TFLOPS,            # GK-A100 (NVIDIA A100 datasheet); SB-GPU 3.1e14
        fp8_flops=None,                     # Ampere has no FP8 (GK-A100)
        hbm_bytes=80 * GB,                  # GK-A100: 80 GB HBM2e
        hbm_Bps=2039 * GB,                  # thundercompute A100 guide; SB-GPU 2.0e12
        scaleup_links=12, scaleup_link_Bps=25 * GB,   # NVLink3: 12 x 25 GB/s per dir (SB-GPU)
        tdp_W=400,                          # GK-A100 (SXM)
        usd_per_chip_hour=27.44705 / 8,     # AWS p4de.24xlarge $27.44705/h for 8 GPUs (AWSGPU)
        sms=108,                           # NVIDIA A100 whitepaper: 108 SMs
        price_source="AWS p4de.24xlarge on-demand, $27.45/h for 8 GPUs",
        host_memory_bytes=2000 * GB / 8,    # NVIDIA DGX A100 640GB datasheet: 2 TB system memory
        hbm_usable_bytes=81_920 * MiB * _CUDA_SHARE,    # nvidia-smi total (modal-labs/modal-client#2797)
    ),
    Chip(
        name="A100-SXM-40GB", vendor="nvidia", family="A100", arch="ampere",
        bf16_flops=312 * TFLOPS,            # same GA100 compute as the 80 GB part (GK-A100)
        fp8_flops=None,
        hbm_bytes=40 * GB,                  # 40 GB HBM2
        hbm_Bps=1555 * GB,                  # spec quoted by FlagPerf (validation/compute_and_tpu.md B4)
        scaleup_links=12, scaleup_link_Bps=25 * GB,
        tdp_W=400,                          # GK-A100 (SXM)
        usd_per_chip_hour=21.957642 / 8,    # AWS p4d.24xlarge $21.957642/h for 8 GPUs (AWSGPU)
        sms=108,                           # NVIDIA A100 whitepaper: 108 SMs
        price_source="AWS p4d.24xlarge on-demand, $21.96/h for 8 GPUs",
        host_memory_bytes=1000 * GB / 8,    # NVIDIA DGX A100 320GB datasheet: 1 TB system memory
        hbm_usable_bytes=40_960 * MiB * _CUDA_SHARE,    # nvidia-smi total (modal-labs/modal-client#2797)
    ),
    Chip(
        name="H100-SXM", vendor="nvidia", family="H100", arch="hopper",
        bf16_flops=989.4 * TFLOPS,          # GK-H100; SB-GPU "990"
        fp8_flops=1978.9 * TFLOPS,          # GK-H100; SB-GPU 2.0e15
        hbm_bytes=80 * GB,                  # GK-H100: 80 GB HBM3
        hbm_Bps=3350 * GB,                  # GK-H100; SB-GPU
        scaleup_links=18, scaleup_link_Bps=25 * GB,   # NVLink4: 18 x 25 = 450 GB/s per dir (SB-GPU)
        tdp_W=700,                          # GK-H100
        usd_per_chip_hour=55.04 / 8,        # AWS p5.48xlarge $55.04/h for 8 GPUs (AWSGPU, 2026-01)
        in_network_reduction=True,          # NVSwitch gen3 SHARP (NV-NVS3; SB-GPU)
        sms=132,                           # GK-H100; validation/compute/h100-sxm-80gb/env.json: 132
        # validation/compute/h100-sxm-80gb/env.json: total_memory 79.18 GiB (measured here);
        # nvidia-smi totals 81,559 MiB (modal-labs/modal-client#2797)
        hbm_usable_bytes=79.18 * GiB,
        price_source="AWS p5.48xlarge on-demand, $55.04/h for 8 GPUs (2026-01)",
        host_memory_bytes=2000 * GB / 8,    # NVIDIA DGX H100 datasheet: 2 TB system memory
    ),
    Chip(
        name="H200", vendor="nvidia", family="H100", arch="hopper",
        bf16_flops=990 * TFLOPS,            # SB-GPU 9.9e14 (same GH100 compute as H100)
        fp8_flops=1980 * TFLOPS,            # SB-GPU 2.0e15
        hbm_bytes=141 * GB,                 # SB-GPU; MLPERF-H200 141 GB (GK says 144 physical: we use usable)
        hbm_Bps=4800 * GB,                  # SB-GPU 4.8e12
        scaleup_links=18, scaleup_link_Bps=25 * GB,   # MLPERF-H200 "18x 4th Gen NVLink, 900GB/s" bidi
        tdp_W=700,                          # MLPERF-H200 "H200 TGP 700W"
        usd_per_chip_hour=63.296 / 8,       # AWS p5en.48xlarge $63.296/h for 8 GPUs (AWSGPU)
        in_network_reduction=True,
        sms=132,                           # validation/compute/h200-sxm-141gb/env.json: 132
        hbm_usable_bytes=139.80 * GiB,     # validation/compute/h200-sxm-141gb/env.json (measured)
        price_source="AWS p5en.48xlarge on-demand, $63.30/h for 8 GPUs",
        host_memory_bytes=2000 * GB / 8,    # NVIDIA DGX H200 datasheet: 2 TB system memory
    ),
    Chip(
        name="B200", vendor="nvidia", family="B200", arch="blackwell",
        bf16_flops=2250 * TFLOPS,           # GK-B200 (HGX 1000 W); SB-GPU 2.3e15; VERDA 2.25 PF
        fp8_flops=4500 * TFLOPS,            # GK-B200; SB-GPU 4.5e15
        fp4_flops=9000 * TFLOPS,            # GK-B200; SB-GPU 9.0e15 (FACTS.md 1a)
        hbm_bytes=192 * GB,                 # GK-B200, SB-GPU (VERDA 180 GB: we follow the two agreeing)
        hbm_Bps=8000 * GB,                  # SB-GPU table 8.0e12 (VERDA 7.7e12, SB prose 9e12)
        scaleup_links=18, scaleup_link_Bps=50 * GB,   # NVLink5: 18 x 50 = 900 GB/s per dir (SB-GPU)
        tdp_W=1000,                         # GK-B200; VERDA
        usd_per_chip_hour=113.9328 / 8,     # AWS p6-b200.48xlarge $113.9328/h for 8 GPUs (AWSGPU)
        in_network_reduction=True,
        sms=148,                           # NVIDIA Blackwell: 148 SMs per B200 (two 74-SM dies)
        # CUDA totalGlobalMem 178.35 GiB (pytorch/ao#4002, a device query on a B200; nvidia-smi
        # totals 183,359 MiB, NVIDIA/TensorRT-LLM#10278)
        hbm_usable_bytes=178.35 * GiB,
        price_source="AWS p6-b200.48xlarge on-demand, $113.93/h for 8 GPUs",
        # NVIDIA DGX B200 user guide (docs.nvidia.com/dgx/dgxb200-user-guide, "Hardware
        # Overview"): system memory 2 TB (upgradable to 4 TB) for 8 GPUs
        host_memory_bytes=2000 * GB / 8,
    ),
    # Grace-based parts (GB200, GB300) and Blackwell Ultra; source keys as FACTS.md's, plus:
    # BW-ULTRA  https://developer.nvidia.com/blog/inside-nvidia-blackwell-ultra-the-chip-powering-the-ai-factory-era
    #           (NVIDIA: 160 SMs in the two dies, 15 PF dense NVFP4, 288 GB HBM3e, 8 TB/s)
    # MLPERF51-B300 / -GB300  mlcommons/training_results_v5.1 @ 4da2d1cd, Nebius/systems/
    #           nebius_b300_n1.json and NVIDIA/systems/theia_ngpu72_ngc25.09_nemo.json
    # XLA-B300 / -GB300  openxla/xla @ 4336d12e, xla/backends/gpu/target_config/specs/b300.txtpb,
    #           gb300.txtpb (device queries: core_count, memory bandwidth, NVLink links)
    # AWSGPU-B300  tsaol/aws-gpu @ 299375be, data/p6-b300_instances.js (vantage.sh, 2026-08-26)
    # NV-RA-GB300  https://docs.nvidia.com/enterprise-reference-architectures/nvl72-ai-factory/latest/components.html
    # GRACE     one Grace: 480 GB LPDDR5X (AWS p6e-gb200.36xlarge lists 960 GiB for its 2 Graces
    #           and 4 GPUs, tsaol/aws-gpu @ 18aebd1d data/p6e-gb200_instances.js) and 900 GB/s
    #           bidirectional NVLink-C2C to its GPUs (NVIDIA's Grace figure, quoted in
    #           github.com/AshokBhat/notes/wiki/Grace; secondary). Assumed: the C2C is shared
    #           evenly by the Grace's two GPUs, 225 GB/s per GPU per direction (3.5x PCIe Gen5
    #           x16). GB300 trays report 2.0 TB host memory against GB200's 1.7 TB
    #           (MLPERF51-GB300 / tyche_ngpu72): the four GPUs' larger HBM, which the coherent
    #           OS counts, so the same LPDDR5X is assumed.
    # GB200 NVL72: the Blackwell GPU of a GB200 superchip, at the NVL72's 1,200 W. GK-B200 gives
    # this configuration 2,500 / 5,000 TFLOP/s dense BF16 / FP8; VERDA prints 2,250 / 4,500 (the
    # B200 figures). We take GK-B200's, which is the only source that names the 1,200 W part.
    Chip(
        name="GB200", vendor="nvidia", family="B200", arch="blackwell",
        bf16_flops=2500 * TFLOPS,           # GK-B200 ("GB200 variant of B200 configured to 1,200 W")
        fp8_flops=5000 * TFLOPS,            # GK-B200 (VERDA 4,500)
        fp4_flops=10000 * TFLOPS,           # GK-B200 (VERDA 9,000)
        hbm_bytes=186 * GB,                 # MLPERF-GB200: 186 GB usable HBM3e per GPU
        hbm_Bps=7700 * GB,                  # VERDA 7.7 TB/s
        scaleup_links=18, scaleup_link_Bps=50 * GB,   # NVLink5: 18 x 50 GB/s per dir (SB-GPU; datacrunch)
        tdp_W=1200,                         # VERDA 1.2 kW; GK-B200
        usd_per_chip_hour=None,             # no GB200 list price in the catalogue's sources
        in_network_reduction=True,          # NVLink Switch chips with SHARP engines (NV-NVLINK)
        sms=148,                            # same Blackwell die pair as B200 (SB-GPU: 148 SMs)
        # MLPerf v5.1 Tyche's system log: 189,471 MiB per GPU (nvidia-smi); less the 0.5% CUDA
        # keeps back (_CUDA_SHARE below)
        hbm_usable_bytes=189_471 * MiB * _CUDA_SHARE,
        # One Grace per two GPUs (datacrunch, FACTS.md 1a): its LPDDR5X and its NVLink-C2C split
        # evenly between them (GRACE above).
        host_memory_bytes=_GRACE_LPDDR5X_B / 2,
        host_link_Bps=_GRACE_C2C_BIDI_Bps / 2 / 2,
    ),
    # Blackwell Ultra (source keys in the block above the GB200 entry).
    # Family "B300" for both parts: a new generation the validation groups apart from B200.
    Chip(
        name="B300", vendor="nvidia", family="B300", arch="blackwell",
        # VERDA's B300 column; HGX B300 datasheet 36 PF BF16 sparse / 2 / 8 GPUs (as quoted in
        # NVIDIA/cosmos-framework#114). FP4: VERDA 14 PF dense, glennklockwood.com B300 page ~13.
        bf16_flops=2250 * TFLOPS,
        fp8_flops=4500 * TFLOPS,            # VERDA (2 x BF16, as on every Blackwell)
        fp4_flops=14000 * TFLOPS,           # VERDA (GB300's 15 PF is the 1.4 kW part)
        hbm_bytes=288 * GB,                 # BW-ULTRA 288 GB HBM3e; MLPERF51-B300 275,040 MiB = 288.4 GB
        hbm_Bps=8000 * GB,                  # BW-ULTRA 8 TB/s (XLA-B300 7.94e12; VERDA 7.7)
        scaleup_links=18, scaleup_link_Bps=50 * GB,   # MLPERF51-B300 "18x 5th Gen NVLink, 14.4 TB/s" per 8
        tdp_W=1100,                         # MLPERF51-B300 "B300 TGP 1100W"; VERDA 1.1 kW
        usd_per_chip_hour=142.416 / 8,      # AWS p6-b300.48xlarge $142.416/h for 8 GPUs (AWSGPU-B300)
        in_network_reduction=True,          # NVLink 5 switch chips with SHARP, as B200
        sms=158,                            # XLA-B300 core_count (BW-ULTRA: 160 in the full die pair)
        price_source="AWS p6-b300.48xlarge on-demand, us-east-1, $142.42/h for 8 GPUs (2026-08)",
        host_memory_bytes=4096 * GB / 8,    # AWSGPU-B300: 4,096 GB for 8 GPUs (MLPERF51-B300: 3.0-3.9 TB)
        hbm_usable_bytes=275_040 * MiB * _CUDA_SHARE,   # MLPERF51-B300 driver total (nvidia-smi)
    ),
    Chip(
        name="GB300", vendor="nvidia", family="B300", arch="blackwell",
        bf16_flops=2500 * TFLOPS,           # VERDA (GB300 column; NVL72 180 PF dense / 72)
        fp8_flops=5000 * TFLOPS,            # VERDA (NVL72 360 PF dense / 72)
        fp4_flops=15000 * TFLOPS,           # BW-ULTRA "15 PetaFLOPS dense NVFP4"; VERDA 15
        hbm_bytes=288 * GB,                 # BW-ULTRA (MLPERF51-GB300 shows 284,208 MiB = 298 GB)
        hbm_Bps=8000 * GB,                  # BW-ULTRA 8 TB/s (XLA-GB300 7.93e12)
        scaleup_links=18, scaleup_link_Bps=50 * GB,   # XLA-GB300 18 active links; MLPERF51-GB300 1,800 GB/s
        tdp_W=1400,                         # VERDA 1.4 kW
        usd_per_chip_hour=None,             # no public list or on-demand price found
        in_network_reduction=True,          # NVLink Switch chips with SHARP engines, as GB200
        sms=152,                            # XLA-GB300 "152 cores"
        hbm_usable_bytes=284_208 * MiB * _CUDA_SHARE,   # MLPERF51-GB300 driver total (nvidia-smi)
        # Two Grace CPUs and four GPUs per compute tray (NV-RA-GB300): one Grace per two GPUs, as
        # GB200; its LPDDR5X assumed GB200's (GRACE), its C2C split as there.
        host_memory_bytes=_GRACE_LPDDR5X_B / 2,
        host_link_Bps=_GRACE_C2C_BIDI_Bps / 2 / 2,
    ),
    Chip(
        name="TPU-v4", vendor="google", family="TPU", arch="tpu-v4",
        bf16_flops=275 * TFLOPS,            # GCP-v4; SB-TPU 2.75e14
        fp8_flops=None,                     # no FP8 on v4 (GCP-v4 lists bf16/int8 only)
        hbm_bytes=32 * GiB,                 # GCP-v4: 32 GiB HBM2
        hbm_usable_bytes=30.75 * GiB,       # XLA:TPU's limit (note above _CHIPS): "of 30.75G hbm"
        hbm_Bps=1200 * GB,                  # GCP-v4; SB-TPU 1.2e12
        scaleup_links=6, scaleup_link_Bps=45 * GB,    # SB-TPU 4.5e10 one-way per link (GK says 50)
        tdp_W=192,                          # GCP-v4 measured max power (mean 170 W)
        usd_per_chip_hour=3.22,             # GPUHUNT us-central2 on-demand
        dcn_Bps=25 * GB / 4,                # SB-TPU (Feb 2025): ~2.5e10 B/s per host of 4 chips
        price_source="Google Cloud on-demand, us-central2 (gpuhunt)",
        int8_flops=275 * TFLOPS,            # GCP-v4: 275 "bf16 or int8" (no int8 speed-up)
        mxu_dim=128,
    ),
    Chip(
        name="TPU-v5e", vendor="google", family="TPU", arch="tpu-v5e",
        bf16_flops=197 * TFLOPS,            # GCP-v5e; SB-TPU 1.97e14
        fp8_flops=None,                     # no FP8 peak listed (GCP-v5e: bf16, int8)
        hbm_bytes=16 * GB,                  # GCP-v5e
        hbm_usable_bytes=15.48 * GiB,       # XLA:TPU's limit (note above _CHIPS): "of 15.48G hbm"
        hbm_Bps=819 * GB,                   # GCP-v5e
        # GCP-v5e: 400 GB/s bidi per chip over 4 ICI ports -> 50 GB/s per link per direction.
        # SB-TPU rounds to 45; we take Google's figure, which also reproduces its 1.6 TB/s pod bisection.
        scaleup_links=4, scaleup_link_Bps=400 * GB / 4 / 2,
        tdp_W=None,                         # not found (FACTS.md)
        usd_per_chip_hour=1.20,             # GPUHUNT us-central1 on-demand
        dcn_Bps=Gbps_to_Bps(25),            # SB-TPU-site 3.125e9 B/s per chip (2 x 100 Gb/s per 8-chip host)
        price_source="Google Cloud on-demand, us-central1 (gpuhunt)",
        host_memory_bytes=384 * GB / 8,     # GCP v5e VM types: ct5lp-hightpu-8t, 384 GB for 8 chips
        int8_flops=393 * TFLOPS,            # GCP-v5e: 393 TOPs int8 (SB-TPU 3.94e14)
        mxu_dim=128,
    ),
    Chip(
        name="TPU-v5p", vendor="google", family="TPU", arch="tpu-v5p",
        bf16_flops=459 * TFLOPS,            # GCP-v5p; SB-TPU 4.59e14
        fp8_flops=459 * TFLOPS,             # GCP-7x table: no FP8 speed-up on v5p
        hbm_bytes=95 * GiB,                 # GCP-v5p: 95 GiB usable of 96
        hbm_Bps=2765 * GB,                  # GCP-v5p
        # GCP-v5p: 1200 GB/s bidi per chip over 6 ports -> 100 GB/s per link per direction
        # (SB-TPU says 90 and notes the docs' 100); Google's figure, as for v5e/v6e.
        scaleup_links=6, scaleup_link_Bps=1200 * GB / 6 / 2,
        tdp_W=None,                         # not found
        usd_per_chip_hour=4.20,             # GPUHUNT us-east1/us-east5 on-demand
        dcn_Bps=Gbps_to_Bps(50),            # GCP-v5p: 50 Gb/s per chip
        price_source="Google Cloud on-demand, us-east1/us-east5 (gpuhunt)",
        host_memory_bytes=448 * GB / 4,     # GCP v5p docs, VM properties: 448 GB RAM for 4 chips
        int8_flops=918 * TFLOPS,            # SB-TPU 9.18e14 int8
        mxu_dim=128,
    ),
    Chip(
        name="TPU-v6e", vendor="google", family="TPU", arch="tpu-v6e",
        bf16_flops=918 * TFLOPS,            # GCP-v6e; SB-TPU 9.2e14
        fp8_flops=918 * TFLOPS,             # GCP-7x comparison table
        hbm_bytes=32 * GB,                  # GCP-v6e
        hbm_usable_bytes=31.25 * GiB,       # XLA:TPU's limit (note above _CHIPS): "of 31.25G hbm"
        hbm_Bps=1638 * GB,                  # GCP-v6e
        # GCP-v6e: 800 GB/s bidi per chip over 4 ports -> 100 GB/s per link per direction (SB: 90).
        scaleup_links=4, scaleup_link_Bps=800 * GB / 4 / 2,
        tdp_W=None,                         # not found
        usd_per_chip_hour=2.70,             # GPUHUNT us-east1 on-demand
        dcn_Bps=Gbps_to_Bps(100),           # SB-TPU-site 12.5e9 B/s per chip
        price_source="Google Cloud on-demand, us-east1 (gpuhunt)",
        host_memory_bytes=720 * GB / 4,     # GCP-7x table: 720 GB per 4-chip v6e VM (ct6e-standard-4t)
        int8_flops=1836 * TFLOPS,           # GCP-v6e: 1836 TOPs int8
        mxu_dim=256,                        # GCP-v6e: 256x256 MXUs (2 or 4 a TensorCore: sim.calibration)
    ),
    # TPU7x "Ironwood". GCP-7x's specification table (read in the copy at
    # https://docs.cloud.google.com/tpu/docs/tpu7x?authuser=2, which FACTS.md's store had truncated)
    # gives every figure but the link count: 6 links (a 3-D torus of 4x4x4 cubes, as v4/v5p) is
    # assumed, which splits the per-chip ICI figure as on v5p.
    Chip(
        name="TPU7x", vendor="google", family="TPU", arch="tpu7x",
        bf16_flops=2307 * TFLOPS,           # GCP-7x
        fp8_flops=4614 * TFLOPS,            # GCP-7x (ironwood-performance: 4,614 TFLOP/s FP8)
        hbm_bytes=192 * GiB,                # GCP-7x: 192 GiB HBM
        hbm_Bps=7380 * GB,                  # GCP-7x 7,380 GB/s (SB-TPU-site rounds to 7.4e12)
        # GCP-7x: 1,200 GB/s bidi ICI per chip (as v5p) over 6 ports -> 100 GB/s per link per
        # direction; SB-TPU-site rounds to 90, as it does for v5p. Google's figure, as for v5p.
        scaleup_links=6, scaleup_link_Bps=1200 * GB / 6 / 2,
        tdp_W=None,                         # not found (FACTS.md)
        usd_per_chip_hour=None,             # not in the catalogue's price sources
        dcn_Bps=Gbps_to_Bps(100),           # GCP-7x 100 Gb/s per chip; SB-TPU-site 12.5e9 B/s
        host_memory_bytes=960 * GB / 4,     # GCP-7x: 960 GB RAM per 4-chip VM
        int8_flops=4614 * TFLOPS,           # SB-TPU-site int8 column 4.61e15 (= its FP8 peak)
        mxu_dim=256,                        # assumed: v6e's (Google's MXU note predates TPU7x)
    ),
)

CATALOGUE: dict[str, Chip] = {c.name: c for c in _CHIPS}


def get_chip(name: str, where: str = "chip") -> Chip:
    """The catalogue entry *name*; a ConfigError naming *where* and the valid names otherwise."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ConfigError(f"{where}: unknown chip {name!r}; valid: {', '.join(sorted(CATALOGUE))}"
                          ) from None


# CUDA device names -> catalogue chips, the most specific first (a GB200 name holds "B200").
_DEVICE_NAMES = (("GB300", "GB300"), ("B300", "B300"), ("GB200", "GB200"), ("B200", "B200"),
                 ("H200", "H200"), ("H100 80GB HBM3", "H100-SXM"), ("H100 SXM", "H100-SXM"),
                 ("A100-SXM4-80GB", "A100-SXM-80GB"), ("A100 80GB", "A100-SXM-80GB"),
                 ("A100-SXM4-40GB", "A100-SXM-40GB"))


def chip_of_device_name(device: str) -> str | None:
    """The catalogue chip of a CUDA device name, None where the catalogue has no such part
    (an H100 PCIe or NVL is not the SXM part: its clocks and power differ)."""
    for key, chip in _DEVICE_NAMES:
        if key.lower() in device.lower():
            return chip
    return None
