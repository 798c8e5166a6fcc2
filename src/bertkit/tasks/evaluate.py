"""Scoring a trained model on labelled data: one function behind `bertkit evaluate` and every run's `evaluate`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..io.text_files import file_sha256
from .labels import check_known_labels
from .report import EvaluationReport, classification_metrics, multi_label_metrics, regression_metrics

logger = logging.getLogger(__name__)


def warn_if_training_data(record: dict, path: str | Path) -> bool:
    """Warn when `path` is the file the run was trained on (the SHA-256 its record keeps); return whether it is."""
    data = record.get("data", {})
    trained_on = data.get("train_sha256") == file_sha256(path) if data.get("train_sha256") else False
    if trained_on:
        logger.warning(
            "%s is the file this run was trained on (the same SHA-256 as its record's): the score says how well the "
            "run fits what it learned, not how it does on new texts; score a held-out file (e.g. a dev set).",
            Path(path).name,
        )
    return trained_on


def evaluate(
    estimator: Any,  # a loaded run (`load_run`)
    inputs: Sequence,
    labels: Sequence,
    source: str = "the labels",
    model: str = "this model's training",
) -> EvaluationReport:
    """Score a fitted or loaded run on `inputs` against `labels` the way its problem is scored.

    Classifiers get accuracy, macro-F1, per-class scores, the confusion matrix and the majority baseline; regressors
    correlations and errors; multi-label models F1 at their threshold; taggers entity P/R/F1. `source` and `model`
    name the labels and the model in an error.
    """
    if hasattr(estimator, "predict_word_tags"):
        from .tagging import entity_scores

        return EvaluationReport(entity_scores(list(labels), estimator.predict_word_tags(list(inputs))), "entities")
    problem = getattr(estimator, "problem", "single_label_classification")
    if problem == "regression":
        return EvaluationReport(regression_metrics(labels, estimator.predict(inputs)), "regression")
    if problem == "multi_label_classification":
        check_known_labels(source, [name for row in labels for name in row], estimator.classes_, model)
        metrics = multi_label_metrics(labels, estimator.predict_proba(inputs), estimator.classes_, estimator.threshold)
        return EvaluationReport(metrics, "multi_label")
    check_known_labels(source, list(labels), estimator.classes_, model)
    majority = getattr(estimator, "majority_class_", None)
    metrics = classification_metrics(labels, estimator.predict(inputs), estimator.classes_, majority)
    return EvaluationReport(metrics, "classification")
