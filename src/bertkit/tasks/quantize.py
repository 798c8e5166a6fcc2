"""`bertkit quantize`: calibrate int8 on the user's own texts; write a copy of the model that carries the calibration.

The report compares the copy loaded at int8 with the original at fp32, on the same texts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..encoder.encode import Encoder
from ..encoder.int8 import CALIBRATION_FILE, calibrate, calibration_inputs
from ..errors import InputError
from ..io.writers import check_output
from ..records import record_kind
from .load import FINETUNED
from .runs import CONFIG_FILE, KIND_FEATURES, KIND_QA, KIND_TEXT, read_run_config, write_run
from .search import cosines

FIDELITY_TEXTS = 256  # texts the report compares fp32 and int8 on


@dataclass
class QuantizeReport:
    """Where the copy went, what it was calibrated on, and how close int8 stays to fp32 there."""

    output: Path
    kind: str
    texts: int
    smoothed: int  # groups of linears that read a LayerNorm output and were smoothed
    alpha: float  # the smoothing strength chosen on the texts
    fidelity: str


def quantize(model: str | None, output: str | Path, texts: Sequence[str], *, overwrite: bool = False) -> QuantizeReport:
    """Calibrate `model` (a model, or a `bertkit finetune` run directory) on `texts`; write the copy to `output`."""
    output = check_output(output, overwrite, [model])
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise InputError("no calibration texts: give a file with a few hundred sentences like the ones you will embed.")
    kind = record_kind(read_run_config(model)) if model is not None and (Path(model) / CONFIG_FILE).is_file() else None
    if kind == KIND_FEATURES:
        raise InputError(
            f"{model} is a feature-classifier run: it embeds with its encoder, so quantize that model "
            "(bertkit quantize MODEL --calibration FILE -o DIR) and use the run with --precision int8."
        )
    loader = FINETUNED.get(kind)  # a fine-tuned run's class; None: a model
    fp32 = loader.from_pretrained(model, precision="fp32") if loader else Encoder.from_pretrained(model)
    calibration = calibrate(fp32.model, calibration_inputs(fp32.model, fp32.tokenizer, texts, fp32.max_length))
    files: dict = {CALIBRATION_FILE: calibration.write}
    if loader or fp32.source.kind in ("local", "default"):
        files = {**_own_files(Path(model if loader else fp32.source.path)), **files}
        write_run(output, files, checked=True)
    else:
        write_run(output, files, weights=(fp32.model, fp32.tokenizer), checked=True)
    sample = texts[:FIDELITY_TEXTS]
    if loader:
        fidelity = _prediction_fidelity(fp32, loader.from_pretrained(output, precision="int8"), sample, kind)
    else:
        int8 = Encoder.from_pretrained(str(output), precision="int8")
        cosine = cosines(fp32.embed(sample, warn=False), int8.embed(sample, warn=False))
        fidelity = (
            f"cosine to fp32 (mean of the last layer, {len(sample)} of these texts): min {cosine.min():.5f}, "
            f"median {np.median(cosine):.5f}"
        )
        kind = "encoder"
    return QuantizeReport(output, kind, calibration.texts, len(calibration.absmax), calibration.alpha, fidelity)


def _own_files(source: Path) -> dict[str, Path]:
    """List the folder's own files to copy: weights, config, tokenizer, records, sentence-transformers modules.

    Not hidden files, checkpoints or a calibration.
    """
    skipped = (CALIBRATION_FILE, "checkpoint")
    return {item.name: item for item in source.iterdir() if not item.name.startswith(".") and item.name not in skipped}


QA_QUESTION = "What is it about?"  # a question each calibration text is asked, to compare int8's answers with fp32's


def _prediction_fidelity(fp32: Any, int8: Any, texts: list[str], kind: str) -> str:  # the run at fp32 and at int8
    if kind == KIND_QA:
        questions = [QA_QUESTION] * len(texts)
        a, b = (model.answer(questions, texts, handle_impossible_answer=False) for model in (fp32, int8))
        agree = sum((x["start"], x["end"]) == (y["start"], y["end"]) for x, y in zip(a, b)) / max(len(texts), 1)
        return f"same answer span as fp32 on {agree:.1%} of {len(texts)} of these texts (each asked {QA_QUESTION!r})"
    if kind == KIND_TEXT:
        p, q = fp32.predict_proba(texts), int8.predict_proba(texts)
        agree = float(np.mean(p.argmax(1) == q.argmax(1)))
        return (
            f"same label as fp32 on {agree:.1%} of {len(texts)} of these texts; largest probability change "
            f"{np.abs(p - q).max():.4f}"
        )
    words = [text.split() for text in texts]
    a, b = fp32.predict_word_tags(words), int8.predict_word_tags(words)
    pairs = [(x, y) for sa, sb in zip(a, b) for x, y in zip(sa, sb)]
    agree = sum(x == y for x, y in pairs) / max(len(pairs), 1)
    return f"same tag as fp32 on {agree:.1%} of {len(pairs)} words of these texts"
