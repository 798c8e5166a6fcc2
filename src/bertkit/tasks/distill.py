"""A smaller encoder from a larger one: keep its first K layers (a cut), where bertkit's layer probe says it can.

The cut model's last hidden state is the teacher's h_K exactly, so its sentence vectors are layer K's, pooled and
normalized as the teacher's own (its sentence-transformers modules travel with it): what `bertkit probe` scored.
It is a plain transformers folder: `AutoModel`, `SentenceTransformer` and every face of bertkit load it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..encoder.encode import Encoder
from ..encoder.int8 import layer_stack
from ..errors import InputError
from ..io.writers import check_output
from ..records import CALIBRATION_FILE, new_record
from .runs import CONFIG_FILE, write_run

logger = logging.getLogger(__name__)

KIND_DISTILLED = "distilled"
TOLERANCE = 0.01  # a layer within one point of the best layer's dev score is as good as the best
LAYER_COUNTS = ("num_hidden_layers", "n_layers", "num_layers")  # what transformers' configs call the layer count
NOT_COPIED = {
    "config.json",
    "model.safetensors",
    "pytorch_model.bin",
    CONFIG_FILE,
    CALIBRATION_FILE,
    "onnx",
    "openvino",
}


@dataclass(frozen=True)
class CutChoice:
    """Which layers a cut keeps, and why: the probe's best layer and the smallest one within `tolerance` of it."""

    layers: int
    best: int
    scores: dict[int, float]  # layer → dev score of its mean-pooled vectors (the probe's)
    tolerance: float

    def reason(self) -> str:
        """Say why these layers: the best layer's score and the kept one's."""
        kept, best = self.scores[self.layers], self.scores[self.best]
        if self.layers == self.best:
            return f"layer {self.best} scores best ({100 * best:.1f}); no fewer layers score within the tolerance"
        return (
            f"layer {self.layers} scores {100 * kept:.1f}, within {100 * self.tolerance:.1f} of the best layer "
            f"{self.best} ({100 * best:.1f})"
        )


def cut_choice(result: Any, tolerance: float = TOLERANCE) -> CutChoice:
    """Return the smallest number of layers whose mean-pooled vectors score within `tolerance` of the best layer's.

    Parameters
    ----------
    result : ProbeResult
        A text probe's result (`probe_text`): each hidden state h1 … hL scored on dev.
    tolerance : float
        How far below the best layer's dev score (accuracy, 0 to 1) a smaller layer may score and still be chosen.
    """
    scores = {
        int(row.choice.split()[0][1:]): row.score
        for row in result.rows
        if row.pooling == "mean" and row.choice.startswith("h") and row.choice.split()[0] != "h0"
    }
    if not scores:
        raise InputError("the probe scored no mean-pooled hidden state to choose a cut from (probe with mean pooling).")
    best = max(scores, key=lambda layer: (scores[layer], -layer))
    kept = min(layer for layer, score in scores.items() if score >= scores[best] - tolerance)
    return CutChoice(kept, best, scores, tolerance)


@dataclass(frozen=True)
class DistillReport:
    """Where the smaller model went, how many of the teacher's layers it keeps, and why."""

    output: Path
    layers: int
    of: int
    reason: str
    seconds: float


def distill(
    model: str | None = None,
    output_dir: str | Path = "distilled",
    *,
    layers: int | str = "best",
    data: str | Path | None = None,
    dev: str | Path | None = None,
    tolerance: float = TOLERANCE,
    overwrite: bool = False,
    **probe_options: Any,
) -> DistillReport:
    """Write a copy of `model` that keeps its first `layers` transformer layers: faster, the vectors of layer K.

    Parameters
    ----------
    model : str, optional
        The teacher: a local directory or a hub name (default: the packaged model).
    output_dir : str or Path
        Where the cut model is written (a transformers folder with the teacher's tokenizer and sentence-transformers
        modules); refused when it exists, unless `overwrite` and bertkit wrote it.
    layers : int or 'best'
        How many layers to keep, 1 to the teacher's count; 'best': the fewest whose vectors score within `tolerance`
        of the best layer's on `data` (the layer probe, `bertkit probe`).
    data, dev : str or Path, optional
        Labelled training and dev files for `layers='best'` (as `bertkit train` reads them).
    tolerance : float
        For 'best': how far below the best layer's dev accuracy (0 to 1) the kept layer may score.
    overwrite : bool
        Replace a folder bertkit wrote before.
    **probe_options
        `probe_text`'s options for 'best' (text_column, label_column, header, limit).

    Returns
    -------
    DistillReport
        The output folder, the layers kept of the teacher's, and why.

    Examples
    --------
    >>> from bertkit import distill
    >>> distill(output_dir="runs/minilm-3", layers=3).layers  # doctest: +SKIP
    3
    """
    started = time.perf_counter()
    if layers != "best" and (isinstance(layers, bool) or not isinstance(layers, int)):
        raise InputError(f"layers={layers!r}: give a number of layers to keep, or 'best' (with labelled data).")
    if layers == "best" and (data is None or dev is None):
        raise InputError("layers='best' probes the layers on labelled data: give data (training file) and dev.")
    if not 0 <= tolerance < 1:
        raise InputError(f"tolerance={tolerance!r}: give a share of accuracy, 0 to 1 (0.01 is one point).")
    output = check_output(output_dir, overwrite, [model, data, dev])
    teacher = Encoder.from_pretrained(model, device="cpu", engine="torch")
    total = teacher.num_layers
    if layers == "best":
        from .probe import probe_text

        probed = probe_text(data, dev, model=model, poolings=("mean",), device="cpu", **probe_options)  # type: ignore[arg-type]
        choice = cut_choice(probed, tolerance)
        layers, reason = choice.layers, choice.reason()
    else:
        reason = "asked for"
    if not 1 <= layers <= total:  # type: ignore[operator]
        raise InputError(f"layers={layers}: this model has {total} layers; keep 1 to {total}.")
    cut = cut_layers(teacher.model, int(layers))
    record = new_record(KIND_DISTILLED, method="cut", teacher=teacher.source.spec, layers=layers, of=total, why=reason)
    files = {**_teacher_files(teacher), CONFIG_FILE: record}
    write_run(output, files, weights=(cut, teacher.tokenizer), checked=True)
    logger.info("wrote %s: %d of %d layers (%s)", output, layers, total, reason)
    return DistillReport(output, int(layers), total, reason, time.perf_counter() - started)


def cut_layers(model: torch.nn.Module, layers: int) -> torch.nn.Module:
    """Keep the model's first `layers` transformer layers (its largest ModuleList) and say so in its config."""
    name, stack = layer_stack(model)
    parent, _, attribute = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attribute, torch.nn.ModuleList(list(stack)[:layers]))
    for count in LAYER_COUNTS:
        if hasattr(model.config, count):
            setattr(model.config, count, layers)
    return model


def _teacher_files(teacher: Encoder) -> dict[str, Path]:
    """List the teacher folder's files the student keeps: its tokenizer and sentence-transformers modules."""
    source = Path(teacher.source.path)
    kept = [item for item in source.iterdir() if not item.name.startswith(".")] if source.is_dir() else []
    return {item.name: item for item in kept if item.name not in NOT_COPIED}


def check_layers(value: str) -> int | str:
    """Read `--layers` of `bertkit distill`: a number, or 'best'."""
    text = str(value).strip()
    if text == "best":
        return text
    if not text.isdigit():
        raise InputError(f"--layers {text}: give a number of layers to keep, or best (with --data and --dev).")
    return int(text)
