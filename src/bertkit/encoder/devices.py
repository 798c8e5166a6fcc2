"""Where the model runs: one `device` option ("auto", "cpu", "cuda", "cuda:N", "mps") for every face of bertkit."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..errors import InputError, quoted
from .defaults import GPU_BATCH_TOKENS, MAX_BATCH_TOKENS

if TYPE_CHECKING:
    from transformers import PreTrainedModel

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N or mps"


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """Return the torch device for `spec`; 'auto' picks CUDA, then Apple's MPS, then the CPU.

    Parameters
    ----------
    spec : str, torch.device or None
        'auto' (None too), 'cpu', 'cuda', 'cuda:N' or 'mps'.

    Returns
    -------
    torch.device
        A device this machine has; asking for one it lacks is an `InputError` that says what it has.
    """
    if isinstance(spec, torch.device):
        spec = str(spec)
    name = (spec or "auto").strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "mps":
        if not _mps_available():
            raise InputError("device='mps': this machine has no Apple GPU (MPS); use device='cpu' or device='auto'.")
        return torch.device("mps")
    if name == "cuda" or name.startswith("cuda:"):
        return _cuda(name)
    raise InputError(f"device={quoted(spec)}: give one of {DEVICE_CHOICES}.")


class OutOfDeviceMemory(InputError):
    """One input alone does not fit in the device's memory (after its batch was split down to that one row).

    `row` is its index in the call's texts.
    """

    def __init__(self, row: int, tokens: int, device: torch.device) -> None:
        self.row, self.tokens, self.device = row, tokens, device
        super().__init__(
            f"text {row}: {tokens} tokens do not fit in the memory of {device} even alone; give a smaller "
            "max_length, free the GPU, or use device='cpu'."
        )


GPU_MEMORY_SHARE = 0.5  # of the free GPU memory, the most one batch's activations may take


def token_budget(model: PreTrainedModel, device: torch.device, position_limit: int) -> int:
    """Return the padded tokens one forward pass may hold.

    `MAX_BATCH_TOKENS` on a CPU (cache-sized); on a GPU, `GPU_BATCH_TOKENS` or, when less, a share of its free memory
    over what a token costs there (every layer's output is kept, plus the widest intermediate and a row of attention
    scores per head); at least one full-length row.

    Parameters
    ----------
    model : transformers model
        Its config gives layers, hidden size, heads and the feed-forward width.
    device : torch.device
        Where it runs.
    position_limit : int
        The longest row the model takes.

    Returns
    -------
    int
        Padded tokens a batch may hold.
    """
    if device.type != "cuda":
        return MAX_BATCH_TOKENS
    config = model.config
    hidden = int(getattr(config, "hidden_size", getattr(config, "dim", 768)))
    layers = int(getattr(config, "num_hidden_layers", getattr(config, "n_layers", 12)))
    heads = int(getattr(config, "num_attention_heads", getattr(config, "n_heads", 12)))
    width = int(getattr(config, "intermediate_size", getattr(config, "hidden_dim", 4 * hidden)))
    per_token = 4 * ((layers + 1) * hidden + width + heads * position_limit)
    free, _ = torch.cuda.mem_get_info(device)
    return max(position_limit, min(GPU_BATCH_TOKENS, int(GPU_MEMORY_SHARE * free / per_token)))


def _cuda(name: str) -> torch.device:
    if not torch.cuda.is_available():
        build = f"torch {torch.__version__}" + (" (a CPU-only build)" if torch.version.cuda is None else "")
        raise InputError(
            f"device={name!r}: this machine has no CUDA GPU that {build} can use; use device='cpu' or "
            "device='auto' (which picks a GPU when there is one)."
        )
    index_text = name.partition(":")[2]
    if index_text and not index_text.isdigit():
        raise InputError(
            f"device={name!r}: give cuda or cuda:N with N a GPU number (0 to {torch.cuda.device_count() - 1})."
        )
    index = int(index_text) if index_text else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise InputError(f"device={name!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s), numbered from 0.")
    return torch.device("cuda", index)


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


# glibc serves tensors of ever new sizes from its heaps once it has seen a large one freed (its mmap threshold rises),
# and the freed pieces stay resident: 120 shapes took the packaged model's process from 440 MB to 750 MB, where it
# stays. malloc_trim hands them back; after every few passes it cost 10 % of embedding speed, so the service calls it
# when its queue goes idle (docs/reliability.md).
_MALLOC_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None) if sys.platform.startswith("linux") else None


def release_free_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's `malloc_trim`; nothing elsewhere)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def describe(device: torch.device) -> str:
    """'cpu', or 'cuda:0 (NVIDIA H100 80GB HBM3)': what run summaries and records say."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


BF16_FEATURES = {"amx_bf16", "avx512_bf16"}  # native bf16 on a CPU
INT8_FEATURES = {"amx_int8", "avx512_vnni", "avx_vnni"}  # int8 products in hardware (VNNI)
CPU_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx_vnni")


def machine_facts() -> dict[str, str]:
    """Describe what decides bertkit's speed here, as `bertkit env` prints it.

    CPU and its vector features, native bf16 and int8 support, threads, GPUs, and the versions of torch and
    transformers.

    Returns
    -------
    dict
        Name → one line of text.
    """
    from importlib.metadata import PackageNotFoundError, version

    def package(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    model, flags = cpu_model_and_flags()
    bf16 = sorted(flags & BF16_FEATURES)
    int8 = sorted(flags & INT8_FEATURES)
    gpus = [f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())]
    build = "CUDA " + torch.version.cuda if torch.version.cuda else "CPU-only build"
    return {
        "bertkit": package("bertkit"),
        "torch": f"{torch.__version__} ({build})",
        "transformers": package("transformers"),
        "cpu": f"{model}, {os.cpu_count()} logical cores",
        "cpu features": " ".join(f for f in CPU_FEATURES if f in flags) or "none of " + ", ".join(CPU_FEATURES),
        "bf16 on the cpu": f"native ({', '.join(bf16)}): precision='bf16' is fast"
        if bf16
        else "emulated (no AMX or AVX512-BF16): precision='bf16' is refused",
        "int8 on the cpu": f"VNNI ({', '.join(int8)}): precision='int8' is fast"
        if int8
        else "no VNNI: precision='int8' multiplies its int8 values in fp32 (int8's vectors at fp32's speed)",
        "openvino": package("openvino"),
        "torch threads": str(torch.get_num_threads()),
        "gpus": "; ".join(gpus) if gpus else "none that torch can use",
    }


def cpu_model_and_flags() -> tuple[str, set[str]]:
    """Return the CPU's model name and feature flags, from /proc/cpuinfo (elsewhere: platform's name, no flags)."""
    import platform

    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), set()
    model, flags = platform.machine(), set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == platform.machine():
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return model, flags
