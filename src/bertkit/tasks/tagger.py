"""`FineTunedTagger`: a fine-tuned token classifier (NER) — tags per word, entities with character spans."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..encoder import tokenize as tok
from ..encoder.models import quiet_transformers
from ..encoder.runner import Row
from ..encoder.vectors import stitch
from ..errors import InputError
from .finetune.examples import split_words
from .finetuned_model import EVAL_BATCH_SIZE, FineTuned
from .runs import KIND_TOKEN
from .tagging import Entity, entity_spans

AGGREGATIONS = ("none", "simple", "first", "average", "max")  # transformers' token-classification pipeline


class FineTunedTagger(FineTuned):
    """Token classification (`AutoModelForTokenClassification`): tags per word, entities with character spans.

    A sentence longer than the run's maximum length is read in the tokenizer's overflow windows, stitched back by
    token (as `Encoder.embed_words` does): every word is tagged at its first sub-token, as in training.
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
        encoded = self.encode([sentences[i] for i in nonempty])  # type: ignore[misc]
        for sentence, item, logits in zip(nonempty, encoded, self.token_logits(encoded, batch_size)):
            best = torch.softmax(logits, dim=-1).max(dim=-1)
            for position, word in enumerate(tok.word_starts(item.word_ids())):
                if word is not None:
                    tags[sentence][word] = str(self.classes_[int(best.indices[position])])
                    scores[sentence][word] = float(best.values[position])
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
            'none', 'simple', 'first', 'average' or 'max': transformers' token-classification pipeline's
            `aggregation_strategy` over the same logits ('none': one entry per token, typed by its tag).

        Returns
        -------
        list of lists of Entity
            One list per text.
        """
        texts = tok.check_texts(texts)
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

    def token_logits(self, encoded: Sequence[tok.Encoded], batch_size: int = EVAL_BATCH_SIZE) -> list[torch.Tensor]:
        """Each input's (tokens, classes) logits over its whole encoding: a long one's windows stitched by token."""
        rows = [Row(part.ids, part.type_ids) for item in encoded for part in item.parts]
        outputs = iter(self.outputs(rows, batch_size))
        parts = [[next(outputs) for _ in item.parts] for item in encoded]
        return [
            stitch(item.encoding.special_tokens_mask, item.windows, item.stride, logits) if item.windows else logits[0]
            for item, logits in zip(encoded, parts)
        ]

    def _pipeline_entities(self, texts: list[str], aggregation: str, batch_size: int) -> list[list[Entity]]:
        """Entities as transformers' token-classification pipeline aggregates them, from the one runner's logits."""
        if aggregation not in AGGREGATIONS:
            raise InputError(
                f"aggregation={aggregation!r}: valid values are {', '.join(AGGREGATIONS)} (or None for "
                "bertkit's word-level tags)."
            )
        from transformers import TokenClassificationPipeline
        from transformers.pipelines.token_classification import AggregationStrategy

        with quiet_transformers():
            pipeline = TokenClassificationPipeline(model=self.model, tokenizer=self.tokenizer, device=self.device)
        encoded = self.encode(texts)
        found = []
        for text, item, logits in zip(texts, encoded, self.token_logits(encoded, batch_size)):
            encoding = item.encoding
            output = {
                "logits": logits[None],
                "input_ids": torch.tensor(encoding.ids)[None],
                "offset_mapping": torch.tensor(encoding.offsets)[None],
                "special_tokens_mask": torch.tensor(encoding.special_tokens_mask)[None],
                "sentence": text,
            }
            entities = []
            for e in pipeline.postprocess([output], AggregationStrategy[aggregation.upper()]):
                kind, start, end = str(e.get("entity_group", e.get("entity"))), int(e["start"]), int(e["end"])
                index = e.get("index")  # the pipeline's int token index, or None
                entities.append(Entity(kind, index, None, text[start:end], start, end, round(float(e["score"]), 4)))
            found.append(entities)
        return found
