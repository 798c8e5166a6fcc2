"""Numeric precision of the forward pass: fp32, bf16, fp16 or int8, and `auto`, the fastest faithful one here.

fp32 everywhere; bf16 autocast on GPUs that have it and on CPUs that do bf16 natively; fp16 autocast on GPUs; int8
(per-token activations, smoothed, encoder/int8.py) on CPUs, where torch has its int8 matrix product. `auto` is
resolved once, where the precision enters, from the CPU's kind and the speeds measured on each kind (`MEASURED`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from ..errors import InputError
from .devices import BF16_FEATURES, INT8_FEATURES, cpu_model_and_flags

PRECISIONS = ("fp32", "bf16", "fp16", "int8", "auto")
FAITHFUL = 0.99  # the least cosine to fp32 a precision may give a sentence vector for `auto` to choose it
# Sentences/s against fp32 and the least cosine to fp32, per CPU kind: the packaged model, 2 cores, SST-2 sentences,
# fp32 and bf16 on OpenVINO, int8 on torch (benchmarks/bench.py --precision fp32,bf16,int8; docs/how-to/speed.md).
MEASURED = {
    "AMX": {"bf16": (2.66, 0.99994), "int8": (1.44, 0.9948)},  # Xeon: fp32 558/s, bf16 1,484/s, int8 803/s
    "VNNI + BF16": {"bf16": (1.61, 0.99995), "int8": (1.83, 0.99701)},  # EPYC: fp32 350, bf16 565, int8 642
    "VNNI": {"int8": (2.15, 0.99455)},  # fp32 232/s, int8 498/s
    "AVX2": {"int8": (0.92, 0.99455)},  # int8 products in fp32: no faster than fp32 (bf16 refused: emulated)
}
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
    if precision == "auto":
        return fastest_faithful(device)[0]
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


def cpu_kind(flags: set[str] | None = None) -> str:
    """Name this CPU's kind as `MEASURED` keys it: 'AMX', 'VNNI + BF16', 'VNNI' or 'AVX2'."""
    flags = cpu_model_and_flags()[1] if flags is None else flags
    if "amx_bf16" in flags:
        return "AMX"
    if flags & INT8_FEATURES:
        return "VNNI + BF16" if flags & BF16_FEATURES else "VNNI"
    return "AVX2"


def fastest_faithful(device: torch.device | None = None, flags: set[str] | None = None) -> tuple[str, str]:
    """Return the fastest precision whose vectors keep a cosine of `FAITHFUL` to fp32 on `device`, and why.

    A GPU: fp16 (half weights; cosine to fp32 1.0 on an H200). A CPU: of the precisions it runs natively, the one
    measured fastest on its kind (`MEASURED`) at a least cosine of `FAITHFUL`, or fp32 when none is faster.
    """
    if device is not None and device.type != "cpu":
        return "fp16", f"{device.type}: half-precision weights, cosine to fp32 1.0"
    flags = cpu_model_and_flags()[1] if flags is None else flags
    kind, runs = cpu_kind(flags), {"bf16": bool(flags & BF16_FEATURES), "int8": hasattr(torch, "_int_mm")}
    speeds = {p: m for p, m in MEASURED[kind].items() if runs[p] and m[1] >= FAITHFUL and m[0] > 1.0}
    if not speeds:
        return "fp32", f"{kind}: no precision measured faster than fp32 here keeps a cosine of {FAITHFUL}"
    best = max(speeds, key=lambda p: speeds[p][0])
    ratio, cosine = speeds[best]
    return best, f"{kind}: {ratio:.2f}× fp32's speed at a least cosine of {cosine:.4f} to fp32 (measured)"
