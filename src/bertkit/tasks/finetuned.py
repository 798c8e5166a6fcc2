"""Fine-tuned models loaded from a run directory: predict labels for texts, or entities with character spans."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoTokenizer

from ..display import facts_table
from ..encoder.defaults import MAX_BATCH_TOKENS
from ..encoder.devices import describe, resolve_device
from ..encoder.int8 import calibration_for, quantize_model
from ..encoder.models import quiet_transformers
from ..encoder.precision import autocast, check_precision
from ..encoder.threads import forward_in_parallel, set_threads, total_threads
from ..encoder.tokenize import LONG_TEXT_POLICIES, TOKENIZER_LOCK, check_texts
from ..encoder.windows import default_overlap, sorted_batches
from ..errors import InputError, ModelLoadError
from .finetune.examples import (
    Example,
    collate,
    split_words,
    text_examples,
    token_examples,
    word_pieces,
)
from .runs import KIND_TEXT, KIND_TOKEN, read_run_config
from .tagging import Entity, entity_spans

logger = logging.getLogger(__name__)

EVAL_BATCH_SIZE = 64
AGGREGATIONS = ("none", "simple", "first", "average", "max")  # transformers' token-classification pipeline


class _FineTuned:
    """A transformers `...ForXClassification` model and its tokenizer, run without gradients in length-sorted
    batches."""

    KIND: str  # the run kind written in the run's config
    AUTO_CLASS: str  # the transformers auto class that loads the model

    def __init__(
        self,
        model,
        tokenizer,
        max_length: int,
        record: dict | None = None,
        threads: int | None = None,
        precision: str | None = None,
        long_text: str = "truncate",
        directory: str | Path | None = None,
    ):
        set_threads(threads)
        if long_text not in LONG_TEXT_POLICIES:
            raise InputError(f"long_text={long_text!r}: valid values are {', '.join(LONG_TEXT_POLICIES)}.")
        self.long_text = long_text
        trained = (record or {}).get("precision", "fp32")
        self.precision = check_precision(precision or trained, what="fine-tuned models")
        if self.precision != trained:
            logger.warning(
                "this model was fine-tuned and evaluated at %s and is now used at %s: its predictions may "
                "differ slightly from the evaluated ones.",
                trained,
                self.precision,
            )
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.record_ = record or {}
        self.classes_ = np.array([model.config.id2label[i] for i in range(model.config.num_labels)])
        self.with_type_ids = "token_type_ids" in inspect.signature(model.forward).parameters
        self._runner = model
        if (
            self.precision == "int8"
        ):  # the encoder layers in int8, calibrated on this fine-tuned model; the head in fp32
            calibration = calibration_for(
                model, tokenizer, max_length, self.with_type_ids, str(directory) if directory else None, None
            )
            self._runner = quantize_model(model.eval(), calibration).eval()

    @classmethod
    def load(
        cls,
        directory: str | Path,
        *,
        threads: int | None = None,
        precision: str | None = None,
        long_text: str = "truncate",
        device: str | None = "auto",
    ):
        """Load with plain transformers from safetensors (what `bertkit finetune` saved), remote code off.

        precision: None runs at the precision the model was trained with ('int8' quantises the encoder layers, with the
        directory's own calibration when `bertkit quantize` wrote one); long_text: what a classifier does with a
        text longer than its maximum length ('truncate' and say so, 'error', or 'window': average over windows).
        """
        record = read_run_config(directory, expected_kind=cls.KIND)
        auto = getattr(transformers, cls.AUTO_CLASS)
        try:
            with quiet_transformers():
                model = auto.from_pretrained(
                    str(directory), use_safetensors=True, trust_remote_code=False, local_files_only=True
                )
                tokenizer = AutoTokenizer.from_pretrained(
                    str(directory), trust_remote_code=False, local_files_only=True
                )
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{directory}: cannot load the fine-tuned model ({exc}).") from exc
        model.eval().to(resolve_device(device))
        return cls(model, tokenizer, int(record["max_length"]), record, threads, precision, long_text, directory)

    @property
    def device(self) -> torch.device:
        """Where the model's weights are (inputs go there)."""
        return next(self.model.parameters()).device

    def facts(self) -> dict[str, str]:
        """What this run is, in a few lines: what `repr` and Jupyter show."""
        record = self.record_
        metrics = {k: v for k, v in record.get("metrics", {}).items() if isinstance(v, float) and "baseline" not in k}
        facts = {
            "task": str(record.get("task", "text")),
            "base model": str(record.get("base_model", {}).get("spec", "?")),
            "labels": ", ".join(map(str, self.classes_[:12])) + (" …" if len(self.classes_) > 12 else ""),
            "dev": ", ".join(f"{k} {v:.4f}" for k, v in list(metrics.items())[:4]) or "not evaluated",
            "max_length": str(self.max_length),
            "runs": f"{self.precision} on {describe(self.device)}",
        }
        if record.get("training"):
            training = record["training"]
            facts["trained"] = f"{training.get('epochs_run')} epochs (best {training.get('best_epoch')})"
        return facts

    def evaluate(self, inputs: Sequence, labels: Sequence):
        """Score this run on labelled data the way its problem is scored: what `bertkit evaluate` prints.

        Parameters
        ----------
        inputs : list
            Texts, (text, pair) tuples for a pair model, or word lists for a tagger.
        labels : list
            A label per text (a score for a regressor, a list of labels for a multi-label model), or a tag list per
            sentence.

        Returns
        -------
        EvaluationReport
            A dict of the metrics; a table (and the confusion matrix drawn) in Jupyter.
        """
        from .evaluate import evaluate

        return evaluate(self, inputs, labels)

    def __repr__(self) -> str:
        facts = self.facts()
        described = f"{facts['task']} on {facts['base model']}; labels {facts['labels']}; dev {facts['dev']}"
        return f"{type(self).__name__}({described})"

    def _repr_html_(self) -> str:
        return facts_table(self.facts(), type(self).__name__)

    def _logits(self, examples: Sequence[Example], batch_size: int = EVAL_BATCH_SIZE) -> list[torch.Tensor]:
        """Logits per example in input order (each [classes] or [tokens, classes]): length-sorted batches within a
        token budget; on a CPU, two batches at once on shares of the threads (as `Encoder.embed` runs them)."""
        was_training = self.model.training
        self.model.eval()
        results: list[torch.Tensor | None] = [None] * len(examples)
        chunks = sorted_batches([len(e.input_ids) for e in examples], batch_size, MAX_BATCH_TOKENS)

        def pad(rows: list[int]) -> dict:
            batch = collate([examples[i] for i in rows], self.tokenizer.pad_token_id, self.with_type_ids)
            batch.pop("labels")
            return {name: tensor.to(self.device) for name, tensor in batch.items()}

        def forward(batch: dict) -> torch.Tensor:
            with torch.inference_mode(), autocast(self.precision, self.device):
                return self._runner(**batch).logits.float().cpu()

        workers = min(2, total_threads()) if self.device.type == "cpu" and len(chunks) > 1 else 1
        passes = (
            forward_in_parallel(forward, chunks, pad, workers)
            if workers > 1
            else ((rows, batch, forward(batch)) for rows, batch in ((rows, pad(rows)) for rows in chunks))
        )
        for rows, _, logits in passes:
            for k, row in enumerate(rows):
                results[row] = logits[k, : len(examples[row].input_ids)] if logits.dim() == 3 else logits[k]
        self.model.train(was_training)
        return [logits for logits in results if logits is not None]


Pair = tuple[str, str]


class FineTunedClassifier(_FineTuned):
    """A fine-tuned sequence model (`AutoModelForSequenceClassification`) of texts or text pairs: a classifier
    (`predict`, `predict_proba`), a multi-label classifier (labels over a threshold chosen on dev) or a regressor
    (a score per input); pair models also `rank` documents for a query, as sentence-transformers' CrossEncoder does.
    """

    KIND = KIND_TEXT
    AUTO_CLASS = "AutoModelForSequenceClassification"

    @property
    def problem(self) -> str:
        """'single_label_classification', 'multi_label_classification' or 'regression'."""
        return getattr(self.model.config, "problem_type", None) or "single_label_classification"

    @property
    def takes_pairs(self) -> bool | None:
        """True for a model fine-tuned on text pairs, False on single texts, None when not known (no run record)."""
        task = self.record_.get("task")
        return None if task is None else task == "pair"

    def logits(self, inputs, batch_size: int = EVAL_BATCH_SIZE) -> np.ndarray:
        """The model's raw outputs, (n, outputs): texts, or (text, pair) tuples for a pair model.

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
        texts, pairs = self._inputs(inputs)
        if not texts:
            return np.zeros((0, self.model.config.num_labels), dtype=np.float32)
        examples, owners = self._examples(texts, pairs)
        logits = torch.stack(self._logits(examples, batch_size))
        result = torch.zeros((len(texts), logits.shape[1]))
        result.index_add_(0, torch.tensor(owners), logits)
        return (result / torch.bincount(torch.tensor(owners), minlength=len(texts)).unsqueeze(1)).numpy()

    def predict_proba(self, inputs, batch_size: int = EVAL_BATCH_SIZE) -> np.ndarray:
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
        texts, pairs = self._inputs(inputs)
        if not texts:
            return np.zeros((0, len(self.classes_)), dtype=np.float32)
        examples, owners = self._examples(texts, pairs)
        logits = torch.stack(self._logits(examples, batch_size))
        probabilities = torch.sigmoid(logits) if self.problem == "multi_label_classification" else logits.softmax(-1)
        result = torch.zeros((len(texts), len(self.classes_)))
        result.index_add_(0, torch.tensor(owners), probabilities)  # windows of one text: their mean probability
        return (result / torch.bincount(torch.tensor(owners), minlength=len(texts)).unsqueeze(1)).numpy()

    def predict(self, inputs, batch_size: int = EVAL_BATCH_SIZE):
        """The most probable label of each input; a regressor's score; a multi-label model's labels (a list each).

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
        return getattr(self, "_threshold", None) or float(self.record_.get("metrics", {}).get("threshold", 0.5))

    @threshold.setter
    def threshold(self, value: float) -> None:
        self._threshold = float(value)

    def scores(self, pairs, batch_size: int = EVAL_BATCH_SIZE, raw: bool = False) -> np.ndarray:
        """One relevance score per (query, document) pair: a regressor's output, or a binary classifier's
        probability of its positive (last) class; `raw=True` gives that class's logit margin instead.

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
        self, query: str, documents: Sequence[str], top_k: int | None = None, batch_size: int = EVAL_BATCH_SIZE
    ) -> list[tuple[int, float]]:
        """The documents' (index, score) for `query`, best first, as sentence-transformers' `CrossEncoder.rank`.

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

        Returns
        -------
        list of (int, float)
            Sorted by score, highest first (ties: the earlier document first).
        """
        if self.takes_pairs is False:
            raise InputError("this model was fine-tuned on single texts; ranking needs a pair model (--task pair).")
        documents = check_texts(documents, "documents")
        scores = self.scores([(query, document) for document in documents], batch_size)
        order = sorted(range(len(documents)), key=lambda i: -float(scores[i]))
        return [(i, float(scores[i])) for i in order[: top_k if top_k is not None else None]]

    def _inputs(self, inputs) -> tuple[list[str], list[str] | None]:
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

    def _examples(self, texts: list[str], pairs: list[str] | None = None) -> tuple[list[Example], list[int]]:
        """Model inputs and the text each came from: one per text, or one per window with long_text='window'."""
        examples, _ = text_examples(self.tokenizer, texts, None, self.max_length, pairs)
        with TOKENIZER_LOCK:  # the inputs the tokenizer cut: tokenized once more, whole, to say how long they are
            too_long = [row for row, e in enumerate(examples) if len(e.input_ids) == self.max_length]
            full = (
                self.tokenizer(
                    [texts[r] for r in too_long], [pairs[r] for r in too_long] if pairs else None, truncation=False
                )["input_ids"]
                if too_long
                else []
            )
        lengths = {row: len(ids) for row, ids in zip(too_long, full) if len(ids) > self.max_length}
        too_long = sorted(lengths)
        what = "pairs" if pairs is not None else "texts"
        if too_long and self.long_text == "error":
            row = too_long[0]
            raise InputError(
                f"{what}[{row}] has {lengths[row]} tokens, more than this model's maximum of "
                f"{self.max_length}; use long_text='truncate'" + (" or 'window'." if pairs is None else ".")
            )
        if too_long and (self.long_text == "truncate" or pairs is not None):
            logger.warning(
                "%d of %d %s were longer than %d tokens and were truncated%s.",
                len(too_long),
                len(texts),
                what,
                self.max_length,
                " (longest first)" if pairs is not None else "; use long_text='window' to read all of them",
            )
        if self.long_text != "window" or not too_long or pairs is not None:
            return examples, list(range(len(texts)))
        budget = self.max_length - self.tokenizer.num_special_tokens_to_add(pair=False)
        with TOKENIZER_LOCK:  # the fast tokenizer's own windows: the rule encoder/windows.window_spans follows
            windows = self.tokenizer(
                texts,
                truncation=True,
                max_length=self.max_length,
                stride=default_overlap(budget),
                return_overflowing_tokens=True,
            )
        type_rows = windows.get("token_type_ids") or [[0] * len(ids) for ids in windows["input_ids"]]
        examples = [Example(ids, types, -1) for ids, types in zip(windows["input_ids"], type_rows)]
        return examples, list(windows["overflow_to_sample_mapping"])


class FineTunedTagger(_FineTuned):
    """Token classification (`AutoModelForTokenClassification`): tags per word, entities with character spans."""

    KIND = KIND_TOKEN
    AUTO_CLASS = "AutoModelForTokenClassification"

    def predict_word_tags(
        self, sentences: Sequence[Sequence[str]], batch_size: int = EVAL_BATCH_SIZE, return_scores: bool = False
    ):
        """One tag per word, read at each word's first sub-token; long sentences run in pieces and are joined.

        Parameters
        ----------
        sentences : sequence of list of str
            Pre-split words (CoNLL's); `predict` takes plain texts.
        batch_size : int
            Rows per forward pass (within the token budget).
        return_scores : bool
            Also return each word's tag probability.

        Returns
        -------
        list of list of str
            One tag per word; `(tags, scores)` with `return_scores`.
        """
        sentences = [list(s) for s in sentences]
        tags = [["O"] * len(s) for s in sentences]
        scores = [[0.0] * len(s) for s in sentences]
        nonempty = [i for i, s in enumerate(sentences) if s]
        if nonempty:
            pieces, _ = word_pieces(self.tokenizer, [sentences[i] for i in nonempty], self.max_length)
            logits = self._logits(token_examples(pieces, None), batch_size)
            for piece, piece_logits in zip(pieces, logits):
                sentence = nonempty[piece.sentence]
                probabilities = torch.softmax(piece_logits, dim=-1)
                best = probabilities.max(dim=-1)
                for position, word in enumerate(piece.word_starts):
                    if word is not None:
                        tags[sentence][piece.first_word + word] = str(self.classes_[int(best.indices[position])])
                        scores[sentence][piece.first_word + word] = float(best.values[position])
        return (tags, scores) if return_scores else tags

    def predict(
        self, texts: Sequence[str], batch_size: int = EVAL_BATCH_SIZE, aggregation: str | None = None
    ) -> list[list[Entity]]:
        """Entities in raw texts: type, text, character start/end and a score.

        Parameters
        ----------
        texts : str or list of str
            One string is one text.
        batch_size : int
            Texts per forward pass.
        aggregation : str, optional
            None: bertkit's words (CoNLL-style: whitespace, then punctuation peeled off), each tagged at its first
            sub-token as in training and `bertkit evaluate`, an entity's score the mean of its words'.
            'none', 'simple', 'first', 'average' or 'max': transformers' token-classification pipeline with that
            `aggregation_strategy` on the same model ('none': one entry per token, typed by its tag).

        Returns
        -------
        list of lists of Entity
            One list per text.
        """
        texts = check_texts(texts)
        if aggregation is not None:
            return self._pipeline_entities(texts, aggregation, batch_size)
        split = [split_words(text) for text in texts]
        tags, scores = self.predict_word_tags([[w for w, _, _ in words] for words in split], batch_size, True)
        results = []
        for text, words, sentence_tags, sentence_scores in zip(texts, split, tags, scores):
            entities = []
            for span in entity_spans(sentence_tags):
                assert span.start is not None and span.end is not None  # spans from tags always have a word range
                start, end = words[span.start][1], words[span.end - 1][2]
                score = float(np.mean(sentence_scores[span.start : span.end]))
                entities.append(Entity(span.type, span.start, span.end, text[start:end], start, end, round(score, 4)))
            results.append(entities)
        return results

    def _pipeline_entities(self, texts: list[str], aggregation: str, batch_size: int) -> list[list[Entity]]:
        """transformers' token-classification pipeline, its entities in bertkit's shape (the text is the input's)."""
        if aggregation not in AGGREGATIONS:
            raise InputError(
                f"aggregation={aggregation!r}: valid values are {', '.join(AGGREGATIONS)} (or None for "
                "bertkit's word-level tags)."
            )
        from transformers import pipeline

        with quiet_transformers():
            tagger = pipeline(
                "token-classification",
                model=self._runner,
                tokenizer=self.tokenizer,
                aggregation_strategy=aggregation,
                device=self.device,
            )
        with TOKENIZER_LOCK, torch.inference_mode(), autocast(self.precision):
            found = tagger(texts, batch_size=batch_size) if texts else []
        results = []
        for text, entities in zip(texts, found):
            results.append(
                [
                    Entity(
                        str(e.get("entity_group", e.get("entity"))),
                        e.get("index"),  # type: ignore[arg-type]  # the pipeline's int token index, or None
                        None,
                        text[int(e["start"]) : int(e["end"])],
                        int(e["start"]),
                        int(e["end"]),
                        round(float(e["score"]), 4),
                    )
                    for e in entities
                ]
            )
        return results
