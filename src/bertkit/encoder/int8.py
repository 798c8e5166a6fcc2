"""precision='int8': int8 weights (per output channel) and activations (per token, smoothed), int32 products.

Only the stack of transformer layers is quantised, through `torch._int_mm`; the choices and their measured accuracy
and speed are in docs/how-to/speed.md and benchmarks/int8_frontier.py.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..errors import DamagedFileError, InputError
from ..io.writers import staged_files
from ..records import CALIBRATION_FILE, check_record, new_record, record_kind
from . import tokenize as tok
from .defaults import cache_root
from .devices import INT8_FEATURES, cpu_model_and_flags
from .engines import digest
from .runner import call_model, takes_type_ids

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SMOOTH_ALPHA = 0.5  # SmoothQuant's default; what calibrations written before the search was added used
ALPHA_GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
logger = logging.getLogger(__name__)
CALIBRATION_KIND = "int8-calibration"  # its bertkit record's kind (bertkit.records), in the safetensors metadata
PACKAGED_TEXTS = ("calibration.txt", "reviews.tsv")  # bertkit/samples: 118 general sentences and 80 short reviews
HARDWARE_INT8 = bool(INT8_FEATURES & cpu_model_and_flags()[1])  # int8 products in hardware: torch._int_mm is fast
# With AMX, oneDNN's int8 linear on weights packed once for its tiles, giving fp32 scaled by the weights' scales, ran
# 1.6-3x torch._int_mm and its conversion at the packaged model's shapes (docs/how-to/speed.md, int8); on AVX-512
# VNNI alone it measured no faster, so there the product stays torch._int_mm's.
PACKED_INT8 = "amx_int8" in cpu_model_and_flags()[1] and hasattr(torch.ops.onednn, "qlinear_pointwise")


def cache_dir() -> Path:
    """Where calibrations of models without their own are kept: `int8/` under `cache_root()`."""
    return cache_root() / "int8"


@dataclass
class Calibration:
    """Which linears read one tensor (groups, in call order) and, for groups fed by a LayerNorm, its channel maxima."""

    groups: list[list[str]]
    absmax: dict[str, torch.Tensor]  # group leader (first name) → max |x| per input channel
    texts: int
    alpha: float = SMOOTH_ALPHA  # smoothing strength, chosen on the calibration texts

    @property
    def key(self) -> str:
        """Digest of the groups and maxima: equal keys give equal int8 models for equal weights."""
        return digest([self.groups, self.alpha], self.absmax, length=16)

    def save(self, path: Path) -> None:
        """Write the calibration as safetensors (no pickle), its bertkit record in the metadata; complete or absent.

        The cache's writer; `bertkit quantize` writes a model's own through `io.writers.atomic_path`.
        """
        with staged_files(path.parent, [path.name]) as scratch:
            self.write(scratch / path.name)

    def write(self, path: Path) -> None:
        """Write the safetensors file at `path` itself (the caller makes it atomic)."""
        record = new_record(CALIBRATION_KIND, groups=self.groups, texts=self.texts, alpha=self.alpha, digest=self.key)
        tensors = {k: v.contiguous() for k, v in self.absmax.items()}
        save_file(tensors, str(path), metadata={"bertkit": json.dumps(record)})

    @classmethod
    def load(cls, path: Path) -> Calibration:
        """Read a calibration written by `save`; a file of another format is an `InputError`."""
        with safe_open(str(path), framework="pt") as handle:
            meta = handle.metadata() or {}
            try:
                record = json.loads(meta.get("bertkit", "null"))
            except ValueError:
                record = None
            if record_kind(record) != CALIBRATION_KIND:
                raise InputError(
                    f"{path}: not a bertkit int8 calibration; make one with "
                    "`bertkit quantize MODEL --calibration FILE -o DIR`."
                )
            record = check_record(record, CALIBRATION_KIND, path)
            absmax = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118 (safe_open has no __iter__)
        calibration = cls(record["groups"], absmax, int(record["texts"]), float(record["alpha"]))
        if record.get("digest", calibration.key) != calibration.key:
            raise DamagedFileError(
                f"{path}: damaged (its maxima do not match the digest it was written with); make it again with "
                "`bertkit quantize MODEL --calibration FILE -o DIR`."
            )
        return calibration


def layer_stack(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList]:
    """Find the model's stack of transformer layers: its largest ModuleList (encoder.layer, transformer.layer, ...)."""
    stacks = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m)]
    if not stacks:
        raise InputError(f"{type(model).__name__}: no stack of layers found to quantise; use precision='fp32'.")
    return max(stacks, key=lambda item: sum(p.numel() for p in item[1].parameters()))


def calibrate(model: torch.nn.Module, inputs: Iterable[dict]) -> Calibration:
    """Run `model` on each input (one text each, unpadded), record the groups and the LayerNorm-fed maxima.

    Then choose the smoothing strength that keeps these texts' vectors closest to fp32.
    """
    prefix, stack = layer_stack(model)
    linears = {f"{prefix}.{name}": m for name, m in stack.named_modules() if isinstance(m, torch.nn.Linear)}
    norm_outputs: dict[int, torch.Tensor] = {}
    seen: dict[int, tuple[torch.Tensor, list[str]]] = {}  # this pass: input tensor id → (tensor, linears reading it)
    absmax: dict[str, torch.Tensor] = {}
    fed_by_norm: set[str] = set()

    def on_norm(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
        norm_outputs[id(output)] = output

    def on_linear(name: str) -> Callable[[torch.nn.Module, tuple], None]:
        def hook(module: torch.nn.Module, args: tuple) -> None:
            x = args[0]
            seen.setdefault(id(x), (x, []))[1].append(name)
            if id(x) in norm_outputs:
                fed_by_norm.add(name)
                channel_max = x.detach().abs().reshape(-1, x.shape[-1]).amax(0).float()
                absmax[name] = torch.maximum(absmax[name], channel_max) if name in absmax else channel_max

        return hook

    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm) or type(m).__name__.endswith("LayerNorm")]
    hooks = [m.register_forward_hook(on_norm) for m in norms]
    hooks += [m.register_forward_pre_hook(on_linear(name)) for name, m in linears.items()]
    groups: list[list[str]] | None = None
    feeds: list[dict] = []
    try:
        for feed in inputs:
            feeds.append(feed)
            norm_outputs.clear()
            seen.clear()
            call_model(model, feed, torch.device("cpu"))
            if groups is None:
                groups = [names for _, names in seen.values()]
    finally:
        for hook in hooks:
            hook.remove()
    if not feeds:
        raise InputError("int8 calibration needs at least one text.")
    leaders = {group[0]: group for group in groups or []}
    merged = {
        leader: torch.stack([absmax[n] for n in group]).amax(0)
        for leader, group in leaders.items()
        if all(n in fed_by_norm for n in group)
    }
    calibration = Calibration(groups or [], merged, len(feeds))
    errors = alpha_errors(model, calibration, feeds, ALPHA_GRID)
    calibration.alpha = min(errors, key=errors.get)
    return calibration


def alpha_errors(
    model: torch.nn.Module, calibration: Calibration, feeds: Sequence[dict], alphas: Sequence[float]
) -> dict[float, float]:
    """Measure for each smoothing strength how far its int8 copy moves the texts' vectors.

    The error is the relative L2 error of each layer's mean over tokens, averaged over layers and texts (every layer,
    since users pick any).
    """
    batches = list(_padded_batches(feeds))

    def layer_means(network: torch.nn.Module, batch: dict) -> list[torch.Tensor]:
        mask = batch["attention_mask"].unsqueeze(-1).float()
        states = call_model(network, batch, torch.device("cpu"), output_hidden_states=True).hidden_states[1:]
        return [(h * mask).sum(1) / mask.sum(1) for h in states]

    with torch.inference_mode():
        references = [layer_means(model, batch) for batch in batches]
        result = {}
        for alpha in alphas:
            quantized = quantize_model(model, calibration, alpha).eval()
            errors = [
                ((g - r).norm(dim=1) / r.norm(dim=1).clamp(min=1e-12)).mean()
                for batch, reference in zip(batches, references)
                for g, r in zip(layer_means(quantized, batch), reference)
            ]
            result[alpha] = float(torch.stack(errors).mean())
    return result


def _padded_batches(feeds: Sequence[dict], size: int = 32) -> Iterable[dict]:
    """Group the one-text feeds by length into padded batches (pad positions are masked out)."""
    ordered = sorted(feeds, key=lambda feed: feed["input_ids"].shape[1])
    for start in range(0, len(ordered), size):
        chunk = ordered[start : start + size]
        ids = [feed["input_ids"][0].tolist() for feed in chunk]
        types = [
            f["token_type_ids"][0].tolist() if "token_type_ids" in f else [0] * len(row) for f, row in zip(chunk, ids)
        ]
        padded = dict(zip(("input_ids", "attention_mask", "token_type_ids"), tok.pad_ids(ids, types, 0)))
        yield {key: padded[key] for key in chunk[0]}  # what the model takes; pad ids are 0, masked out


class Int8Group:
    """The linears reading one tensor (query, key and value; or one alone) as one int8 product.

    Its rows are quantised once (asymmetric, after the optional smoothing), multiplied by the stacked weights, and
    each member takes its columns; the product is kept per thread until every member has its part.
    """

    def __init__(self, weights: Sequence[torch.Tensor], biases: Sequence, inverse_smooth: torch.Tensor | None) -> None:
        weight = torch.cat([w.detach().float() for w in weights])
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127
        quantized = torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8)
        self.weight_int8 = quantized  # (out, in), like nn.Linear
        # without VNNI, torch._int_mm is ~30× slower than an fp32 product: the same int8 values are multiplied in fp32
        # (sums exact to fp32 rounding), so the vectors stay int8's and the speed is fp32's (`bertkit env` says so)
        self.weight_values = None if HARDWARE_INT8 else quantized.float().t().contiguous()
        self.weight_packed = torch.ops.onednn.qlinear_prepack(quantized, None) if PACKED_INT8 else None
        self.weight_zero_points = torch.zeros(len(scale), dtype=torch.long)  # symmetric weights
        self.weight_scale = scale
        # x = scale·q + middle per row, so x·Wᵀ + b = scale·(q·Wᵀ) + [middle, 1]·[row sums of W; b]: the second term
        # is one rank-2 product, with the sums precomputed
        weight_sum = (quantized.float() * scale[:, None]).sum(1)
        bias = [b.detach().float() if b is not None else torch.zeros(len(w)) for w, b in zip(weights, biases)]
        self.offset = torch.stack([weight_sum, torch.cat(bias)])
        self.inverse_smooth = inverse_smooth
        bounds = [0, *itertools.accumulate(len(w) for w in weights)]
        self.columns = list(zip(bounds, bounds[1:]))  # each member's columns of the product
        self._last: dict[int, tuple] = {}

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """Compute x Wᵀ + b for the stacked weights, `x` quantised per row: (rows, every member's outputs), fp32."""
        rows = x.reshape(-1, x.shape[-1])
        if self.inverse_smooth is not None:
            rows = rows * self.inverse_smooth
        high, low = rows.amax(dim=1, keepdim=True), rows.amin(dim=1, keepdim=True)
        middle = (high + low) * 0.5
        scale = ((high - low) * (0.5 / 127)).clamp_(min=1e-12)  # [-127, 127] spans [low, high]
        centred = rows.sub_(middle) if self.inverse_smooth is not None else rows - middle  # x itself stays as it was
        # (x - middle) / scale lies in [-127, 127] by construction, so rounding needs no clamp; an op per step is
        # 3-7× faster here than torch.addcmul with a broadcast first operand
        centred.mul_(1.0 / scale).round_()
        middle_and_one = torch.cat([middle, torch.ones_like(middle)], dim=1)
        if self.weight_packed is not None:  # uint8 rows (q + 128, zero point 128): x·Wᵀ in fp32, times W's scales
            weights = (self.weight_packed, self.weight_scale, self.weight_zero_points)
            q8 = centred.add_(128).to(torch.uint8)
            y = torch.ops.onednn.qlinear_pointwise(q8, 1.0, 128, *weights, None, 1.0, 0, torch.float32, "none", [], "")
            return y.mul_(scale).addmm_(middle_and_one, self.offset)
        quantized = centred.to(torch.int8)
        if self.weight_values is None:
            y = torch._int_mm(quantized, self.weight_int8.t()).float()  # faster than int32 × fp32 in one op
        else:
            y = torch.mm(quantized.float(), self.weight_values)
        return y.mul_(scale).mul_(self.weight_scale).addmm_(middle_and_one, self.offset)

    def __call__(self, x: torch.Tensor, member: int) -> torch.Tensor:
        """Member `member`'s output for `x`, shaped as `x` with its own width."""
        first, last = self.columns[member]
        thread = threading.get_ident()
        version = None if x.is_inference() else x._version  # inference tensors keep no version (passes change none)
        kept = self._last.get(thread)
        if kept is None or kept[0] is not x or kept[1] != version or member in kept[3]:
            if len(self._last) > 64:  # threads come and go; keep the table small
                self._last.clear()
            kept = self._last[thread] = (x, version, self.product(x), set())  # holding x: its id cannot be reused
        kept[3].add(member)
        if len(kept[3]) == len(self.columns):  # every member has its part: the product is not kept
            self._last.pop(thread, None)  # (another thread may have cleared the table meanwhile)
        return kept[2][:, first:last].reshape(*x.shape[:-1], last - first)


class Int8Linear(torch.nn.Module):
    """y = x Wᵀ + b in int8 with int32 products, fp32 result: one member of an `Int8Group`."""

    def __init__(self, group: Int8Group, member: int) -> None:
        super().__init__()
        self.group, self.member = group, member
        first, last = group.columns[member]
        self.in_features, self.out_features = group.weight_int8.shape[1], last - first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Compute x Wᵀ + b from `x` quantised per token, in the group's one int8 matrix product."""
        return self.group(x, self.member)


def quantize_model(model: torch.nn.Module, calibration: Calibration, alpha: float | None = None) -> torch.nn.Module:
    """Copy `model` with its calibrated linears made `Int8Linear` (smoothed with `alpha`, by default the calibration's).

    Everything else is shared with `model`.
    """
    alpha = calibration.alpha if alpha is None else alpha
    prefix, stack = layer_stack(model)
    linears = {f"{prefix}.{name}": m for name, m in stack.named_modules() if isinstance(m, torch.nn.Linear)}
    missing = [name for group in calibration.groups for name in group if name not in linears]
    if missing:
        raise InputError(
            f"the int8 calibration does not fit this model (no layer {missing[0]}); calibrate it again "
            "with `bertkit quantize`."
        )
    replaced = {id(p) for group in calibration.groups for name in group for p in linears[name].parameters()}
    shared = {id(t): t for t in list(model.parameters()) + list(model.buffers()) if id(t) not in replaced}
    quantized = copy.deepcopy(model, memo=dict(shared))
    modules = dict(quantized.named_modules())
    for group in calibration.groups:
        members = [modules[name] for name in group]
        weights = [m.weight.detach().float() for m in members]
        inverse = None
        if group[0] in calibration.absmax:
            weight_max = torch.stack([w.abs().amax(0) for w in weights]).amax(0).clamp(min=1e-5)
            activation_max = calibration.absmax[group[0]].clamp(min=1e-5)
            smooth = (activation_max**alpha / weight_max ** (1 - alpha)).clamp(1e-3, 1e3)
            weights = [w * smooth[None, :] for w in weights]
            inverse = 1.0 / smooth
        product = Int8Group(weights, [m.bias for m in members], inverse)
        for index, name in enumerate(group):
            parent_name, _, child = name.rpartition(".")
            setattr(modules[parent_name], child, Int8Linear(product, index))
    return quantized


def calibration_inputs(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int
) -> Iterable[dict]:
    """Yield one unpadded input of `model` per text (padding would put pad tokens into the channel maxima)."""
    with_type_ids = takes_type_ids(model)
    for item in tok.encode(tokenizer, list(texts), max_length=max_length):
        ids, mask, types = tok.pad_ids([item.ids], [item.type_ids], tokenizer.pad_token_id)
        yield {"input_ids": ids, "attention_mask": mask, **({"token_type_ids": types} if with_type_ids else {})}


def packaged_texts() -> list[str]:
    """Read the calibration sentences that ship with bertkit."""
    from importlib.resources import files

    texts: list[str] = []
    for name in PACKAGED_TEXTS:
        lines = (files("bertkit") / "samples" / name).read_text(encoding="utf-8").splitlines()
        if name.endswith(".tsv"):
            lines = [line.split("\t")[0] for line in lines[1:]]
        texts += [line for line in lines if line.strip()]
    return texts


def calibration_for(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    directory: str | None,
    fingerprint: str | None,
) -> Calibration:
    """Return the directory's own calibration, else the cached one for this fingerprint, else a new one.

    A new one is calibrated on the packaged texts.
    """
    own = Path(directory) / CALIBRATION_FILE if directory else None
    if own is not None and own.is_file():
        return Calibration.load(own)
    cached = cache_dir() / f"{fingerprint}.safetensors" if fingerprint else None
    if cached is not None and cached.is_file():
        try:
            return Calibration.load(cached)
        except DamagedFileError as error:
            logger.warning("%s; calibrating again", str(error).split(";")[0])
        except InputError:  # written by another bertkit: made again
            pass
    calibration = calibrate(model, calibration_inputs(model, tokenizer, packaged_texts(), max_length))
    if cached is not None:
        try:
            calibration.save(cached)
        except OSError:  # a read-only home: calibrate again next time
            pass
    return calibration
