"""What a target names: a TPU chip (chips.py) or an NVIDIA GPU (gpus.py).
The one place that knows both, for the settings, labels and messages."""

from __future__ import annotations

from .gpu.targets import GPUS, gpu, is_gpu
from .tpu.chips import CHIPS, chip


def target_name(text: str) -> str:
    """The target's canonical name ("v7x" for "tpu7x", "h100" for "H100"); ValueError naming the choices."""
    if is_gpu(text):
        return gpu(text).name
    try:
        return chip(text).name
    except ValueError:
        raise ValueError(f"unknown target {text!r}: choose from {', '.join([*CHIPS, *GPUS])}") from None


def target_label(name: str) -> str:
    """ "TPU v5e", "NVIDIA A100-SXM4-80GB": as messages name the target."""
    return gpu(name).label if is_gpu(name) else chip(name).label
