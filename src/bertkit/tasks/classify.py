"""Feature-based text classification: BertVectorizer → StandardScaler → any classifier, saved by skops (no pickle)."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import skops.io as skops
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from ..encoder.devices import describe
from ..encoder.options import EmbedOptions
from ..errors import InputError, ModelLoadError

if TYPE_CHECKING:
    from sklearn.utils import Tags

    from .report import EvaluationReport
from ..records import new_record, package_version
from .attributions import ExplainsPredictions
from .heads import check_training_labels, chosen_C, feature_head
from .runs import CONFIG_FILE, KIND_FEATURES, read_run_config, write_run
from .vectorizer import BertVectorizer

logger = logging.getLogger(__name__)

HEAD_FILE = "head.skops"
# scikit-learn's own helpers inside fitted estimators, which skops does not trust by itself. Anything else in a
# saved head is refused unless the caller names it (`TextClassifier.from_pretrained(dir, trusted=[...])`).
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


class TextClassifier(ExplainsPredictions, ClassifierMixin, MetaEstimatorMixin, BaseEstimator):
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
        self.vectorizer, self.classifier = vectorizer, classifier
        self.scale, self.cv, self.random_state = scale, cv, random_state

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
        tags.input_tags.two_d_array, tags.input_tags.string = False, True
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
            Replace whatever is at `directory`.

        Returns
        -------
        Path
            The run directory.
        """
        check_is_fitted(self, "pipeline_")
        buffer = io.BytesIO()
        skops.dump(self.head_, buffer)
        encoder = self.vectorizer_.encoder_
        model = encoder.source.path if encoder.source.kind == "local" else encoder.source.spec
        classifier = None if self.classifier is None else repr(self.classifier)
        record = new_record(
            KIND_FEATURES,
            created=time.strftime("%Y-%m-%dT%H:%M:%S"),
            encoder={"model": model, "fingerprint": encoder.fingerprint, "architecture": type(encoder.model).__name__},
            features=self.vectorizer_.feature_options(),
            device=describe(encoder.device),
            vectorizer={"batch_size": self.vectorizer_.batch_size},
            params={"scale": self.scale, "cv": self.cv, "random_state": self.random_state, "classifier": classifier},
            classes=self.classes_.tolist(),
            majority_class=getattr(self.majority_class_, "item", lambda: self.majority_class_)(),
            C=self.C_,
            cv_scores=self.cv_scores_,
            n_features=int(self.vectorizer_.n_features_out_),
            metrics=metrics or {},
            versions={name: package_version(name) for name in ("torch", "transformers", "scikit-learn", "skops")},
            **(extra or {}),
        )
        return write_run(directory, {CONFIG_FILE: record, HEAD_FILE: buffer.getvalue()}, overwrite=overwrite)

    @classmethod
    def from_pretrained(
        cls,
        directory: str | Path,
        *,
        cache: str | Path | None = "memory",
        precision: str | None = None,
        trusted: Sequence[str] = (),
        device: str | None = "auto",
    ) -> TextClassifier:
        """Rebuild a saved classifier; refuses when the encoder's weights changed since it was trained.

        Parameters
        ----------
        directory : str or Path
            A run saved by `save_pretrained` or `bertkit train`.
        cache : str, Path or None
            The vectorizer's embedding cache ("memory", a directory, or None).
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
        record = read_run_config(directory, expected_kind=KIND_FEATURES)
        vectorizer = _saved_vectorizer(directory, record, cache, precision, device)
        head = _load_head(Path(directory) / HEAD_FILE, trusted)
        params = record["params"]
        classifier = None if params["classifier"] is None else clone(head[-1])
        estimator = cls(vectorizer, classifier, **{key: params[key] for key in ("scale", "cv", "random_state")})
        estimator.pipeline_ = Pipeline([("vectorizer", vectorizer), *head.steps])
        estimator.classes_ = np.array(record["classes"])
        estimator.C_, estimator.cv_scores_ = record["C"], record["cv_scores"]
        estimator.majority_class_ = record["majority_class"]
        estimator.record_ = record
        return estimator


def _saved_vectorizer(
    directory: str | Path, record: dict, cache: str | Path | None, precision: str | None, device: str | None
) -> BertVectorizer:
    """Rebuild the run's vectorizer, fitted, after checking that the encoder still has the weights it was trained on."""
    features = record["features"]
    options = {**EmbedOptions.from_record(features).record(), "batch_size": record["vectorizer"]["batch_size"]}
    trained_precision = features.get("precision", "fp32")
    precision = precision or trained_precision
    model = record["encoder"]["model"]
    vectorizer = BertVectorizer(
        **{**options, "model": None if model == "default" else model}, cache=cache, precision=precision, device=device
    ).fit([])
    found, precision = vectorizer.encoder_.fingerprint, vectorizer.encoder_.precision  # 'auto': the one that runs
    if found != record["encoder"]["fingerprint"]:
        raise ModelLoadError(
            f"{directory} was trained on encoder {model!r} with fingerprint {record['encoder']['fingerprint']}, "
            f"but that model now has fingerprint {found}: the weights or tokenizer changed, so its vectors would "
            "not match the classifier. Retrain with `bertkit train`, or restore the original model directory."
        )
    if precision != trained_precision:
        logger.warning(
            "%s was trained on %s vectors and is now used at %s: its predictions may differ slightly "
            "from the evaluated ones.",
            directory,
            trained_precision,
            precision,
        )
    trained_calibration = features.get("int8_calibration")
    calibration = vectorizer.feature_options().get("int8_calibration")
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
            "file, pass trusted=[...] with those names to TextClassifier.from_pretrained."
        )
    return skops.load(path, trusted=found)
