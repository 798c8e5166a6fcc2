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

from ..encoder.int8 import calibration_for, quantize_model
from ..encoder.models import quiet_transformers
from ..encoder.precision import autocast, check_precision
from ..encoder.threads import set_threads
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


class _FineTuned:
    """A transformers `...ForXClassification` model and its tokenizer, run without gradients in length-sorted
    batches."""

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
        model.eval()
        return cls(model, tokenizer, int(record["max_length"]), record, threads, precision, long_text, directory)

    @property
    def device(self) -> torch.device:
        """Where the model's weights are (inputs go there)."""
        return next(self.model.parameters()).device

    def _logits(self, examples: Sequence[Example], batch_size: int = EVAL_BATCH_SIZE) -> list[torch.Tensor]:
        """Logits per example in input order (each [classes] or [tokens, classes])."""
        was_training = self.model.training
        self.model.eval()
        results: list[torch.Tensor | None] = [None] * len(examples)
        with torch.inference_mode(), autocast(self.precision):
            for rows in sorted_batches([len(e.input_ids) for e in examples], batch_size):
                batch = collate([examples[i] for i in rows], self.tokenizer.pad_token_id, self.with_type_ids)
                batch.pop("labels")
                batch = {name: tensor.to(self.device) for name, tensor in batch.items()}
                logits = self._runner(**batch).logits.float().cpu()
                for k, row in enumerate(rows):
                    results[row] = logits[k, : len(examples[row].input_ids)] if logits.dim() == 3 else logits[k]
        self.model.train(was_training)
        return results


class FineTunedClassifier(_FineTuned):
    """Sentence classification (`AutoModelForSequenceClassification`): predict and predict_proba like scikit-learn."""

    KIND = KIND_TEXT
    AUTO_CLASS = "AutoModelForSequenceClassification"

    def predict_proba(self, texts: str | Sequence[str], batch_size: int = EVAL_BATCH_SIZE) -> np.ndarray:
        """(n_texts, n_classes) probabilities; one string is one text. Long texts follow `long_text`."""
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, len(self.classes_)), dtype=np.float32)
        examples, owners = self._examples(texts)
        probabilities = torch.softmax(torch.stack(self._logits(examples, batch_size)), dim=-1)
        result = torch.zeros((len(texts), len(self.classes_)))
        result.index_add_(0, torch.tensor(owners), probabilities)  # windows of one text: their mean probability
        return (result / torch.bincount(torch.tensor(owners), minlength=len(texts)).unsqueeze(1)).numpy()

    def _examples(self, texts: list[str]) -> tuple[list[Example], list[int]]:
        """Model inputs and the text each came from: one per text, or one per window with long_text='window'."""
        with TOKENIZER_LOCK:
            lengths = [len(ids) for ids in self.tokenizer(texts, truncation=False)["input_ids"]]
        too_long = [row for row, n in enumerate(lengths) if n > self.max_length]
        if too_long and self.long_text == "error":
            row = too_long[0]
            raise InputError(
                f"texts[{row}] has {lengths[row]} tokens, more than this model's maximum of "
                f"{self.max_length}; use long_text='truncate' or 'window'."
            )
        if too_long and self.long_text == "truncate":
            logger.warning(
                "%d of %d texts were longer than %d tokens and were truncated; use long_text='window' to "
                "read all of them.",
                len(too_long),
                len(texts),
                self.max_length,
            )
        if self.long_text != "window" or not too_long:
            return text_examples(self.tokenizer, texts, None, self.max_length)[0], list(range(len(texts)))
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

    def predict(self, texts: str | Sequence[str], batch_size: int = EVAL_BATCH_SIZE) -> np.ndarray:
        """The most probable label of each text; one string is one text."""
        return self.classes_[self.predict_proba(texts, batch_size).argmax(axis=1)]


class FineTunedTagger(_FineTuned):
    """Token classification (`AutoModelForTokenClassification`): tags per word, entities with character spans."""

    KIND = KIND_TOKEN
    AUTO_CLASS = "AutoModelForTokenClassification"

    def predict_word_tags(
        self, sentences: Sequence[Sequence[str]], batch_size: int = EVAL_BATCH_SIZE, return_scores: bool = False
    ):
        """One tag per word, read at each word's first sub-token; long sentences run in pieces and are joined."""
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

    def predict(self, texts: Sequence[str], batch_size: int = EVAL_BATCH_SIZE) -> list[list[Entity]]:
        """Entities in raw texts: type, text, character start/end, and the mean tag probability as score."""
        texts = check_texts(texts)
        split = [split_words(text) for text in texts]
        tags, scores = self.predict_word_tags([[w for w, _, _ in words] for words in split], batch_size, True)
        results = []
        for text, words, sentence_tags, sentence_scores in zip(texts, split, tags, scores):
            entities = []
            for span in entity_spans(sentence_tags):
                start, end = words[span.start][1], words[span.end - 1][2]
                score = float(np.mean(sentence_scores[span.start : span.end]))
                entities.append(Entity(span.type, span.start, span.end, text[start:end], start, end, round(score, 4)))
            results.append(entities)
        return results
