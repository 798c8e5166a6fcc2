"""The scikit-learn heads that learn from sentence vectors: logistic regression over a C grid, a linear SVM, an MLP."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from ..errors import InputError
from .labels import check_class_counts, check_labels

C_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 1.0)


def default_classifier(n_folds: int = 5, random_state: int | None = 0) -> LogisticRegressionCV:
    """Return an unfitted logistic regression choosing C by `n_folds`-fold stratified CV over `C_GRID` (accuracy)."""
    folds = StratifiedKFold(n_folds, shuffle=True, random_state=random_state)
    model = LogisticRegressionCV(
        Cs=list(C_GRID), cv=folds, scoring="accuracy", max_iter=3000, random_state=random_state
    )
    if "use_legacy_attributes" in model.get_params():  # scikit-learn 1.8 to 1.11: the simpler fitted attributes
        model.set_params(use_legacy_attributes=False, l1_ratios=(0.0,))
    return model


CLASSIFIER_NAMES = ("logreg", "linear-svm", "mlp")


def named_classifier(
    name: str, C: float | None = None, *, cv: int = 5, n_samples: int = 0, random_state: int | None = 0
) -> Any:
    """Make the command line's `--classifier NAME [--C C]` a scikit-learn classifier (None: `default_classifier`).

    'logreg' and 'linear-svm' choose C by `cv`-fold cross-validation unless it is given; 'mlp' has one hidden layer
    of 256, L2 penalty 0.01 / C, and early stopping from 1,000 examples (`n_samples`).
    """
    if name not in CLASSIFIER_NAMES:
        raise InputError(f"classifier {name!r}: valid values are {', '.join(CLASSIFIER_NAMES)}.")
    folds = StratifiedKFold(cv, shuffle=True, random_state=random_state)
    if name == "logreg":
        return None if C is None else LogisticRegression(C=C, max_iter=3000, random_state=random_state)
    if name == "linear-svm":
        svm = LinearSVC(C=C or 1.0, max_iter=5000, random_state=random_state)
        return svm if C is not None else GridSearchCV(svm, {"C": list(C_GRID)}, cv=folds, scoring="accuracy")
    return MLPClassifier(
        hidden_layer_sizes=(256,),
        alpha=1e-2 / (C or 1.0),
        early_stopping=n_samples >= 1000,
        random_state=random_state,
        max_iter=200,
    )


def feature_head(
    classifier: Any = None, *, scale: bool = True, n_folds: int = 5, random_state: int | None = 0
) -> Pipeline:
    """Build what follows the vectorizer: an unfitted Pipeline of `scaler` (or passthrough) and `classifier`.

    The classifier is cloned (None: `default_classifier`); one without `predict_proba` is calibrated by
    `CalibratedClassifierCV` so that it gives probabilities.
    """
    estimator = default_classifier(n_folds, random_state) if classifier is None else clone(classifier)
    if not hasattr(estimator, "predict_proba"):
        folds = StratifiedKFold(min(n_folds, 3), shuffle=True, random_state=random_state)
        estimator = CalibratedClassifierCV(estimator, cv=folds, ensemble=False)
    return Pipeline([("scaler", StandardScaler() if scale else "passthrough"), ("classifier", estimator)])


def chosen_C(head: Pipeline) -> tuple[float | None, dict[float, float], int]:
    """(C, {C: mean cross-validated accuracy}, folds) of a fitted `feature_head`; (None, {}, 0) if C was given."""
    estimator = head.named_steps["classifier"]
    if isinstance(estimator, CalibratedClassifierCV):
        estimator = estimator.calibrated_classifiers_[0].estimator
    if isinstance(estimator, LogisticRegressionCV):
        scores = estimator.scores_  # (folds, l1 ratios, Cs); a dict of (folds, Cs) per class in older scikit-learn
        scores = next(iter(scores.values()))[:, None, :] if isinstance(scores, dict) else scores
        means = scores[:, 0, :].mean(axis=0)
        C = float(np.ravel(estimator.C_)[0])
        return C, {float(c): float(s) for c, s in zip(estimator.Cs_, means)}, int(scores.shape[0])
    if isinstance(estimator, GridSearchCV) and "C" in estimator.best_params_:
        grid = [p["C"] for p in estimator.cv_results_["params"]]
        scores = estimator.cv_results_["mean_test_score"]
        return float(estimator.best_params_["C"]), dict(zip(map(float, grid), map(float, scores))), estimator.n_splits_
    return None, {}, 0


def check_training_labels(y: Sequence, classifier: Any = None, cv: int = 5) -> np.ndarray:
    """Return the labels as an array; refuse missing labels, a single class, or classes too rare for cross-validation.

    `classifier` as given to `TextClassifier`: None, a search over C and a classifier to calibrate need `cv` folds.
    """
    labels = np.asarray(check_labels(y), dtype=object)
    classes, codes = np.unique(labels, return_inverse=True)
    folds = classifier is None or hasattr(classifier, "cv") or not hasattr(classifier, "predict_proba")
    check_class_counts(classes, codes, cv if folds else 0)
    return np.array(labels.tolist())
