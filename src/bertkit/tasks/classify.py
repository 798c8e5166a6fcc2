"""Feature-based text classification: frozen-encoder vectors → scaler → linear or small head, saved without pickle."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
from safetensors.numpy import load_file
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_predict
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import LabelBinarizer, StandardScaler
from sklearn.svm import LinearSVC
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from ..errors import InputError, ModelLoadError
from .labels import check_class_counts, check_labels
from .runs import (
    CONFIG_FILE,
    KIND_FEATURES,
    WEIGHTS_FILE,
    package_version,
    read_run_config,
    to_json_value,
    write_run_directory,
)
from .vectorizer import BertVectorizer

CLASSIFIERS = ("logreg", "linear-svm", "mlp")
SAVED_VECTORIZER_PARAMS = ("layers", "pooling", "max_length", "long_text", "batch_size")
C_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 1.0)


class TextClassifier(ClassifierMixin, BaseEstimator):
    """The visual guide's pipeline as one estimator: BERT sentence vectors → (scaled) → a classifier.

    vectorizer: the `BertVectorizer` that makes the features (model, layers, pooling, precision, cache, ...);
    None means `BertVectorizer()` (its default features: every layer's mean, concatenated). It is cloned in `fit` (`vectorizer_`), so
    grid searches reach its options as `vectorizer__layers`, `vectorizer__pooling`, ...

    C=None picks the regularisation by stratified cross-validation on the training set (`C_`, `cv_scores_`).
    The defaults (mean of every layer, concatenated, standardised, logistic regression) reach 84.4% on SST-2 dev
    with the packaged model (benchmarks/sst2_features.py).
    """

    def __init__(
        self,
        vectorizer: BertVectorizer | None = None,
        classifier: str = "logreg",
        C: float | None = None,
        cv: int = 5,
        scale: bool = True,
        seed: int = 0,
    ):
        self.vectorizer = vectorizer
        self.classifier = classifier
        self.C = C
        self.cv = cv
        self.scale = scale
        self.seed = seed

    # ---- fitting ------------------------------------------------------------------------------------------------
    def fit(self, X: Sequence[str], y: Sequence) -> "TextClassifier":
        """Embed X with a clone of `vectorizer`, then fit the scaler and the head (C by cross-validation unless given)."""
        if isinstance(X, str):
            raise InputError("fit takes a list of texts and a list of labels, not one string.")
        if len(y) != len(X):
            raise InputError(f"{len(X)} texts but {len(y)} labels.")
        self.classes_, codes = self.check_training_labels(y)
        self.vectorizer_ = self._vectorizer().fit(X)
        started = time.perf_counter()
        features = self.vectorizer_.transform(X)
        self.embed_seconds_ = time.perf_counter() - started
        self._fit_head_on(features, codes)
        return self

    def fit_features(self, features: np.ndarray, y: Sequence) -> "TextClassifier":
        """Fit scaler + head on precomputed sentence vectors (benchmarks, probes); no encoder involved."""
        self.classes_, codes = self.check_training_labels(y)
        self._fit_head_on(np.asarray(features, dtype=np.float32), codes)
        return self

    def _fit_head_on(self, features: np.ndarray, codes: np.ndarray) -> None:
        started = time.perf_counter()
        with threadpool_limits(1):
            self.scaler_ = StandardScaler().fit(features) if self.scale else None
            scaled = self._scaled(features)
            self.C_, self.cv_scores_ = self._choose_C(scaled, codes)
            self.head_ = self._fit_head(scaled, codes, self.C_)
        self.fit_seconds_ = time.perf_counter() - started
        self.majority_class_ = self.classes_[np.bincount(codes).argmax()]

    def check_training_labels(self, y: Sequence) -> tuple[np.ndarray, np.ndarray]:
        """Classes and integer codes of `y`, refusing missing labels, a single class, or classes too rare for CV."""
        if self.classifier not in CLASSIFIERS:
            raise InputError(f"classifier={self.classifier!r}: valid values are {', '.join(CLASSIFIERS)}.")
        labels = check_labels(y)
        classes, codes = np.unique(np.asarray(labels, dtype=object), return_inverse=True)
        classes = np.array(classes.tolist())
        check_class_counts(classes, codes, self.cv if self.C is None and self.classifier != "mlp" else 0)
        return classes, codes

    def _vectorizer(self) -> BertVectorizer:
        return clone(self.vectorizer) if self.vectorizer is not None else BertVectorizer()

    def _scaled(self, features: np.ndarray) -> np.ndarray:
        return self.scaler_.transform(features).astype(np.float32) if self.scaler_ is not None else features

    def _choose_C(self, features: np.ndarray, codes: np.ndarray) -> tuple[float, dict]:
        self.cv_folds_ = 0
        if self.C is not None:
            return float(self.C), {}
        if self.classifier == "mlp":
            return 1.0, {}
        self.cv_folds_ = folds = min(self.cv, int(np.bincount(codes).min()))
        search = GridSearchCV(
            _new_head(self.classifier, 1.0, self.seed),
            {"C": list(C_GRID)},
            cv=StratifiedKFold(folds, shuffle=True, random_state=self.seed),
            scoring="accuracy",
        )
        search.fit(features, codes)
        scores = {float(c): float(s) for c, s in zip(C_GRID, search.cv_results_["mean_test_score"])}
        return float(search.best_params_["C"]), scores

    def _fit_head(self, features: np.ndarray, codes: np.ndarray, C: float):
        head = _new_head(self.classifier, C, self.seed, len(codes)).fit(features, codes)
        if self.classifier == "linear-svm":  # Platt scaling on out-of-fold decision values gives probabilities
            folds = max(2, min(3, int(np.bincount(codes).min())))
            decisions = cross_val_predict(
                _new_head("linear-svm", C, self.seed), features, codes,
                cv=StratifiedKFold(folds, shuffle=True, random_state=self.seed), method="decision_function",
            )
            head.calibrator_ = LogisticRegression(max_iter=1000).fit(_as_2d(decisions), codes)
        return head

    # ---- prediction ---------------------------------------------------------------------------------------------
    def features(self, X: Sequence[str]) -> np.ndarray:
        """The sentence vectors of X (before scaling): for plots and probes."""
        check_is_fitted(self, "head_")
        return self.vectorizer_.transform(X)

    def predict_proba(self, X: str | Sequence[str]) -> np.ndarray:
        """(n_texts, n_classes) probabilities in `classes_` order; a single string is one text (one row)."""
        return self.predict_proba_features(self.features(X))

    def predict_proba_features(self, features: np.ndarray) -> np.ndarray:
        """Class probabilities for sentence vectors as `features` returns them (scaling happens here)."""
        check_is_fitted(self, "head_")
        features = self._scaled(np.asarray(features, dtype=np.float32))
        with threadpool_limits(1):
            if self.classifier == "linear-svm":
                return self.head_.calibrator_.predict_proba(_as_2d(self.head_.decision_function(features)))
            return self.head_.predict_proba(features)

    def predict(self, X: str | Sequence[str]) -> np.ndarray:
        """The most probable class of each text; a single string is one text (an array of one label)."""
        return self.classes_[self.predict_proba(X).argmax(axis=1)]

    # ---- persistence ---------------------------------------------------------------------------------------------
    def save(self, directory: str | Path, *, metrics: dict | None = None, extra: dict | None = None, overwrite: bool = False) -> Path:
        """Write `bertkit.json` + `classifier.safetensors` into `directory`, all at once (never half-written)."""
        check_is_fitted(self, "head_")
        arrays = _head_arrays(self.classifier, self.head_)
        if self.scaler_ is not None:
            arrays["scaler.mean"] = self.scaler_.mean_
            arrays["scaler.scale"] = self.scaler_.scale_
        record = {
            "kind": KIND_FEATURES,
            "bertkit_version": package_version("bertkit"),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "encoder": {
                "model": self.vectorizer_.encoder_.loaded.source.path
                if self.vectorizer_.encoder_.loaded.source.kind == "local" else self.vectorizer_.encoder_.name,
                "fingerprint": self.vectorizer_.encoder_.fingerprint,
                "architecture": type(self.vectorizer_.encoder_.model).__name__,
            },
            "features": self.vectorizer_.feature_options(),
            "vectorizer": {k: self.vectorizer_.get_params()[k] for k in SAVED_VECTORIZER_PARAMS},
            "params": self.get_params(deep=False) | {"vectorizer": None},
            "classes": self.classes_.tolist(),
            "majority_class": to_json_value(self.majority_class_) if isinstance(self.majority_class_, np.generic) else self.majority_class_,
            "C": self.C_,
            "cv_scores": self.cv_scores_,
            "n_features": int(self.vectorizer_.n_features_out_),
            "metrics": metrics or {},
            "versions": {name: package_version(name) for name in ("torch", "transformers", "scikit-learn", "numpy")},
            **(extra or {}),
        }
        return write_run_directory(directory, {CONFIG_FILE: json.dumps(record, indent=2, default=to_json_value)}, arrays, overwrite)

    @classmethod
    def load(cls, directory: str | Path, *, cache: str | Path | None = "memory", threads: int | None = None,
             precision: str | None = None) -> "TextClassifier":
        """Rebuild a saved classifier; refuses when the encoder no longer has the fingerprint it was trained with.

        precision=None uses the precision the run was trained with; another one works but warns, since its vectors
        differ slightly from those the classifier learned on.
        """
        record = read_run_config(directory, expected_kind=KIND_FEATURES)
        params = dict(record["params"])
        # runs saved before bertkit 0.2 kept the vectorizer's options among the classifier's own parameters
        saved_vectorizer = record.get("vectorizer") or {k: params[k] for k in SAVED_VECTORIZER_PARAMS if k in params}
        params = {k: v for k, v in params.items() if k in ("classifier", "C", "cv", "scale", "seed")}
        trained_precision = record.get("features", {}).get("precision", "fp32")
        precision = precision or trained_precision
        if precision != trained_precision:
            warnings.warn(
                f"{directory} was trained on {trained_precision} vectors and is now used at {precision}: its "
                "predictions may differ slightly from the evaluated ones.", stacklevel=2)
        model = record["encoder"]["model"]
        vectorizer = BertVectorizer(**{**saved_vectorizer, "model": None if model == "default" else model},
                                    cache=cache, threads=threads, precision=precision)
        estimator = cls(vectorizer, **params)
        estimator.vectorizer_ = estimator._vectorizer().fit([])
        found = estimator.vectorizer_.encoder_.fingerprint
        if found != record["encoder"]["fingerprint"]:
            raise ModelLoadError(
                f"{directory} was trained on encoder {model!r} with fingerprint {record['encoder']['fingerprint']}, "
                f"but that model now has fingerprint {found}: the weights or tokenizer changed, so its vectors would "
                "not match the classifier. Retrain with `bertkit train`, or restore the original model directory."
            )
        trained_calibration = record.get("features", {}).get("int8_calibration")
        calibration = estimator.vectorizer_.encoder_.int8_calibration
        if precision == trained_precision == "int8" and trained_calibration not in (None, calibration):
            warnings.warn(
                f"{directory} was trained on int8 vectors of calibration {trained_calibration} and now runs with "
                f"calibration {calibration}: its predictions may differ slightly; use the model directory it was "
                "trained with (`bertkit quantize` writes the calibration into it).", stacklevel=2)
        arrays = load_file(str(Path(directory) / WEIGHTS_FILE))
        estimator.classes_ = np.array(record["classes"])
        estimator.C_, estimator.cv_scores_ = record["C"], record.get("cv_scores", {})
        estimator.majority_class_ = record.get("majority_class")
        estimator.scaler_ = None
        if "scaler.mean" in arrays:
            scaler = StandardScaler()
            scaler.mean_, scaler.scale_ = arrays["scaler.mean"], arrays["scaler.scale"]
            scaler.var_ = scaler.scale_ ** 2
            scaler.n_features_in_ = scaler.mean_.shape[0]
            estimator.scaler_ = scaler
        estimator.head_ = _head_from_arrays(params["classifier"], arrays, len(estimator.classes_))
        estimator.record_ = record
        return estimator


# ---- heads ----------------------------------------------------------------------------------------------------------
def _new_head(kind: str, C: float, seed: int, n_samples: int = 0):
    if kind == "logreg":
        return LogisticRegression(C=C, max_iter=3000)
    if kind == "linear-svm":
        return LinearSVC(C=C, max_iter=5000, random_state=seed)
    # Early stopping holds out 10%: worth it on real data sets, too noisy on a few dozen examples.
    return MLPClassifier(
        hidden_layer_sizes=(256,), alpha=1e-2 / C, early_stopping=n_samples >= 1000, random_state=seed, max_iter=200
    )


def _as_2d(decisions: np.ndarray) -> np.ndarray:
    return decisions.reshape(len(decisions), -1)


def _head_arrays(kind: str, head) -> dict[str, np.ndarray]:
    if kind == "mlp":
        arrays = {f"mlp.coef.{i}": c for i, c in enumerate(head.coefs_)}
        arrays.update({f"mlp.intercept.{i}": b for i, b in enumerate(head.intercepts_)})
        return {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    arrays = {"coef": head.coef_, "intercept": np.atleast_1d(head.intercept_)}
    if kind == "linear-svm":
        arrays["calibrator.coef"] = head.calibrator_.coef_
        arrays["calibrator.intercept"] = head.calibrator_.intercept_
    return {k: np.ascontiguousarray(v) for k, v in arrays.items()}


def _linear(cls, coef: np.ndarray, intercept: np.ndarray, n_classes: int):
    head = cls()
    head.coef_, head.intercept_ = coef, intercept
    head.classes_ = np.arange(n_classes)
    head.n_features_in_ = coef.shape[1]
    return head


def _head_from_arrays(kind: str, arrays: dict[str, np.ndarray], n_classes: int):
    if kind == "logreg":
        return _linear(LogisticRegression, arrays["coef"], arrays["intercept"], n_classes)
    if kind == "linear-svm":
        head = _linear(LinearSVC, arrays["coef"], arrays["intercept"], n_classes)
        head.calibrator_ = _linear(LogisticRegression, arrays["calibrator.coef"], arrays["calibrator.intercept"], n_classes)
        return head
    head = MLPClassifier(hidden_layer_sizes=(256,))
    layers = len([k for k in arrays if k.startswith("mlp.coef.")])
    head.coefs_ = [arrays[f"mlp.coef.{i}"] for i in range(layers)]
    head.intercepts_ = [arrays[f"mlp.intercept.{i}"] for i in range(layers)]
    head.n_layers_, head.n_outputs_ = layers + 1, head.coefs_[-1].shape[1]
    head.out_activation_ = "logistic" if n_classes == 2 else "softmax"
    head.classes_ = np.arange(n_classes)
    head._label_binarizer = LabelBinarizer().fit(head.classes_)
    head.n_features_in_ = head.coefs_[0].shape[0]
    return head
