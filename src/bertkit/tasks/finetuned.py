"""Fine-tuned models loaded from a run directory: predict labels for texts, or entities with character spans."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import transformers
from transformers import AutoTokenizer

from ..encoder.models import quiet_transformers
from ..encoder.threads import set_threads
from ..errors import InputError, ModelLoadError
from .finetune.examples import (
    Example,
    collate,
    sorted_batches,
    split_words,
    text_examples,
    token_examples,
    word_pieces,
)
from .runs import KIND_TEXT, KIND_TOKEN, read_run_config
from .tagging import Entity, entity_spans

EVAL_BATCH_SIZE = 64


class _FineTuned:
    """A transformers `...ForXClassification` model and its tokenizer, run without gradients in length-sorted batches."""

    def __init__(self, model, tokenizer, max_length: int, record: dict | None = None, threads: int | None = None):
        set_threads(threads)
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.record_ = record or {}
        self.classes_ = np.array([model.config.id2label[i] for i in range(model.config.num_labels)])
        self.with_type_ids = "token_type_ids" in inspect.signature(model.forward).parameters

    @classmethod
    def load(cls, directory: str | Path, *, threads: int | None = None):
        """Load with plain transformers from safetensors (what `bertkit finetune` saved), remote code off."""
        record = read_run_config(directory, expected_kind=cls.KIND)
        auto = getattr(transformers, cls.AUTO_CLASS)
        try:
            with quiet_transformers():
                model = auto.from_pretrained(str(directory), use_safetensors=True, trust_remote_code=False,
                                             local_files_only=True)
                tokenizer = AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{directory}: cannot load the fine-tuned model ({exc}).") from exc
        model.eval()
        return cls(model, tokenizer, int(record["max_length"]), record, threads)

    def _logits(self, examples: Sequence[Example], batch_size: int = EVAL_BATCH_SIZE) -> list[torch.Tensor]:
        """Logits per example in input order (each [classes] or [tokens, classes])."""
        was_training = self.model.training
        self.model.eval()
        results: list[torch.Tensor | None] = [None] * len(examples)
        with torch.inference_mode():
            for rows in sorted_batches([len(e.input_ids) for e in examples], batch_size):
                batch = collate([examples[i] for i in rows], self.tokenizer.pad_token_id, self.with_type_ids)
                batch.pop("labels")
                logits = self.model(**batch).logits.float()
                for k, row in enumerate(rows):
                    results[row] = logits[k, : len(examples[row].input_ids)] if logits.dim() == 3 else logits[k]
        self.model.train(was_training)
        return results


class FineTunedClassifier(_FineTuned):
    """Sentence classification (`AutoModelForSequenceClassification`): predict and predict_proba like scikit-learn."""

    KIND = KIND_TEXT
    AUTO_CLASS = "AutoModelForSequenceClassification"

    def predict_proba(self, texts: Sequence[str], batch_size: int = EVAL_BATCH_SIZE) -> np.ndarray:
        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, len(self.classes_)), dtype=np.float32)
        examples, _ = text_examples(self.tokenizer, texts, None, self.max_length)
        logits = torch.stack(self._logits(examples, batch_size))
        return torch.softmax(logits, dim=-1).numpy()

    def predict(self, texts: Sequence[str], batch_size: int = EVAL_BATCH_SIZE) -> np.ndarray:
        return self.classes_[self.predict_proba(texts, batch_size).argmax(axis=1)]


class FineTunedTagger(_FineTuned):
    """Token classification (`AutoModelForTokenClassification`): tags per word, entities with character spans."""

    KIND = KIND_TOKEN
    AUTO_CLASS = "AutoModelForTokenClassification"

    def predict_word_tags(self, sentences: Sequence[Sequence[str]], batch_size: int = EVAL_BATCH_SIZE,
                          return_scores: bool = False):
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
        texts = _check_texts(texts)
        split = [split_words(text) for text in texts]
        tags, scores = self.predict_word_tags([[w for w, _, _ in words] for words in split], batch_size, True)
        results = []
        for text, words, sentence_tags, sentence_scores in zip(texts, split, tags, scores):
            entities = []
            for span in entity_spans(sentence_tags):
                start, end = words[span.start][1], words[span.end - 1][2]
                score = float(np.mean(sentence_scores[span.start:span.end]))
                entities.append(Entity(span.type, span.start, span.end, text[start:end], start, end, round(score, 4)))
            results.append(entities)
        return results


def _check_texts(texts) -> list[str]:
    texts = [texts] if isinstance(texts, str) else list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"texts[{index}] is a {type(text).__name__}, not a string.")
    return texts
