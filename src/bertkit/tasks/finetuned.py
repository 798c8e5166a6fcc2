"""`FineTunedClassifier`: a fine-tuned sequence model of texts or text pairs (labels, scores, label sets, rankings)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..encoder.options import LONG_TEXT_POLICIES
from ..encoder.runner import Row
from ..encoder.tokenize import check_texts
from ..errors import InputError
from .finetuned_model import EVAL_BATCH_SIZE, FineTuned
from .runs import KIND_TEXT


class FineTunedClassifier(FineTuned):
    """A fine-tuned sequence model (`AutoModelForSequenceClassification`) of texts or text pairs.

    A classifier (`predict`, `predict_proba`), a multi-label classifier (labels over a threshold chosen on dev) or a
    regressor (a score per input); pair models also `rank` documents for a query, as sentence-transformers'
    CrossEncoder does.
    """

    KIND = KIND_TEXT
    AUTO_CLASS = "AutoModelForSequenceClassification"
    LONG_TEXTS = LONG_TEXT_POLICIES
    _threshold: float | None = None

    @property
    def problem(self) -> str:
        """'single_label_classification', 'multi_label_classification' or 'regression'."""
        return getattr(self.model.config, "problem_type", None) or "single_label_classification"

    @property
    def takes_pairs(self) -> bool | None:
        """True for a model fine-tuned on text pairs, False on single texts, None when not known (no run record)."""
        task = self.record_.get("task")
        return None if task is None else task == "pair"

    def logits(self, inputs: Any, batch_size: int = EVAL_BATCH_SIZE) -> np.ndarray:
        """Return the model's raw outputs, (n, outputs): texts, or (text, pair) tuples for a pair model.

        Parameters
        ----------
        inputs : str, (str, str) or list of them
            One input is a list of one.
        batch_size : int
            Inputs per forward pass (length-sorted).

        Returns
        -------
        numpy.ndarray
            float32; windows of a long text (long_text='window') averaged.
        """
        return self._averaged(inputs, batch_size, lambda logits: logits)

    def predict_proba(self, inputs: Any, batch_size: int = EVAL_BATCH_SIZE) -> np.ndarray:
        """(n, classes) probabilities: softmax over the classes, or each label's sigmoid (multi-label).

        Parameters
        ----------
        inputs : str, (str, str) or list of them
            Texts, or (text, pair) tuples for a pair model; one input is a list of one.
        batch_size : int
            Inputs per forward pass.

        Returns
        -------
        numpy.ndarray
            In `classes_` order; windows of a long text average their probabilities.
        """
        if self.problem == "regression":
            raise InputError("this model is a regressor: it gives a score (predict), not class probabilities.")
        multi = self.problem == "multi_label_classification"
        return self._averaged(inputs, batch_size, torch.sigmoid if multi else lambda logits: logits.softmax(-1))

    def predict(self, inputs: Any, batch_size: int = EVAL_BATCH_SIZE) -> Any:
        """Predict each input's most probable label; a regressor's score; a multi-label model's labels (a list each).

        Parameters
        ----------
        inputs : str, (str, str) or list of them
            Texts, or (text, pair) tuples for a pair model; one input is a list of one.
        batch_size : int
            Inputs per forward pass.

        Returns
        -------
        numpy.ndarray or list of lists
            Labels (classifier), float32 scores (regressor), or each input's labels (multi-label).
        """
        if self.problem == "regression":
            return self.logits(inputs, batch_size)[:, 0]
        probabilities = self.predict_proba(inputs, batch_size)
        if self.problem == "multi_label_classification":
            return [[str(c) for c, on in zip(self.classes_, row >= self.threshold) if on] for row in probabilities]
        return self.classes_[probabilities.argmax(axis=1)]

    @property
    def threshold(self) -> float:
        """The probability at which a multi-label model predicts a label (chosen on dev while fine-tuning)."""
        if self._threshold is not None:
            return self._threshold
        return float(self.record_.get("metrics", {}).get("threshold", 0.5))

    @threshold.setter
    def threshold(self, value: float) -> None:
        self._threshold = float(value)

    def scores(self, pairs: Sequence, batch_size: int = EVAL_BATCH_SIZE, raw: bool = False) -> np.ndarray:
        """Score each (query, document) pair's relevance.

        A regressor's output, or a binary classifier's probability of its positive (last) class; `raw=True` gives that
        class's logit margin instead.

        Parameters
        ----------
        pairs : sequence of (str, str)
            (query, document) pairs, in the order the run was trained on (text, pair).
        batch_size : int
            Rows per forward pass (within the token budget).
        raw : bool
            The positive class's logit minus the other's, not its probability (TEI's `raw_scores`).

        Returns
        -------
        numpy.ndarray
            (n,) float scores, higher is more relevant.
        """
        if self.problem == "regression":
            return self.logits(pairs, batch_size)[:, 0]
        if self.problem != "single_label_classification" or len(self.classes_) != 2:
            raise InputError(
                f"ranking needs a regressor or a two-class classifier; this model has "
                f"{len(self.classes_)} classes ({self.problem})."
            )
        logits = self.logits(pairs, batch_size)
        margin = logits[:, 1] - logits[:, 0]
        return margin if raw else 1.0 / (1.0 + np.exp(-margin))  # = softmax probability of the last class

    def rank(
        self,
        query: str,
        documents: Sequence[str],
        top_k: int | None = None,
        batch_size: int = EVAL_BATCH_SIZE,
        raw: bool = False,
    ) -> list[tuple[int, float]]:
        """Rank the documents for `query`: (index, score), best first, as sentence-transformers' `CrossEncoder.rank`.

        Parameters
        ----------
        query : str
            The query, the first text of every pair.
        documents : list of str
            The candidates.
        top_k : int, optional
            Keep the best `top_k` only.
        batch_size : int
            Pairs per forward pass.
        raw : bool
            Rank by the logit margin, as `scores(raw=True)` gives it.

        Returns
        -------
        list of (int, float)
            Sorted by score, highest first (ties: the earlier document first).
        """
        if self.takes_pairs is False:
            raise InputError("this model was fine-tuned on single texts; ranking needs a pair model (--task pair).")
        documents = check_texts(documents, "documents")
        scores = self.scores([(query, document) for document in documents], batch_size, raw=raw)
        order = sorted(range(len(documents)), key=lambda i: -float(scores[i]))
        return [(i, float(scores[i])) for i in order[:top_k]]

    def _averaged(self, inputs: Any, batch_size: int, transform: Any) -> np.ndarray:
        """`transform(logits)` of every input; the windows of a long text (long_text='window') averaged."""
        texts, pairs = self._inputs(inputs)
        encoded = self.encode(texts, pairs) if texts else []
        rows = [Row(part.ids, part.type_ids) for item in encoded for part in item.parts]
        owners = [text for text, item in enumerate(encoded) for _ in item.parts]
        width = self.model.config.num_labels
        if not rows:
            return np.zeros((0, width), dtype=np.float32)
        values = transform(torch.stack(self.outputs(rows, batch_size)))
        result = torch.zeros((len(texts), width))
        result.index_add_(0, torch.tensor(owners), values)
        return (result / torch.bincount(torch.tensor(owners), minlength=len(texts)).unsqueeze(1)).numpy()

    def _inputs(self, inputs: Any) -> tuple[list[str], list[str] | None]:
        """Texts and pairs from what the caller gave, checked against what the model was fine-tuned on."""
        if isinstance(inputs, str) or (
            isinstance(inputs, tuple) and len(inputs) == 2 and all(isinstance(x, str) for x in inputs)
        ):
            inputs = [inputs]
        inputs = list(inputs)
        pairs_given = [isinstance(x, (tuple, list)) for x in inputs]
        if any(pairs_given) and not all(pairs_given):
            raise InputError("give all inputs as texts or all as (text, pair) pairs, not a mix.")
        paired = bool(inputs) and all(pairs_given)
        if self.takes_pairs is True and inputs and not paired:
            raise InputError(
                "this model was fine-tuned on text pairs: give (text, pair) tuples, e.g. "
                "predict([('how old are you?', 'I am six.')])."
            )
        if self.takes_pairs is False and paired:
            raise InputError("this model was fine-tuned on single texts: give texts, not pairs.")
        if not paired:
            return check_texts(inputs), None
        for row, item in enumerate(inputs):
            if len(item) != 2:
                raise InputError(f"inputs[{row}] has {len(item)} parts; a pair is (text, pair).")
        return check_texts([a for a, _ in inputs]), check_texts([b for _, b in inputs], "pairs")
