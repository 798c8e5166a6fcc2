"""A smaller encoder from a larger one: keep its first K layers (a cut), where bertkit's layer probe says it can.

The cut model's last hidden state is the teacher's h_K exactly, so its sentence vectors are layer K's, pooled and
normalized as the teacher's own (its sentence-transformers modules travel with it): what `bertkit probe` scored.
It is a plain transformers folder: `AutoModel`, `SentenceTransformer` and every face of bertkit load it.
"""

from __future__ import annotations

import copy
import logging
import math
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..encoder.encode import Encoder
from ..encoder.int8 import layer_stack
from ..encoder.options import EmbedOptions
from ..encoder.runner import call_model
from ..encoder.vectors import vector_head
from ..errors import InputError
from ..io.writers import check_output
from ..records import new_record
from .runs import CONFIG_FILE, write_run

logger = logging.getLogger(__name__)

KIND_DISTILLED = "distilled"
TOLERANCE = 0.01  # a layer within one point of the best layer's dev score is as good as the best
LAYER_COUNTS = ("num_hidden_layers", "n_layers", "num_layers")  # what transformers' configs call the layer count
# what the student keeps of the teacher's folder: its tokenizer and its sentence-transformers modules (their folders,
# `1_Pooling`, `2_Dense`, ...); never its weights (of any framework), config, record or int8 calibration
KEPT_FILES = re.compile(
    r"(tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json|added_tokens\.json|vocab\.(txt|json)|merges\.txt|"
    r".*\.model|modules\.json|sentence_bert_config\.json|config_sentence_transformers\.json|\d+_\w+)"
)


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
    texts: str | Path | None = None,
    static: bool = False,
    dims: int | None = 256,
    epochs: int = 1,
    batch_size: int = 32,
    learning_rate: float = 1e-4,
    seed: int = 0,
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
    texts : str or Path, optional
        Unlabelled texts (a text file, a line each, or a table's text column as `bertkit embed` reads it): the cut
        is then trained to give the teacher's sentence vectors for them (mean-squared error on the vectors the
        teacher's default options make), `epochs` passes of `batch_size` texts at `learning_rate` (AdamW, linear
        decay, transformers' `Trainer`), `seed` fixing the order.
    static : bool
        Write a static model instead (model2vec's distillation, no data needed): a table of one vector per token of
        the teacher's vocabulary (each token through the teacher, mean-pooled, SIF-weighted), averaged over a text's
        tokens. bertkit, model2vec and sentence-transformers (`StaticEmbedding`) load it; `layers`, `data` and
        `texts` do not apply.
    dims : int, optional
        static: the table's width after PCA (2 to the teacher's hidden size); None keeps the teacher's width.
    epochs, batch_size, learning_rate, seed
        The training's settings (with `texts`).
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
    if static:
        return _distill_static(model, output_dir, dims, overwrite, started)
    if layers != "best" and (isinstance(layers, bool) or not isinstance(layers, int)):
        raise InputError(f"layers={layers!r}: give a number of layers to keep, or 'best' (with labelled data).")
    if layers == "best" and (data is None or dev is None):
        raise InputError("layers='best' probes the layers on labelled data: give data (training file) and dev.")
    if not 0 <= tolerance < 1:
        raise InputError(f"tolerance={tolerance!r}: give a share of accuracy, 0 to 1 (0.01 is one point).")
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name}={value!r}: give a whole number, 1 or more.")
    if not 0 < learning_rate < 1:
        raise InputError(f"learning_rate={learning_rate!r}: give a rate between 0 and 1 (1e-4 by default).")
    output = check_output(output_dir, overwrite, [model, data, dev, texts])
    unlabelled = _read_texts(texts) if texts is not None else None
    teacher = Encoder.from_pretrained(model, device="cpu", engine="torch")
    _check_has_layers(teacher)
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
    training: dict[str, Any] = {}
    if unlabelled is not None:
        targets = teacher.embed(unlabelled, batch_size=64)  # before the cut: the teacher's own vectors
        settings: dict[str, Any] = {
            "epochs": epochs,
            "batch_size": batch_size,
            "learning_rate": learning_rate,
            "seed": seed,
        }
        cut = cut_layers(copy.deepcopy(teacher.model), int(layers))  # type: ignore[arg-type]
        losses = fit_student(cut, teacher, unlabelled, targets, **settings)
        training = {**settings, "texts": len(unlabelled), "loss_first": losses[0], "loss_last": losses[-1]}
        reason += f"; trained on {len(unlabelled)} texts to give the teacher's vectors (MSE {losses[-1]:.2e})"
    else:
        cut = cut_layers(teacher.model, int(layers))  # type: ignore[arg-type]
    method = "cut and distilled" if training else "cut"
    record = new_record(
        KIND_DISTILLED, method=method, teacher=teacher.source.spec, layers=layers, of=total, why=reason, **training
    )
    files: dict[str, Any] = {**_teacher_files(teacher), CONFIG_FILE: record}
    write_run(output, files, weights=(cut, teacher.tokenizer), checked=True)
    logger.info("wrote %s: %d of %d layers (%s)", output, layers, total, reason)
    return DistillReport(output, int(layers), total, reason, time.perf_counter() - started)


def _distill_static(
    model: str | None, output_dir: str | Path, dims: int | None, overwrite: bool, started: float
) -> DistillReport:
    """Write a static model of `model` (model2vec's distillation) at `output_dir`: a table, no layers."""
    try:
        from model2vec.distill import distill_from_model
    except ImportError:
        raise InputError("a static model is distilled by model2vec: pip install 'bertkit[static]'.") from None
    output = check_output(output_dir, overwrite, [model])
    teacher = Encoder.from_pretrained(model, device="cpu", engine="torch")
    _check_has_layers(teacher)
    if dims is not None and not 2 <= dims <= teacher.hidden_size:
        raise InputError(f"dims={dims}: give 2 to the teacher's width, {teacher.hidden_size} (or None to keep it).")
    with tempfile.TemporaryDirectory() as folder:
        table = distill_from_model(teacher.model, teacher.tokenizer, pca_dims=dims, device="cpu")
        table.save_pretrained(folder)
        saved = {item.name: item for item in Path(folder).iterdir()}
        width = table.embedding.shape[1]
        reason = f"a table of {table.embedding.shape[0]} tokens × {width} (model2vec {_version('model2vec')})"
        record = new_record(
            KIND_DISTILLED, method="static", teacher=teacher.source.spec, dims=width, layers=0, of=teacher.num_layers
        )
        write_run(output, {**saved, CONFIG_FILE: record}, checked=True)
    logger.info("wrote %s: %s", output, reason)
    return DistillReport(output, 0, teacher.num_layers, reason, time.perf_counter() - started)


def _check_has_layers(teacher: Encoder) -> None:
    if teacher.num_layers == 0:
        raise InputError(f"{teacher.source.spec} is a static model: it has no layers to cut or distil.")


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def cut_layers(model: torch.nn.Module, layers: int) -> torch.nn.Module:
    """Keep the model's first `layers` transformer layers (its largest ModuleList) and say so in its config."""
    name, stack = layer_stack(model)
    parent, _, attribute = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attribute, torch.nn.ModuleList(list(stack)[:layers]))
    for count in LAYER_COUNTS:
        if hasattr(model.config, count):
            setattr(model.config, count, layers)
    return model


def fit_student(
    student: torch.nn.Module,
    teacher: Encoder,
    texts: list[str],
    targets: np.ndarray,
    *,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
) -> list[float]:
    """Train `student` so that the teacher's vector head on its hidden states gives `targets`; return the losses.

    transformers' `Trainer` (AdamW, linear decay, 10 % warm-up) on the mean-squared error between the student's
    sentence vectors (the teacher's pooling, Dense modules and normalization, on the student's last layer) and the
    teacher's; the texts are tokenized batch by batch as the encoder tokenizes them.
    """
    import transformers

    head = vector_head(teacher, EmbedOptions().resolve(teacher))
    rows = [{"text": text, "target": target} for text, target in zip(texts, targets)]

    def collate(batch: list[dict]) -> dict[str, torch.Tensor]:
        encoded = teacher.tokenize([row["text"] for row in batch])
        inputs = {"input_ids": encoded.input_ids, "attention_mask": encoded.attention_mask}
        if teacher.network.takes_type_ids:
            inputs["token_type_ids"] = encoded.token_type_ids
        return {**inputs, "labels": torch.as_tensor(np.stack([row["target"] for row in batch]))}

    class Student(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = student

        def forward(self, labels: torch.Tensor, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
            out = call_model(self.model, inputs, torch.device("cpu"), "fp32", gradients=True, output_hidden_states=True)
            pooler = getattr(out, "pooler_output", None)
            vectors = head.sentences(head.tokens(out.hidden_states), inputs["attention_mask"], pooler)
            return {"loss": torch.nn.functional.mse_loss(vectors, labels.float()), "vectors": vectors}

    with tempfile.TemporaryDirectory() as work:
        arguments = transformers.TrainingArguments(
            output_dir=work,
            num_train_epochs=epochs,
            per_device_train_batch_size=batch_size,
            learning_rate=learning_rate,
            warmup_steps=math.ceil(0.1 * epochs * math.ceil(len(rows) / batch_size)),
            seed=seed,
            save_strategy="no",
            report_to=[],
            logging_steps=max(1, len(rows) // batch_size // 10),
            use_cpu=True,
            remove_unused_columns=False,
            disable_tqdm=not logger.isEnabledFor(logging.INFO),
        )
        trainer = transformers.Trainer(Student(), arguments, data_collator=collate, train_dataset=rows)
        trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses or [float("nan")]


def _read_texts(path: str | Path) -> list[str]:
    """Read the unlabelled texts a student learns from: one a line, or a table's text column as `embed` reads it."""
    from ..io.columns import choose_text_column
    from ..io.readers import read_texts
    from ..io.text_files import detect_format

    column, header = None, None
    if detect_format(Path(path), None) in ("tsv", "csv"):
        choice = choose_text_column(path)
        column, header = choice.column, choice.header
    texts = [text for text in read_texts(path, column, header=header)[0] if text.strip()]
    if not texts:
        raise InputError(f"{path}: no texts to distil on; give a file with a text a line.")
    return texts


def _teacher_files(teacher: Encoder) -> dict[str, Path]:
    """List the teacher folder's files the student keeps (`KEPT_FILES`); a hub model's from its local snapshot."""
    source = Path(teacher.source.path)
    if not source.is_dir():
        from huggingface_hub import snapshot_download

        source = Path(snapshot_download(teacher.source.path, allow_patterns=["*.json", "*.txt", "*.model", "*_*/*"]))
    return {item.name: item for item in source.iterdir() if KEPT_FILES.fullmatch(item.name)}


def check_layers(value: str) -> int | str:
    """Read `--layers` of `bertkit distill`: a number, or 'best'."""
    text = str(value).strip()
    if text == "best":
        return text
    if not text.isdigit():
        raise InputError(f"--layers {text}: give a number of layers to keep, or best (with --data and --dev).")
    return int(text)
