"""Feature-based text classification: BertVectorizer → StandardScaler → any classifier, saved by skops (no pickle)."""

from __future__ import annotations

import io
import json
import logging
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import skops.io as skops
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.linear_model import LogisticRegressionCV
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from ..encoder.devices import describe
from ..encoder.options import EmbedOptions
from ..encoder.threads import set_threads
from ..errors import InputError, ModelLoadError

if TYPE_CHECKING:
    from sklearn.utils import Tags

    from .report import EvaluationReport
from ..io.writers import package_version
from .labels import check_class_counts, check_labels
from .runs import CONFIG_FILE, KIND_FEATURES, read_run_config, to_json_value, write_run_directory
from .vectorizer import BertVectorizer

logger = logging.getLogger(__name__)

C_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 1.0)
RUN_FORMAT = 2  # 1: bertkit 0.1 (classifier.safetensors, read by tasks/legacy_runs.py); 2: head.skops
HEAD_FILE = "head.skops"
SAVED_VECTORIZER_PARAMS = ("layers", "pooling", "max_length", "long_text", "batch_size")  # what bertkit 0.1-0.2 kept
# scikit-learn's own helpers inside fitted estimators, which skops does not trust by itself. Anything else in a
# saved head is refused unless the caller names it (`TextClassifier.load(dir, trusted=[...])`).
TRUSTED_TYPES = (
    "sklearn.calibration._CalibratedClassifier",
    "sklearn.calibration._SigmoidCalibration",
    "sklearn.metrics._classification.accuracy_score",
    "sklearn.metrics._scorer._PassthroughScorer",
    "sklearn.metrics._scorer._Scorer",
    "sklearn.model_selection._split.StratifiedKFold",
    "sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
    "sklearn.neural_network._stochastic_optimizers.SGDOptimizer",
)


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
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.svm import LinearSVC

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


class TextClassifier(ClassifierMixin, MetaEstimatorMixin, BaseEstimator):
    """The visual guide's pipeline as one estimator: BERT sentence vectors → standardised → any classifier.

    `fit` builds and fits a scikit-learn `Pipeline` (`pipeline_`): a clone of `vectorizer`, a `StandardScaler`
    and a clone of `classifier`. Parameters reach its parts as usual: `vectorizer__layers`, `classifier__C`.

    Parameters
    ----------
    vectorizer : BertVectorizer, optional
        Makes the features (model, layers, pooling, precision, cache, ...). None is `BertVectorizer()`: the
        mean over tokens of every layer, concatenated.
    classifier : scikit-learn classifier, optional
        None is `LogisticRegressionCV` choosing C by `cv`-fold stratified cross-validation (`C_`, `cv_scores_`).
        A classifier without `predict_proba` is calibrated with `CalibratedClassifierCV`.
    scale : bool
        Standardise the features before the classifier.
    cv : int
        Folds for choosing C and for calibration (fewer when a class has fewer examples).
    random_state : int or None
        Seeds the folds (and the classifier, when it takes one).

    Examples
    --------
    >>> from bertkit import TextClassifier
    >>> from bertkit.io.readers import read_labelled, sample_path
    >>> reviews = read_labelled(sample_path("reviews.tsv"), "text", "label")  # 80 labelled film reviews
    >>> clf = TextClassifier().fit(reviews.texts[:60], reviews.labels[:60])
    >>> clf.predict(["a visually stunning rumination on love", "a dull, lifeless mess"]).tolist()
    ['positive', 'negative']
    >>> report = clf.evaluate(reviews.texts[60:], reviews.labels[60:])  # the other 20: accuracy, F1, confusion
    >>> report["n"], report["accuracy"] > report["majority_baseline_accuracy"]
    (20, True)
    """

    def __init__(
        self,
        vectorizer: BertVectorizer | None = None,
        classifier: Any = None,
        *,
        scale: bool = True,
        cv: int = 5,
        random_state: int | None = 0,
    ) -> None:
        self.vectorizer = vectorizer
        self.classifier = classifier
        self.scale = scale
        self.cv = cv
        self.random_state = random_state

    def fit(self, X: Sequence[str], y: Sequence) -> TextClassifier:
        """Embed `X` with a clone of `vectorizer`, then fit the scaler and the classifier on the vectors.

        Parameters
        ----------
        X : list of str
            Training texts.
        y : list
            One label per text.

        Returns
        -------
        TextClassifier
            self, fitted.
        """
        if isinstance(X, str):
            raise InputError("fit takes a list of texts and a list of labels, not one string.")
        labels = check_training_labels(y, self.classifier, self.cv)
        if len(labels) != len(X):
            raise InputError(f"{len(X)} texts but {len(labels)} labels.")
        vectorizer = clone(self.vectorizer) if self.vectorizer is not None else BertVectorizer()
        started = time.perf_counter()
        features = vectorizer.fit(X).transform(X)
        self.embed_seconds_ = time.perf_counter() - started
        started = time.perf_counter()
        values, counts = np.unique(labels, return_counts=True)
        folds = max(2, min(self.cv, int(counts.min())))
        head = feature_head(self.classifier, scale=self.scale, n_folds=folds, random_state=self.random_state)
        with threadpool_limits(1):  # one BLAS thread: faster on these small problems (README, performance)
            head.fit(features, labels)
        self.fit_seconds_ = time.perf_counter() - started
        self.majority_class_ = values[counts.argmax()]
        self.C_, self.cv_scores_, self.cv_folds_ = chosen_C(head)
        self.classes_ = head.classes_
        self.pipeline_ = Pipeline([("vectorizer", vectorizer), *head.steps])
        return self

    @property
    def vectorizer_(self) -> BertVectorizer:
        """The fitted `BertVectorizer` (the pipeline's first step)."""
        check_is_fitted(self, "pipeline_")
        return self.pipeline_.named_steps["vectorizer"]

    @property
    def head_(self) -> Pipeline:
        """The fitted scaler and classifier: what turns sentence vectors into probabilities."""
        check_is_fitted(self, "pipeline_")
        return self.pipeline_[1:]

    def predict_proba(self, X: str | Sequence[str]) -> np.ndarray:
        """Class probabilities in `classes_` order.

        Parameters
        ----------
        X : str or list of str
            One string is one text.

        Returns
        -------
        numpy.ndarray
            (n_texts, n_classes).
        """
        check_is_fitted(self, "pipeline_")
        features = self.vectorizer_.transform(X)  # torch's threads; then one BLAS thread for the small head
        with threadpool_limits(1):
            return self.head_.predict_proba(features)

    def predict(self, X: str | Sequence[str]) -> np.ndarray:
        """Predict the most probable class of each text; one string is one text (an array of one label).

        Parameters
        ----------
        X : str or list of str
            The texts.

        Returns
        -------
        numpy.ndarray
            One label per text.
        """
        return self.classes_[self.predict_proba(X).argmax(axis=1)]

    def evaluate(self, X: Sequence[str], y: Sequence) -> EvaluationReport:
        """Score on (X, y): accuracy, macro-F1, per-class scores, the confusion matrix and the majority-class baseline.

        What `bertkit evaluate` prints, drawn as a table and a picture in Jupyter.

        Parameters
        ----------
        X : list of str
            Texts.
        y : list
            Their true labels (each one a class seen in training).

        Returns
        -------
        EvaluationReport
            A dict of the metrics.
        """
        from .evaluate import evaluate

        check_is_fitted(self, "pipeline_")
        return evaluate(self, X, y)

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        return tags

    def save_pretrained(
        self, directory: str | Path, *, metrics: dict | None = None, extra: dict | None = None, overwrite: bool = False
    ) -> Path:
        """Write `bertkit.json` and `head.skops` into a new `directory`, all at once (never half-written).

        Parameters
        ----------
        directory : str or Path
            The run directory to create.
        metrics : dict, optional
            Evaluation results to record.
        extra : dict, optional
            More fields for the record (the CLI adds where the data came from).
        overwrite : bool
            Replace an existing bertkit run (never a folder bertkit did not write).

        Returns
        -------
        Path
            The run directory.
        """
        check_is_fitted(self, "pipeline_")
        buffer = io.BytesIO()
        skops.dump(self.head_, buffer)
        encoder = self.vectorizer_.encoder_
        record = {
            "kind": KIND_FEATURES,
            "format": RUN_FORMAT,
            "bertkit_version": package_version("bertkit"),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "encoder": {
                "model": encoder.source.path if encoder.source.kind == "local" else encoder.name,
                "fingerprint": encoder.fingerprint,
                "architecture": type(encoder.model).__name__,
            },
            "features": self.vectorizer_.feature_options(),
            "device": describe(encoder.device),
            "vectorizer": {"batch_size": self.vectorizer_.batch_size},
            "params": {
                "scale": self.scale,
                "cv": self.cv,
                "random_state": self.random_state,
                "classifier": None if self.classifier is None else repr(self.classifier),
            },
            "classes": self.classes_.tolist(),
            "majority_class": getattr(self.majority_class_, "item", lambda: self.majority_class_)(),
            "C": self.C_,
            "cv_scores": self.cv_scores_,
            "n_features": int(self.vectorizer_.n_features_out_),
            "metrics": metrics or {},
            "versions": {name: package_version(name) for name in ("torch", "transformers", "scikit-learn", "skops")},
            **(extra or {}),
        }
        files: dict[str, str | bytes] = {
            CONFIG_FILE: json.dumps(record, indent=2, default=to_json_value),
            HEAD_FILE: buffer.getvalue(),
        }
        return write_run_directory(directory, files, overwrite)

    def save(self, directory: str | Path, **kwargs: Any) -> Path:
        """Save the classifier: the deprecated name of `save_pretrained`."""
        warnings.warn("TextClassifier.save is now save_pretrained.", DeprecationWarning, stacklevel=2)
        return self.save_pretrained(directory, **kwargs)

    @classmethod
    def load(cls, directory: str | Path, **kwargs: Any) -> TextClassifier:
        """Load a saved classifier: the deprecated name of `from_pretrained`."""
        warnings.warn("TextClassifier.load is now from_pretrained.", DeprecationWarning, stacklevel=2)
        return cls.from_pretrained(directory, **kwargs)

    @classmethod
    def from_pretrained(
        cls,
        directory: str | Path,
        *,
        cache: str | Path | None = "memory",
        threads: int | None = None,
        precision: str | None = None,
        trusted: Sequence[str] = (),
        device: str | None = "auto",
    ) -> TextClassifier:
        """Rebuild a saved classifier; refuses when the encoder's weights changed since it was trained.

        Parameters
        ----------
        directory : str or Path
            A run saved by `save_pretrained` or `bertkit train` (bertkit 0.1's format too).
        cache : str, Path or None
            The vectorizer's embedding cache ("memory", a directory, or None).
        threads : int, optional
            Deprecated: `bertkit.set_threads`.
        precision : str, optional
            None uses the precision the run was trained with; another one works and warns, since its vectors
            differ slightly from those the classifier learned on.
        trusted : list of str
            Types in `head.skops` to load beyond scikit-learn's own (skops' fully qualified names).
        device : str
            Where the encoder runs: 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'.

        Returns
        -------
        TextClassifier
            Fitted, ready to predict.
        """
        from .legacy_runs import head_from_safetensors

        record = read_run_config(directory, expected_kind=KIND_FEATURES)
        if threads is not None:
            warnings.warn("threads= is deprecated: call bertkit.set_threads(n).", DeprecationWarning, stacklevel=2)
            set_threads(threads)
        vectorizer = _saved_vectorizer(directory, record, cache, precision, device)
        legacy = record.get("format", 1) < 2
        head = head_from_safetensors(directory, record) if legacy else _load_head(Path(directory) / HEAD_FILE, trusted)
        params = record["params"]
        estimator = cls(
            vectorizer,
            None if params.get("classifier") is None else clone(head[-1]),
            scale=params.get("scale", True),
            cv=params.get("cv", 5),
            random_state=params.get("random_state", params.get("seed", 0)),
        )
        estimator.pipeline_ = Pipeline([("vectorizer", vectorizer), *head.steps])
        estimator.classes_ = np.array(record["classes"])
        estimator.C_, estimator.cv_scores_ = record.get("C"), record.get("cv_scores", {})
        estimator.majority_class_ = record.get("majority_class")
        estimator.record_ = record
        return estimator


def _saved_vectorizer(
    directory: str | Path, record: dict, cache: str | Path | None, precision: str | None, device: str | None
) -> BertVectorizer:
    """Rebuild the run's vectorizer, fitted, after checking that the encoder still has the weights it was trained on."""
    params = dict(record["params"])
    # runs saved before bertkit 0.2 kept the vectorizer's options among the classifier's own parameters
    saved = record.get("vectorizer") or {k: params[k] for k in SAVED_VECTORIZER_PARAMS if k in params}
    recorded = {**saved, **record.get("features", {})}
    options = {**EmbedOptions.from_record(recorded).record(), "batch_size": saved.get("batch_size")}
    trained_precision = record.get("features", {}).get("precision", "fp32")
    precision = precision or trained_precision
    if precision != trained_precision:
        logger.warning(
            "%s was trained on %s vectors and is now used at %s: its predictions may differ slightly "
            "from the evaluated ones.",
            directory,
            trained_precision,
            precision,
        )
    model = record["encoder"]["model"]
    vectorizer = BertVectorizer(
        **{**options, "model": None if model == "default" else model},
        cache=cache,
        precision=precision,
        device=device,
    ).fit([])
    found = vectorizer.encoder_.fingerprint
    if found != record["encoder"]["fingerprint"]:
        raise ModelLoadError(
            f"{directory} was trained on encoder {model!r} with fingerprint {record['encoder']['fingerprint']}, "
            f"but that model now has fingerprint {found}: the weights or tokenizer changed, so its vectors would "
            "not match the classifier. Retrain with `bertkit train`, or restore the original model directory."
        )
    trained_calibration = record.get("features", {}).get("int8_calibration")
    calibration = vectorizer.encoder_.int8_calibration
    if precision == trained_precision == "int8" and trained_calibration not in (None, calibration):
        logger.warning(
            "%s was trained on int8 vectors of calibration %s and now runs with calibration %s: its "
            "predictions may differ slightly; use the model directory it was trained with (`bertkit "
            "quantize` writes the calibration into it).",
            directory,
            trained_calibration,
            calibration,
        )
    return vectorizer


def _load_head(path: Path, trusted: Sequence[str]) -> Pipeline:
    """Load the saved scaler + classifier by skops; types outside scikit-learn and `TRUSTED_TYPES` are refused."""
    if not path.is_file():
        raise ModelLoadError(f"{path.parent}: {path.name} is missing; the run is incomplete, train it again.")
    try:
        found = skops.get_untrusted_types(file=path)
    except Exception as exc:  # skops raises zipfile/JSON errors of its own for a damaged file
        raise ModelLoadError(
            f"{path}: not a readable skops file ({exc}); the run is damaged, train it again."
        ) from None
    unknown = sorted(set(found) - set(TRUSTED_TYPES) - set(trusted))
    if unknown:
        raise ModelLoadError(
            f"{path} holds types bertkit does not load unless you trust them: {', '.join(unknown)}. If you made this "
            "file, pass trusted=[...] with those names to TextClassifier.load."
        )
    return skops.load(path, trusted=found)
