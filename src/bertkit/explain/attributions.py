"""Why this score? Integrated Gradients over the word-embedding layer: two texts' similarity, a run's prediction.

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

import functools
import inspect
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
    from ..tasks.finetuned import FineTunedClassifier

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
    resolved = options_from(options, kwargs).resolve(encoder)
    if resolved.long_text == "window":
        raise InputError("long_text='window' stitches several passes; attributions read one: use 'truncate'.")
    model = _Model.of(encoder, encoder.model, n_steps, baseline)
    head = vector_head(encoder, resolved)
    encoded = encoder._encode(with_prompt([text, other], resolved.prompt or ""), None, resolved)[0]

    def vectors(embeds: torch.Tensor, item: Encoded) -> torch.Tensor:
        inputs = model.inputs(item, embeds)
        out = model.call(inputs, output_hidden_states=True)
        pooler = getattr(out, "pooler_output", None)
        pooled = head.sentences(head.tokens(out.hidden_states), inputs["attention_mask"], pooler)
        if resolved.truncate_dim is not None:
            pooled = pooled[:, : resolved.truncate_dim]
        if resolved.normalize_embeddings or metric == "cosine":
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
        return pooled

    held = [vectors(model.embed(item.ids), item).detach() for item in encoded]
    texts = []
    for side, item in enumerate(encoded):
        texts += model.integrate(functools.partial(_against, vectors, item, held[1 - side]), item)
    return model.result(f"{metric} similarity", float((held[0] * held[1]).sum()), texts)


def _against(
    vectors: Callable[[torch.Tensor, Encoded], torch.Tensor], item: Encoded, partner: torch.Tensor, e: torch.Tensor
) -> torch.Tensor:
    """Return the similarity of `item` read from embeddings `e` to a held partner vector."""
    return (vectors(e, item) * partner).sum(-1)


def attribute_prediction(
    run: FineTunedClassifier,
    text: str,
    text_pair: str | None = None,
    *,
    target: str | None = None,
    n_steps: int = DEFAULT_STEPS,
    baseline: str = "pad",
) -> Attribution:
    """Which words made a fine-tuned run's prediction: Integrated Gradients of its logit over the input's tokens.

    Parameters
    ----------
    run : FineTunedClassifier
        A fine-tuned text or pair run (classifier, multi-label classifier, regressor or reranker).
    text : str
        The text (a pair run: the first text).
    text_pair : str, optional
        A pair run's second text (a reranker: the document); its tokens are attributed as a text of their own.
    target : str, optional
        The class whose logit is attributed (default: the predicted one; a regressor: its score).
    n_steps : int
        Integration steps.
    baseline : {'pad', 'mask'}
        The token in every content position of the baseline (`[CLS]` and `[SEP]` stay).

    Returns
    -------
    Attribution
        `score` is the attributed logit (or score); `texts` the text, and the pair's second text.

    Examples
    --------
    >>> from bertkit import attribute_prediction, load_run
    >>> run = load_run("runs/sst2")  # doctest: +SKIP
    >>> attribute_prediction(run, "a gorgeous, witty film").texts[0].words  # doctest: +SKIP
    ['a', 'gorgeous,', 'witty', 'film']
    """
    model = _Model.of(run, run.model, n_steps, baseline)
    if (text_pair is not None) != bool(run.takes_pairs):
        raise InputError(
            "this run reads text pairs: give text_pair." if run.takes_pairs else "this run reads single texts."
        )
    item = run.encode([text], None if text_pair is None else [text_pair])[0]
    if item.windows and len(item.windows) > 1:
        raise InputError(
            "this text is read in windows (long_text='window'); attributions read one: load the run "
            "with long_text='truncate'."
        )

    def logits(embeds: torch.Tensor) -> torch.Tensor:
        return model.call(model.inputs(item, embeds)).logits.float()

    given = logits(model.embed(item.ids))[0].detach()
    if run.problem == "regression":
        index, name = 0, "score"
    elif target is None:
        index = int(given.argmax())
        name = f"logit of {run.classes_[index]!r}"
    elif target in set(map(str, run.classes_)):
        index = [str(c) for c in run.classes_].index(target)
        name = f"logit of {target!r}"
    else:
        raise InputError(f"target={quoted(target)}: this run's classes are {', '.join(map(str, run.classes_))}.")
    texts = model.integrate(lambda e: logits(e)[:, index], item)
    return model.result(name, float(given[index]), texts)


@dataclass(frozen=True)
class _Model:
    """What an attribution needs of a model: its network, word embeddings, tokenizer, device and token budget."""

    network: torch.nn.Module
    takes_type_ids: bool
    device: torch.device
    precision: str
    filler: int
    steps_budget: int  # padded tokens one pass of interpolation steps may hold
    n_steps: int
    baseline: str

    @classmethod
    def of(cls, owner: Any, network: torch.nn.Module, n_steps: int, baseline: str) -> _Model:
        """Check what the call asks for and take the model's parts (`owner`: an Encoder or a fine-tuned run)."""
        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 2:
            raise InputError(f"n_steps={n_steps!r}: give a whole number of integration steps, 2 or more.")
        if baseline not in BASELINES:
            raise InputError(f"baseline={quoted(baseline)}: give one of {', '.join(BASELINES)}.")
        if owner.precision == "int8":
            raise InputError("int8 weights have no gradients: attribute at fp32, bf16 or fp16.")
        tokenizer = owner.tokenizer
        filler = tokenizer.pad_token_id if baseline == "pad" else tokenizer.mask_token_id
        if filler is None:
            raise InputError(f"baseline={quoted(baseline)}: this tokenizer has no {baseline} token; use the other.")
        takes_type_ids = "token_type_ids" in inspect.signature(network.forward).parameters
        budget = owner.runner().max_batch_tokens
        return cls(network.eval(), takes_type_ids, owner.device, owner.precision, filler, budget, n_steps, baseline)

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

    def integrate(self, score: Callable[[torch.Tensor], torch.Tensor], item: Encoded) -> list[TextAttribution]:
        """Integrated Gradients of `score(word embeddings)` over one input's tokens (a pair: one part per text)."""
        from captum.attr import IntegratedGradients

        special = item.encoding.special_tokens_mask
        with torch.no_grad():
            given = self.embed(item.ids)
            empty = self.embed([t if s else self.filler for t, s in zip(item.ids, special)])
        scores = float(score(given).detach()), float(score(empty).detach())
        steps_per_pass = max(1, self.steps_budget // len(item.ids))
        attributions = IntegratedGradients(score).attribute(
            given, empty, n_steps=self.n_steps, internal_batch_size=steps_per_pass
        )
        token_scores = attributions[0].sum(-1).detach().double().cpu().numpy()
        share = abs(token_scores.sum() - (scores[0] - scores[1])) / max(abs(scores[0] - scores[1]), 1e-12)
        return _texts(item, token_scores, scores[1], share)

    def result(self, target: str, score: float, texts: list[TextAttribution]) -> Attribution:
        """Return the attribution; warn when a text's attributions miss completeness by over DELTA_WARNING."""
        worst = max(text.delta for text in texts)
        if worst > DELTA_WARNING:
            logger.warning(
                "the attributions of the %s miss f(input) - f(baseline) by %.1f%% (over %.0f%%): use more steps "
                "than %d",
                target,
                100 * worst,
                100 * DELTA_WARNING,
                self.n_steps,
            )
        return Attribution(target, score, texts, self.n_steps, self.baseline)


def _texts(item: Encoded, token_scores: np.ndarray, baseline_score: float, delta: float) -> list[TextAttribution]:
    """Each text's tokens and words with their scores (word pieces summed onto the whitespace words).

    A pair's special tokens go with the text before them (`[CLS]` with the first).
    """
    parts = [(item.text, item.word_spans)]
    if item.pair_text is not None:
        parts.append((item.pair_text, item.pair_word_spans or []))
    owner, owners = 0, []
    for sequence in item.encoding.sequence_ids:
        owner = owner if sequence is None else sequence
        owners.append(owner)
    result = []
    for part, (text, spans) in enumerate(parts):
        mine = [k for k, o in enumerate(owners) if o == part]
        words = [text[start:end] for start, end in spans]
        word_scores = np.zeros(len(words))
        word_ids = item.word_ids()
        for k in mine:
            if word_ids[k] is not None:
                word_scores[word_ids[k]] += token_scores[k]
        tokens = [item.tokens[k] for k in mine]
        result.append(TextAttribution(text, tokens, token_scores[mine], words, word_scores, baseline_score, delta))
    return result
