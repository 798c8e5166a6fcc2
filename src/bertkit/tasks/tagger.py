"""`FineTunedTagger`: a fine-tuned token classifier (NER) — tags per word, entities with character spans."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..encoder.models import quiet_transformers
from ..encoder.precision import autocast
from ..encoder.runner import Row
from ..encoder.tokenize import TOKENIZER_LOCK, check_texts
from ..errors import InputError
from .finetune.examples import split_words, word_pieces
from .finetuned_model import EVAL_BATCH_SIZE, FineTuned
from .runs import KIND_TOKEN
from .tagging import Entity, entity_spans

AGGREGATIONS = ("none", "simple", "first", "average", "max")  # transformers' token-classification pipeline


class FineTunedTagger(FineTuned):
    """Token classification (`AutoModelForTokenClassification`): tags per word, entities with character spans.

    A sentence longer than the run's maximum length is read in pieces cut at word boundaries, the pieces it was
    trained on: every word stays whole in one piece, tagged at its first sub-token.
    """

    KIND = KIND_TOKEN
    AUTO_CLASS = "AutoModelForTokenClassification"

    def predict_word_tags(
        self, sentences: Sequence[Sequence[str]], batch_size: int = EVAL_BATCH_SIZE, return_scores: bool = False
    ) -> Any:
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
            logits = self.outputs([Row(p.input_ids, p.token_type_ids) for p in pieces], batch_size)
            for piece, piece_logits in zip(pieces, logits):
                sentence = nonempty[piece.sentence]
                best = torch.softmax(piece_logits, dim=-1).max(dim=-1)
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
        """Run transformers' token-classification pipeline; its entities in bertkit's shape."""
        if aggregation not in AGGREGATIONS:
            raise InputError(
                f"aggregation={aggregation!r}: valid values are {', '.join(AGGREGATIONS)} (or None for "
                "bertkit's word-level tags)."
            )
        from transformers import pipeline

        with quiet_transformers():
            tagger = pipeline(
                "token-classification",
                model=self.network,
                tokenizer=self.tokenizer,
                aggregation_strategy=aggregation,
                device=self.device,
            )
        with TOKENIZER_LOCK, torch.inference_mode(), autocast(self.precision):
            found = tagger(texts, batch_size=batch_size) if texts else []
        return [
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
            for text, entities in zip(texts, found)
        ]
