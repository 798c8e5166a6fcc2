"""Integrated Gradients over a model's word embeddings, for any score of them: the steps, completeness, word scores.

The path runs from a baseline to the input's word embeddings: the baseline keeps `[CLS]` and `[SEP]` and puts `[PAD]`
(or `[MASK]`) in every other position. captum's `IntegratedGradients` integrates the score's gradient along it, its
steps batched as many to a pass as the model's token budget holds. A token's attribution is the sum over the
embedding dimensions; a word's, the sum of its word pieces (the words `embed_words` reads). Completeness: a text's
attributions add up to f(input) − f(input with that text at its baseline), and `delta` is how far they miss, as a
share of that difference.

A similarity is attributed one text at a time, the other held as it is: with both texts at their baselines the two
would be the same empty sentence (cosine 0.98 for the packaged model), and every word would only seem to lower the
score. Held one at a time, a word's share says how much it makes its text like the other. A run's prediction is
attributed by `tasks.attributions`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..display import text_table
from ..errors import InputError, quoted
from .network import Network
from .options import EmbedOptions, options_from
from .runner import call_model
from .tokenize import Encoded, with_prompt
from .vectors import vector_head

if TYPE_CHECKING:
    from .encode import Encoder

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

    def to_text(self) -> str:
        """Return the attribution as plain text: the score, then each text's words with their signed scores.

        What `bertkit predict --attributions` (and `answer`, `similarity`) prints on a terminal.
        """
        lines = [f"{self.target}: {self.score:.4f} ({self.n_steps} steps from a [{self.baseline.upper()}] baseline)"]
        for text in self.texts:
            added = f"{text.word_scores.sum():+.4f} (delta {100 * text.delta:.1f}%)"
            lines += ["", f"{text.text!r}: baseline {text.baseline_score:.4f}, words add {added}"]
            top = max(abs(text.word_scores), default=0.0) or 1.0
            rows = [
                {"word": word, "score": f"{score:+.4f}", "": ("+" if score > 0 else "-") * round(10 * abs(score) / top)}
                for word, score in zip(text.words, text.word_scores)
            ]
            lines.append(text_table(rows, ["word", "score", ""]))
        return "\n".join(lines)


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


METRICS = ("cosine", "dot")


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
        Integration steps, 2 to 1000 (more: a smaller `delta`, a slower call); doubled while a text's delta is over
        5 %, up to 4 times as many.
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
    model = Integrator.of(encoder.network, n_steps, baseline)
    vectors, encoded = sentence_vectors(encoder, model, options_from(options, kwargs), [text, other])
    unit = metric == "cosine"
    held = [vectors(model.embed(item.ids), item, unit).detach() for item in encoded]
    texts: list[TextAttribution] = []
    steps = 0
    for side, item in enumerate(encoded):  # the similarity of `item` read from embeddings `e` to the held partner
        similarity = lambda e, item=item, partner=held[1 - side]: (vectors(e, item, unit) * partner).sum(-1)
        _, parts, used = model.integrate(similarity, item)
        texts, steps = texts + parts, max(steps, used)
    return model.result(f"{metric} similarity", float((held[0] * held[1]).sum()), texts, steps)


def sentence_vectors(
    encoder: Encoder, model: Integrator, options: EmbedOptions, texts: list[str]
) -> tuple[Callable[[torch.Tensor, Encoded, bool], torch.Tensor], list[Encoded]]:
    """Return the vectors `options` make as a function of word embeddings (unit length on request); the texts read."""
    resolved = options.resolve(encoder)
    if resolved.long_text == "window":
        raise InputError("long_text='window' stitches several passes; attributions read one: use 'truncate'.")
    head = vector_head(encoder, resolved)
    heads = {False: head, True: dataclasses.replace(head, normalize=True)}  # cosine: unit vectors whatever the options

    def vectors(embeds: torch.Tensor, item: Encoded, unit: bool = False) -> torch.Tensor:
        inputs = model.inputs(item, embeds)
        out = model.call(inputs, output_hidden_states=True)
        pooler = getattr(out, "pooler_output", None)
        return heads[unit].sentences(heads[unit].tokens(out.hidden_states), inputs["attention_mask"], pooler)

    return vectors, encoder._encode(with_prompt(texts, resolved.prompt or ""), None, resolved)[0]
