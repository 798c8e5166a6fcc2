"""Why this score? Integrated Gradients over the word-embedding layer, for the similarity of two texts.

The path runs from a baseline to the input's word embeddings: the baseline keeps `[CLS]` and `[SEP]` and puts `[PAD]`
(or `[MASK]`) in every other position. captum's `IntegratedGradients` integrates the score's gradient along it, its
steps batched as many to a pass as the encoder's token budget holds. A token's attribution is the sum over the
embedding dimensions; a word's, the sum of its word pieces (the words `embed_words` reads). Completeness: a text's
attributions add up to f(input) − f(input with that text at its baseline), and `delta` is how far they miss, as a
share of that difference.

A similarity is attributed one text at a time, the other held as it is: with both texts at their baselines the two
would be the same empty sentence (cosine 0.98 for the packaged model), and every word would only seem to lower the
score. Held one at a time, a word's share says how much it makes its text like the other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..encoder.encode import vector_head, with_prompt
from ..encoder.options import EmbedOptions, options_from
from ..encoder.runner import call_model
from ..errors import InputError, quoted

if TYPE_CHECKING:
    from ..encoder.encode import Encoder
    from ..encoder.tokenize import Encoded

logger = logging.getLogger(__name__)

DEFAULT_STEPS = 32
BASELINES = ("pad", "mask")
METRICS = ("cosine", "dot")
DELTA_WARNING = 0.05  # a share of f(input) - f(baseline): above it, more steps are needed


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
        return {
            "text": self.text,
            "tokens": self.tokens,
            "token_scores": [float(x) for x in self.token_scores],
            "words": self.words,
            "word_scores": [float(x) for x in self.word_scores],
            "baseline_score": self.baseline_score,
            "delta": self.delta,
        }


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
        Integration steps.
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
        return {
            "target": self.target,
            "score": self.score,
            "n_steps": self.n_steps,
            "baseline": self.baseline,
            "texts": [text.to_dict() for text in self.texts],
        }


def attribute_similarity(
    encoder: Encoder,
    text: str,
    other: str,
    options: EmbedOptions | None = None,
    *,
    metric: str = "cosine",
    n_steps: int = DEFAULT_STEPS,
    baseline: str = "pad",
    **kwargs: Any,
) -> Attribution:
    """Which words make two texts similar: Integrated Gradients of their similarity over both texts' tokens.

    Parameters
    ----------
    encoder : Encoder
        The encoder whose vectors are compared.
    text, other : str
        The two texts.
    options : EmbedOptions, optional
        The embedding options (layers, pooling, prompt, truncate_dim, normalize_embeddings, ...); keyword options
        replace its fields, as `Encoder.embed` takes them.
    metric : {'cosine', 'dot'}
        The similarity attributed (dot on the vectors as the options make them: unit length if they normalize).
    n_steps : int
        Integration steps (more: a smaller `delta`, a slower call).
    baseline : {'pad', 'mask'}
        The token in every content position of the baseline (`[CLS]` and `[SEP]` stay).
    **kwargs
        `EmbedOptions` fields.

    Returns
    -------
    Attribution
        Its `texts` are `text` and `other`, each attributed with the other held as it is: a text's scores add up to
        `score` minus its `baseline_score` (within its `delta`).

    Examples
    --------
    >>> from bertkit import Encoder, attribute_similarity
    >>> result = attribute_similarity(Encoder.from_pretrained(), "a great movie", "a wonderful film")
    >>> [text.words for text in result.texts]
    [['a', 'great', 'movie'], ['a', 'wonderful', 'film']]
    """
    if metric not in METRICS:
        raise InputError(f"metric={quoted(metric)}: attributions are made for {', '.join(METRICS)}.")
    resolved = _checked(encoder, options_from(options, kwargs).resolve(encoder), n_steps, baseline)
    head = vector_head(encoder, resolved)
    encoded = encoder._encode(with_prompt([text, other], resolved.prompt or ""), None, resolved)[0]

    def vectors(embeds: torch.Tensor, item: Encoded) -> torch.Tensor:
        inputs = _inputs(encoder, item, embeds)
        out = call_model(
            encoder.model, inputs, encoder.device, encoder.precision, gradients=True, output_hidden_states=True
        )
        pooler = getattr(out, "pooler_output", None)
        pooled = head.sentences(head.tokens(out.hidden_states), inputs["attention_mask"], pooler)
        if resolved.truncate_dim is not None:
            pooled = pooled[:, : resolved.truncate_dim]
        if resolved.normalize_embeddings or metric == "cosine":
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
        return pooled

    table = encoder.model.get_input_embeddings()
    with torch.no_grad():
        held = [vectors(table(torch.tensor([item.ids], device=encoder.device)), item) for item in encoded]
    texts = []
    for side, item in enumerate(encoded):
        partner = held[1 - side]
        texts.append(
            _integrate(encoder, lambda e, item=item, p=partner: (vectors(e, item) * p).sum(-1), item, n_steps, baseline)
        )
    _warn_delta(texts, f"{metric} similarity", n_steps)
    return Attribution(f"{metric} similarity", float((held[0] * held[1]).sum()), texts, n_steps, baseline)


def _checked(encoder: Encoder, resolved: EmbedOptions, n_steps: int, baseline: str) -> EmbedOptions:
    """Refuse what attributions cannot follow: windows, int8 weights, a bad step count or baseline."""
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 2:
        raise InputError(f"n_steps={n_steps!r}: give a whole number of integration steps, 2 or more.")
    if baseline not in BASELINES:
        raise InputError(f"baseline={quoted(baseline)}: give one of {', '.join(BASELINES)}.")
    if resolved.long_text == "window":
        raise InputError("long_text='window' stitches several passes; attributions read one: use 'truncate'.")
    if encoder.precision == "int8":
        raise InputError("int8 weights have no gradients: attribute with an fp32, bf16 or fp16 encoder.")
    return resolved


def _inputs(encoder: Encoder, item: Encoded, embeds: torch.Tensor) -> dict[str, torch.Tensor]:
    """Return the model's inputs for `embeds` (k copies of one text's word embeddings, interpolated)."""
    rows = embeds.shape[0]
    inputs = {"inputs_embeds": embeds, "attention_mask": torch.ones(rows, len(item.ids), dtype=torch.long)}
    if encoder._takes_type_ids:
        inputs["token_type_ids"] = torch.tensor([item.type_ids] * rows, dtype=torch.long)
    return inputs


def _integrate(
    encoder: Encoder, score: Callable[[torch.Tensor], torch.Tensor], item: Encoded, n_steps: int, baseline: str
) -> TextAttribution:
    """Integrated Gradients of `score(word embeddings)` over one text's tokens."""
    from captum.attr import IntegratedGradients

    table = encoder.model.get_input_embeddings()
    filler = encoder.tokenizer.pad_token_id if baseline == "pad" else encoder.tokenizer.mask_token_id
    if filler is None:
        raise InputError(f"baseline={quoted(baseline)}: this tokenizer has no {baseline} token; use the other.")
    special = item.encoding.special_tokens_mask
    with torch.no_grad():
        given = table(torch.tensor([item.ids], device=encoder.device))
        empty = table(torch.tensor([[t if s else filler for t, s in zip(item.ids, special)]], device=encoder.device))
        scores = float(score(given)), float(score(empty))
    steps_per_pass = max(1, encoder.runner().max_batch_tokens // len(item.ids))
    attributions, delta = IntegratedGradients(score).attribute(
        given, empty, n_steps=n_steps, internal_batch_size=steps_per_pass, return_convergence_delta=True
    )
    share = abs(float(delta)) / max(abs(scores[0] - scores[1]), 1e-12)
    return _text(item, attributions[0].sum(-1).detach().double().cpu().numpy(), scores[1], share)


def _warn_delta(texts: list[TextAttribution], target: str, n_steps: int) -> None:
    """Log a warning when a text's attributions miss completeness by more than DELTA_WARNING."""
    worst = max(text.delta for text in texts)
    if worst > DELTA_WARNING:
        logger.warning(
            "the attributions of the %s miss f(input) - f(baseline) by %.1f%% (over %.0f%%): use more steps than %d",
            target,
            100 * worst,
            100 * DELTA_WARNING,
            n_steps,
        )


def _text(item: Encoded, token_scores: np.ndarray, baseline_score: float, delta: float) -> TextAttribution:
    """One text's tokens and words with their scores (word pieces summed onto the whitespace words)."""
    words = [item.text[start:end] for start, end in item.word_spans]
    word_scores = np.zeros(len(words))
    for token, word in enumerate(item.word_ids()):
        if word is not None:
            word_scores[word] += token_scores[token]
    return TextAttribution(item.text, list(item.tokens), token_scores, words, word_scores, baseline_score, delta)
