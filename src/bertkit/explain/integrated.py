"""Integrated Gradients over a model's word embeddings, for any score of them: the steps, completeness, word scores.

The path runs from a baseline to the input's word embeddings: the baseline keeps `[CLS]` and `[SEP]` and puts `[PAD]`
(or `[MASK]`) in every other position. captum's `IntegratedGradients` integrates the score's gradient along it, its
steps batched as many to a pass as the model's token budget holds. A token's attribution is the sum over the
embedding dimensions; a word's, the sum of its word pieces (the words `embed_words` reads). Completeness: a text's
attributions add up to f(input) − f(input with that text at its baseline), and `delta` is how far they miss, as a
share of that difference.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..encoder.network import Network
from ..encoder.runner import call_model
from ..errors import InputError, quoted

if TYPE_CHECKING:
    from ..encoder.tokenize import Encoded

logger = logging.getLogger(__name__)

DEFAULT_STEPS = 24  # chosen by benchmarks/attributions.py: under 1 s a 64-token text, completeness within 0.03 %
MAX_STEPS = 1000  # 40 times the default: a short text in about 4 s on 2 CPU cores; captum's weights grow as steps²
BASELINES = ("pad", "mask")
DELTA_WARNING = 0.05  # a share of f(input) - f(baseline): above it, the steps are doubled, up to MAX_REFINEMENT times
DELTA_FLOOR = 1e-3  # an absolute miss this small is no miss, whatever its share of a score that barely moved
MAX_REFINEMENT = 4  # a saturating score (a probability near 0 or 1) changes fast on a short stretch of the path


@dataclass(frozen=True)
class TextAttribution:
    """One text's share of an attribution: its tokens and words, each with a signed score (its sum: the text's part).

    Attributes
    ----------
    text : str
        The text as the model read it (with the prompt, where one was given).
    tokens : list of str
        The model's tokens, `[CLS]` and `[SEP]` included.
    token_scores : numpy.ndarray
        (tokens,) float64: each token's attribution.
    words : list of str
        The whitespace words of `text`.
    word_scores : numpy.ndarray
        (words,) float64: each word's attribution, the sum of its word pieces'.
    baseline_score : float
        The score with this text at its baseline (the others as they are).
    delta : float
        |sum of its attributions − (score − baseline_score)| as a share of |score − baseline_score|.
    """

    text: str
    tokens: list[str]
    token_scores: np.ndarray
    words: list[str]
    word_scores: np.ndarray
    baseline_score: float
    delta: float

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form: text, tokens, token_scores, words, word_scores, baseline_score, delta."""
        scores = {name: [float(x) for x in getattr(self, name)] for name in ("token_scores", "word_scores")}
        return {**vars(self), **scores}


@dataclass(frozen=True)
class Attribution:
    """Integrated Gradients of one score over the tokens of its texts.

    Attributes
    ----------
    target : str
        What was attributed (e.g. 'cosine similarity').
    score : float
        The score of the input.
    texts : list of TextAttribution
        One per text the score reads.
    n_steps : int
        Integration steps: the ones asked for, doubled (up to 4 times as many) for a text whose delta was over 5 %.
    baseline : str
        'pad' or 'mask': the token every content position of the baseline holds.
    """

    target: str
    score: float
    texts: list[TextAttribution]
    n_steps: int
    baseline: str

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form of the attribution."""
        plain = {name: getattr(self, name) for name in ("target", "score", "n_steps", "baseline")}
        return {**plain, "texts": [text.to_dict() for text in self.texts]}


@dataclass(frozen=True)
class Integrator:
    """Integrated Gradients on one model: its network, word embeddings, baseline token, device and token budget."""

    network: torch.nn.Module
    takes_type_ids: bool
    device: torch.device
    precision: str
    filler: int
    steps_budget: int  # padded tokens one pass of interpolation steps may hold
    n_steps: int
    baseline: str

    @classmethod
    def of(cls, held: Network, n_steps: int, baseline: str) -> Integrator:
        """Check what the call asks for and take the model's parts from its holder (an encoder's or a run's)."""
        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or not 2 <= n_steps <= MAX_STEPS:
            raise InputError(f"n_steps={n_steps!r}: give a whole number of integration steps, 2 to {MAX_STEPS}.")
        if baseline not in BASELINES:
            raise InputError(f"baseline={quoted(baseline)}: give one of {', '.join(BASELINES)}.")
        if held.precision == "int8":
            raise InputError("int8 weights have no gradients: attribute at fp32, bf16 or fp16.")
        filler = getattr(held.tokenizer, f"{baseline}_token_id")  # pad_token_id or mask_token_id
        if filler is None:
            raise InputError(f"baseline={quoted(baseline)}: this tokenizer has no {baseline} token; use the other.")
        parts = (held.module.eval(), held.takes_type_ids, held.device, held.precision, filler, held.max_batch_tokens)
        return cls(*parts, n_steps, baseline)

    @classmethod
    def of_run(cls, run: Any, n_steps: int, baseline: str) -> Integrator:
        """Return the integrator of a run's model: a fine-tuned run's network, or a feature classifier's encoder."""
        from ..tasks.classify import TextClassifier

        owner = run.vectorizer_.encoder_ if isinstance(run, TextClassifier) else run
        return cls.of(owner.network, n_steps, baseline)

    def embed(self, ids: list[int]) -> torch.Tensor:
        """(1, tokens, dim) word embeddings of `ids`."""
        return self.network.get_input_embeddings()(torch.tensor([ids], device=self.device))

    def inputs(self, item: Encoded, embeds: torch.Tensor) -> dict[str, torch.Tensor]:
        """Return the model's inputs for `embeds` (k copies of one input's word embeddings, interpolated)."""
        rows = embeds.shape[0]
        inputs = {"inputs_embeds": embeds, "attention_mask": torch.ones(rows, len(item.ids), dtype=torch.long)}
        if self.takes_type_ids:
            inputs["token_type_ids"] = torch.tensor([item.type_ids] * rows, dtype=torch.long)
        return inputs

    def call(self, inputs: dict[str, torch.Tensor], **options: Any) -> Any:
        """One forward pass that keeps the graph."""
        return call_model(self.network, inputs, self.device, self.precision, gradients=True, **options)

    def integrate(self, score: Callable[[torch.Tensor], torch.Tensor], item: Encoded) -> tuple[float, list, int]:
        """Integrated Gradients of `score(word embeddings)` over one input's tokens: its score, parts and steps.

        Steps are doubled while the parts miss completeness by over DELTA_WARNING, up to MAX_REFINEMENT times.
        """
        from captum.attr import IntegratedGradients

        special = item.encoding.special_tokens_mask
        with torch.no_grad():
            given = self.embed(item.ids)
            empty = self.embed([t if s else self.filler for t, s in zip(item.ids, special)])
            scores = score(torch.cat([given, empty])).tolist()  # the input's and the baseline's, in one pass
        steps, per_pass = self.n_steps, max(1, self.steps_budget // len(item.ids))
        while True:
            path = IntegratedGradients(score).attribute(given, empty, n_steps=steps, internal_batch_size=per_pass)
            token_scores = path[0].sum(-1).detach().double().cpu().numpy()
            miss = abs(token_scores.sum() - (scores[0] - scores[1]))
            share = miss / max(abs(scores[0] - scores[1]), 1e-12)
            if share <= DELTA_WARNING or miss <= DELTA_FLOOR or steps >= MAX_REFINEMENT * self.n_steps:
                return scores[0], text_parts(item, token_scores, scores[1], share), steps
            steps *= 2

    def result(self, target: str, score: float, texts: list[TextAttribution], steps: int) -> Attribution:
        """Return the attribution; warn when a text's attributions still miss completeness by over DELTA_WARNING.

        A miss under DELTA_FLOOR in absolute terms is none: a score that barely leaves its baseline makes any share big.
        """
        missed = [t.delta for t in texts if t.delta * abs(score - t.baseline_score) > DELTA_FLOOR]
        worst = max(missed, default=0.0)
        if worst > DELTA_WARNING:
            miss = f"by {100 * worst:.1f}% (over {100 * DELTA_WARNING:.0f}%) at {steps} steps"
            logger.warning("the attributions of the %s miss f(input) - f(baseline) %s: give more n_steps", target, miss)
        return Attribution(target, score, texts, steps, self.baseline)


def text_parts(item: Encoded, token_scores: np.ndarray, baseline_score: float, delta: float) -> list[TextAttribution]:
    """Each text's tokens and words with their scores (word pieces summed onto the whitespace words).

    A pair's special tokens go with the text before them (`[CLS]` with the first).
    """
    parts = [(item.text, item.word_spans)]
    if item.pair_text is not None:
        parts.append((item.pair_text, item.pair_word_spans or []))
    # owners[k + 1]: the text of token k, its sequence's (a special token's: the one before it; owners[0] starts)
    owners = list(accumulate(item.encoding.sequence_ids, lambda owner, seq: owner if seq is None else seq, initial=0))
    word_ids, result = item.word_ids(), []
    for part, (text, spans) in enumerate(parts):
        mine = [k for k, o in enumerate(owners[1:]) if o == part]
        words = [text[start:end] for start, end in spans]
        word_scores = np.zeros(len(words))
        for k in mine:
            if word_ids[k] is not None:
                word_scores[word_ids[k]] += token_scores[k]
        tokens = [item.tokens[k] for k in mine]
        result.append(TextAttribution(text, tokens, token_scores[mine], words, word_scores, baseline_score, delta))
    return result
