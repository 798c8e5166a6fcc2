"""Numeric precision of the forward pass: fp32, bf16, fp16 or int8.

fp32 everywhere; bf16 autocast on GPUs that have it and on CPUs that do bf16 natively; fp16 autocast on GPUs; int8
(per-token activations, smoothed, encoder/int8.py) on CPUs, where torch has its int8 matrix product.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from ..errors import InputError
from .devices import BF16_FEATURES, cpu_model_and_flags

PRECISIONS = ("fp32", "bf16", "fp16", "int8")
HALF_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def fast_bf16_cpu() -> bool:
    """Tell whether this CPU does bf16 natively (AMX or AVX512-BF16, as /proc/cpuinfo lists them)."""
    if cpu_model_and_flags()[1] & BF16_FEATURES:
        return True
    if Path("/proc/cpuinfo").exists():
        return False
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def check_precision(precision: str, device: torch.device | None = None, name: str = "precision") -> str:
    """Validate `precision` for `device` (default the CPU): the one check, for inference and training alike.

    bf16 only where it is native, fp16 only on a GPU, int8 only on a CPU with torch's int8 matrix product. `name` is
    the option the message names (`mixed_precision` for training).
    """
    device = device or torch.device("cpu")
    if precision not in PRECISIONS:
        raise InputError(f"{name}={precision!r}: valid values are {', '.join(PRECISIONS)}.")
    if precision == "int8" and device.type != "cpu":
        raise InputError(
            f"{name}='int8' is a CPU option (int8 matrix products through oneDNN's VNNI/AMX kernels); on "
            f"{device} use precision='fp16' or precision='bf16', which GPUs run natively."
        )
    if precision == "fp16" and device.type == "cpu":
        raise InputError(
            f"{name}='fp16' runs on a GPU (CUDA or MPS); on a CPU use 'bf16' where the CPU has native bf16, or 'fp32'."
        )
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise InputError(f"{name}='bf16': {torch.cuda.get_device_name(device)} has no bf16; use {name}='fp16'.")
    if precision == "int8" and not hasattr(torch, "_int_mm"):
        raise InputError(
            f"{name}='int8' needs torch's int8 matrix product (torch >= 2.2; this is {torch.__version__}): "
            "pip install torch==2.13.0, or use precision='fp32'."
        )
    if precision == "bf16" and device.type == "cpu" and not fast_bf16_cpu():
        raise InputError(
            f"{name}='bf16': this CPU ({torch.backends.cpu.get_cpu_capability()}) has no native bf16 "
            "(no AMX or AVX512-BF16), so bf16 matrix products are emulated and far slower than fp32 "
            "(benchmarks/bench.py --precision fp32,bf16 shows by how much). Use precision='fp32' here; bf16 pays off "
            "on CPUs with AMX (Intel Sapphire Rapids and later) or AVX512-BF16."
        )
    return precision


def arithmetic(precision: str, device: torch.device | None = None) -> contextlib.AbstractContextManager:
    """Return the context for one forward pass: bf16/fp16 autocast on `device`'s type.

    Nothing for fp32 and int8 (its own int8 layers).
    """
    if precision in HALF_DTYPES:
        return torch.autocast((device or torch.device("cpu")).type, dtype=HALF_DTYPES[precision])
    return contextlib.nullcontext()
