"""NVIDIA GPU targets: what XLA's GPU compiler is told about a GPU it cannot
see (a GpuTargetConfig, in protobuf text), for Pallas kernels compiled
deviceless (issue 33). Like chips.py for TPUs: pure facts, each with its source.

The compiler takes its shared-memory limit from `shared_memory_per_block_optin`
("requested 262144, available: 166912" on the A100) and the ops it accepts
from `cuda_compute_capability`; the other fields steer its cost heuristics.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

KiB = 1 << 10
MiB = 1 << 20
GB = 10**9

# Per compute capability, from NVIDIA's CUDA C++ Programming Guide, "Technical
# Specifications per Compute Capability": shared memory per SM, per block when
# a kernel opts in, and resident threads per SM. Registers (64 Ki per SM and per
# block), 1024 threads per block and the grid's limits are the same for all.
CUDA_GUIDE = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications"


@dataclass(frozen=True)
class Capability:
    shared_per_core: int
    shared_per_block_optin: int
    threads_per_core: int


CAPABILITIES: dict[tuple[int, int], Capability] = {
    (8, 0): Capability(164 * KiB, 163 * KiB, 2048),
    (8, 9): Capability(100 * KiB, 99 * KiB, 1536),
    (9, 0): Capability(228 * KiB, 227 * KiB, 2048),
    (10, 0): Capability(228 * KiB, 227 * KiB, 2048),
}


@dataclass(frozen=True)
class Gpu:
    """One GPU product: its compute capability and the figures of its datasheet."""

    name: str  # what users write: "h100"
    device_kind: str  # what a real device of it reports (jax's device_kind)
    capability: tuple[int, int]
    core_count: int  # streaming multiprocessors
    fp32_per_core: int  # FP32 units per SM
    memory_bandwidth: int  # bytes/s
    l2_cache: int  # bytes
    clock_ghz: float  # boost clock
    memory: int  # bytes of device memory
    source: str  # the datasheet the figures come from
    # A probe of the GPU ("h100/request"): its blocks may use 1 byte of shared memory, so the
    # compiler refuses every kernel that uses any and says its request, which it states only
    # when it refuses (a verified fix's figure, fixes.py; bench_gpu_smem_model's route).
    probe: bool = False

    @property
    def label(self) -> str:
        return self.device_kind

    @property
    def shared_memory_limit(self) -> int:
        """The most shared memory one block may use: the compiler's "available"."""
        return CAPABILITIES[self.capability].shared_per_block_optin

    @property
    def sm(self) -> str:
        """ "sm_90", as ptxas and the compiler's messages name the architecture."""
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def target_config(self) -> str:
        """The GpuTargetConfig, as text, that jax.experimental.topologies takes."""
        per = CAPABILITIES[self.capability]
        major, minor = self.capability
        return f"""gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: {48 * KiB}
  shared_memory_per_core: {per.shared_per_core}
  threads_per_core_limit: {per.threads_per_core}
  core_count: {self.core_count}
  fpus_per_core: {self.fp32_per_core}
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {self.memory_bandwidth}
  l2_cache_size: {self.l2_cache}
  clock_rate_ghz: {self.clock_ghz}
  device_memory_size: {self.memory}
  shared_memory_per_block_optin: {1 if self.probe else per.shared_per_block_optin}
  cuda_compute_capability {{ major: {major} minor: {minor} }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 8 }}
runtime_version {{ major: {RUNTIME_VERSION[0]} minor: {RUNTIME_VERSION[1]} }}
device_description_str: "{self.device_kind}"
"""


# The CUDA runtime every target's config names: what the compiler assumes, and what an
# example's cuda_runtime_get_version() answers in the worker without a GPU (hooks.py).
RUNTIME_VERSION = (12, 8)


GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        Gpu(
            "h100",
            "NVIDIA H100 80GB HBM3",
            (9, 0),
            132,
            128,
            3_350 * GB,
            50 * MiB,
            1.98,
            80 * GB,
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet (H100 SXM)",
        ),
        Gpu(
            "h200",
            "NVIDIA H200",
            (9, 0),
            132,
            128,
            4_800 * GB,
            50 * MiB,
            1.98,
            141 * GB,
            "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM; the H100's die: SMs, L2)",
        ),
        Gpu(
            "a100",
            "NVIDIA A100-SXM4-80GB",
            (8, 0),
            108,
            64,
            2_039 * GB,
            40 * MiB,
            1.41,
            80 * GB,
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
            "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (A100 80GB SXM)",
        ),
        Gpu(
            "l4",
            "NVIDIA L4",
            (8, 9),
            58,
            128,
            300 * GB,
            48 * MiB,
            2.04,
            24 * GB,
            "https://www.nvidia.com/en-us/data-center/l4/ (7,424 CUDA cores in 58 SMs; Ada whitepaper for L2)",
        ),
        Gpu(
            "b200",
            "NVIDIA B200",
            (10, 0),
            148,
            128,
            8_000 * GB,
            126 * MiB,
            1.965,
            180 * GB,
            "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200, per GPU)",
        ),
    )
}


PROBE = "/request"


def probe_of(name: str) -> str:
    """The target that compiles as `name` and refuses with the kernel's request (Gpu.probe)."""
    return f"{gpu(name).name}{PROBE}"


def is_gpu(name: str) -> bool:
    key = name.strip().lower()
    return key.removesuffix(PROBE) in GPUS


def gpu(name: str) -> Gpu:
    key = name.strip().lower()
    base = key.removesuffix(PROBE)
    if base not in GPUS:
        raise ValueError(f"unknown GPU target {name!r}: choose from {', '.join(GPUS)}")
    return replace(GPUS[base], name=key, probe=True) if key != base else GPUS[base]


def gpu_missing(target: str, said: str) -> str:
    """Why a GPU target cannot be compiled for here, and what to install."""
    if "topology not implemented for cuda" in said or "Unknown backend" in said or not said:
        return (
            f"no GPU compiler for {target}: jax's CUDA plugin is not installed here "
            f"(pip install 'vmem-lsp[gpu]', or 'jax[cuda12-local]==' followed by your jax's version)"
        )
    return f"no GPU compiler for {target}: {said.splitlines()[0]}"
