"""Feature-classifier runs saved by bertkit 0.1 (`classifier.safetensors`), rebuilt as today's scikit-learn head.

bertkit 0.1 stored a classifier's arrays by name: `logreg` (coef, intercept), `linear-svm` (the SVM's coef and
intercept, plus a logistic calibrator fitted on its decision values) and `mlp` (one coef and intercept per layer).
A calibrated linear SVM is a linear map followed by another, so it loads as one `LogisticRegression` with the
composed coefficients; an MLP loads as an `MLPClassifier` given its weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from ..errors import ModelLoadError

WEIGHTS_FILE = "classifier.safetensors"


def head_from_safetensors(directory: str | Path, record: dict) -> Pipeline:
    """Rebuild the scaler + classifier of a bertkit 0.1 run, predicting what it predicted then."""
    path = Path(directory) / WEIGHTS_FILE
    if not path.is_file():
        raise ModelLoadError(f"{directory}: {WEIGHTS_FILE} is missing; the run is incomplete, train it again.")
    arrays = load_file(str(path))
    classes = np.array(record["classes"])
    kind = record["params"].get("classifier", "logreg")
    if kind == "logreg":
        classifier = _logistic(arrays["coef"], arrays["intercept"], classes)
    elif kind == "linear-svm":
        classifier = _calibrated_svm(arrays, classes)
    elif kind == "mlp":
        classifier = _mlp(arrays, classes)
    else:
        raise ModelLoadError(f"{directory}: unknown classifier {kind!r} in a bertkit 0.1 run.")
    scaler: StandardScaler | str = "passthrough"
    if "scaler.mean" in arrays:
        scaler = StandardScaler()
        scaler.mean_, scaler.scale_ = arrays["scaler.mean"], arrays["scaler.scale"]
        scaler.var_ = scaler.scale_**2
        scaler.n_features_in_ = scaler.mean_.shape[0]
    return Pipeline([("scaler", scaler), ("classifier", classifier)])


def _logistic(coef: np.ndarray, intercept: np.ndarray, classes: np.ndarray) -> LogisticRegression:
    model = LogisticRegression()
    model.coef_, model.intercept_ = np.asarray(coef, dtype=np.float64), np.atleast_1d(intercept).astype(np.float64)
    model.classes_ = classes
    model.n_features_in_ = coef.shape[1]
    return model


def _calibrated_svm(arrays: dict[str, np.ndarray], classes: np.ndarray) -> LogisticRegression:
    """calibrator(svm(x)) = (x W^T + b) A^T + c = x (A W)^T + (A b + c): one logistic regression."""
    weights, bias = arrays["coef"].astype(np.float64), np.atleast_1d(arrays["intercept"]).astype(np.float64)
    calibrator_weights = arrays["calibrator.coef"].astype(np.float64)
    calibrator_bias = np.atleast_1d(arrays["calibrator.intercept"]).astype(np.float64)
    return _logistic(calibrator_weights @ weights, calibrator_weights @ bias + calibrator_bias, classes)


def _mlp(arrays: dict[str, np.ndarray], classes: np.ndarray) -> MLPClassifier:
    layers = len([k for k in arrays if k.startswith("mlp.coef.")])
    model = MLPClassifier(hidden_layer_sizes=tuple(arrays[f"mlp.coef.{i}"].shape[1] for i in range(layers - 1)))
    model.coefs_ = [arrays[f"mlp.coef.{i}"] for i in range(layers)]
    model.intercepts_ = [arrays[f"mlp.intercept.{i}"] for i in range(layers)]
    model.n_layers_, model.n_outputs_ = layers + 1, model.coefs_[-1].shape[1]
    model.out_activation_ = "logistic" if len(classes) == 2 else "softmax"
    model.classes_ = classes
    model.n_features_in_ = model.coefs_[0].shape[0]
    return model
