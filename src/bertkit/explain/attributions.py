"""Why this score? The score functions attributions integrate: two texts' similarity, each kind of run's prediction.

A similarity is attributed one text at a time, the other held as it is: with both texts at their baselines the two
would be the same empty sentence (cosine 0.98 for the packaged model), and every word would only seem to lower the
score. Held one at a time, a word's share says how much it makes its text like the other. Integrated Gradients itself
(the path, the steps, completeness, word scores) is `integrated.Integrator`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..encoder.encode import vector_head, with_prompt
from ..encoder.options import EmbedOptions, options_from
from ..encoder.tokenize import Encoded
from ..errors import InputError, quoted
from .integrated import DEFAULT_STEPS, Attribution, Integrator, TextAttribution

if TYPE_CHECKING:
    from ..encoder.encode import Encoder
    from ..tasks.classify import TextClassifier
    from ..tasks.finetuned import FineTunedClassifier
    from ..tasks.qa import FineTunedQA
    from ..tasks.tagger import FineTunedTagger

__all__ = ["Attribution", "TextAttribution", "attribute_prediction", "attribute_similarity"]

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
    vectors, encoded = _sentence_vectors(encoder, model, options_from(options, kwargs), [text, other])
    unit = metric == "cosine"
    held = [vectors(model.embed(item.ids), item, unit).detach() for item in encoded]
    texts: list[TextAttribution] = []
    steps = 0
    for side, item in enumerate(encoded):  # the similarity of `item` read from embeddings `e` to the held partner
        similarity = lambda e, item=item, partner=held[1 - side]: (vectors(e, item, unit) * partner).sum(-1)
        _, parts, used = model.integrate(similarity, item)
        texts, steps = texts + parts, max(steps, used)
    return model.result(f"{metric} similarity", float((held[0] * held[1]).sum()), texts, steps)


def _sentence_vectors(
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


def attribute_prediction(
    run: FineTunedClassifier | TextClassifier | FineTunedQA | FineTunedTagger,
    text: str,
    text_pair: str | None = None,
    *,
    target: str | None = None,
    n_steps: int = DEFAULT_STEPS,
    baseline: str = "pad",
) -> Attribution:
    """Which words made a run's prediction: Integrated Gradients of its score over the input's tokens.

    Parameters
    ----------
    run : FineTunedClassifier or TextClassifier
        A fine-tuned text or pair run (classifier, multi-label classifier, regressor or reranker): its logit is
        attributed; a feature classifier (`bertkit train`): its class probability, through its frozen encoder,
        scaler and logistic regression; a question-answering run: its answer's start + end logit; or a tagger:
        one entity's score (the mean of its words' tag probabilities, as `predict` gives it).
    text : str
        The text (a pair run: the first text; a QA run: the question).
    text_pair : str, optional
        A pair run's second text (a reranker: the document; a QA run: the context); its tokens are attributed as a
        text of their own.
    target : str, optional
        The class whose logit (probability) is attributed (default: the predicted one; a regressor: its score); a
        tagger: the entity's text (default: its first entity).
    n_steps : int
        Integration steps, 2 to 1000; doubled while a text's delta is over 5 %, up to 4 times as many.
    baseline : {'pad', 'mask'}
        The token in every content position of the baseline (`[CLS]` and `[SEP]` stay).

    Returns
    -------
    Attribution
        `score` is the attributed logit, probability or score; `texts` the text, and the pair's second text.

    Examples
    --------
    >>> from bertkit import attribute_prediction, load_run
    >>> run = load_run("runs/sst2")  # doctest: +SKIP
    >>> attribute_prediction(run, "a gorgeous, witty film").texts[0].words  # doctest: +SKIP
    ['a', 'gorgeous,', 'witty', 'film']
    """
    return prediction_target(run, text, text_pair, target, Integrator.of_run(run, n_steps, baseline)).attribute()


@dataclass(frozen=True)
class Target:
    """A run's score as a function of one input's word embeddings: what `attribute_prediction` integrates."""

    name: str
    item: Encoded
    score: Callable[[torch.Tensor], torch.Tensor]  # (k, tokens, dim) word embeddings → (k,) scores
    integrator: Integrator

    def attribute(self) -> Attribution:
        """Integrated Gradients of the score over the input's tokens."""
        return self.integrator.result(self.name, *self.integrator.integrate(self.score, self.item))


def prediction_target(run: Any, text: str, text_pair: str | None, target: str | None, integrator: Integrator) -> Target:
    """Return the score a run's prediction is attributed by (see `attribute_prediction`), on `integrator`'s model."""
    from ..tasks.classify import TextClassifier
    from ..tasks.qa import FineTunedQA
    from ..tasks.tagger import FineTunedTagger

    if isinstance(run, FineTunedQA):
        if text_pair is None or target is not None:
            raise InputError("a question-answering run attributes its answer: give the question and its context.")
        return _answer_target(run, text, text_pair, integrator)
    pairs = not isinstance(run, (TextClassifier, FineTunedTagger)) and bool(run.takes_pairs)
    if (text_pair is not None) != pairs:
        raise InputError("this run reads text pairs: give text_pair." if pairs else "this run reads single texts.")
    if isinstance(run, TextClassifier):
        return _feature_target(run, text, target, integrator)
    if isinstance(run, FineTunedTagger):
        return _entity_target(run, text, target, integrator)
    item = run.encode([text], None if text_pair is None else [text_pair])[0]
    if item.windows and len(item.windows) > 1:
        raise InputError(
            "this text is read in windows (long_text='window'); attributions read one: load the run "
            "with long_text='truncate'."
        )

    def logits(embeds: torch.Tensor) -> torch.Tensor:
        return integrator.call(integrator.inputs(item, embeds)).logits.float()

    if run.problem == "regression":
        index, name = 0, "score"
    else:
        index = _class_index(run.classes_, target, lambda: logits(integrator.embed(item.ids)))
        name = f"logit of {str(run.classes_[index])!r}"
    return Target(name, item, lambda e: logits(e)[:, index], integrator)


def _answer_target(run: FineTunedQA, question: str, context: str, integrator: Integrator) -> Target:
    """Return a QA run's answer score: its first token's start logit plus its last token's end logit.

    That is the score `answer` ranks spans by, in the window the answer came from; "no answer": the [CLS] start + end
    logit of its window.
    """
    from ..tasks.qa import AnswerOptions, character_span, window_spans

    windows = run.windows([question], [context])
    side, parts, logits = windows.context_side, windows.parts[0], run.outputs(windows.rows())
    best = run.answer(question, context)
    cls = [w.ids.index(run.tokenizer.cls_token_id) if run.tokenizer.cls_token_id in w.ids else 0 for w in parts]
    if best["answer"]:
        _, k, first, last = max(
            (score, k, first, last)
            for k, (window, (start, end)) in enumerate(zip(parts, logits))
            for score, first, last in window_spans(start, end, window, side, AnswerOptions.max_answer_len)
            if character_span(window, side, first, last, True) == (best["start"], best["end"])
        )
        name = f"start + end logit of the answer {best['answer']!r}"
    else:
        k = min(range(len(parts)), key=lambda j: logits[j][0][cls[j]] + logits[j][1][cls[j]])
        first = last = cls[k]
        name = "start + end logit of no answer ([CLS])"
    texts = (question, context) if side == 1 else (context, question)
    item = Encoded(parts[k], texts[0], pair_text=texts[1])

    def span_score(embeds: torch.Tensor) -> torch.Tensor:
        out = integrator.call(integrator.inputs(item, embeds))
        return out.start_logits[:, first].float() + out.end_logits[:, last].float()

    return Target(name, item, span_score, integrator)


def _entity_target(run: FineTunedTagger, text: str, target: str | None, integrator: Integrator) -> Target:
    """Return a tagger's entity score: the mean over its words of the tag's probability at each first sub-token.

    That is `Entity.score`; `target` names the entity by its text (default: the first found).
    """
    from ..encoder.tokenize import word_starts
    from ..tasks.finetune.examples import split_words

    entities = run.predict([text])[0]
    chosen = next((e for e in entities if target is None or e.text == target), None)
    if chosen is None:
        found = ", ".join(repr(e.text) for e in entities) or "none"
        raise InputError(
            f"no entity {quoted(target)} in this text (entities found: {found})."
            if target
            else "this text has no entities to attribute."
        )
    item = run.encode([[word for word, _, _ in split_words(text)]])[0]  # type: ignore[list-item]
    if item.windows and len(item.windows) > 1:
        raise InputError("this text is read in windows; attributions read one: give a shorter text.")
    starts = word_starts(item.word_ids())
    positions = [starts.index(word) for word in range(chosen.start, chosen.end)]  # type: ignore[arg-type]
    tags = [int(torch.as_tensor(logits).argmax()) for logits in run.token_logits([item])[0][positions]]

    def entity_score(embeds: torch.Tensor) -> torch.Tensor:
        probabilities = torch.softmax(integrator.call(integrator.inputs(item, embeds)).logits.float(), dim=-1)
        return probabilities[:, positions, tags].mean(-1)

    return Target(f"score of the {chosen.type} entity {chosen.text!r}", item, entity_score, integrator)


def _class_index(classes: Any, target: str | None, scores: Callable[[], torch.Tensor]) -> int:
    """Return the position of class `target` (named as a string) among a run's classes; None: the best of `scores()`."""
    if target is None:
        return int(scores()[0].detach().argmax())
    names = [str(c) for c in classes]
    if target not in names:
        raise InputError(f"target={quoted(target)}: this run's classes are {', '.join(names)}.")
    return names.index(target)


def _feature_target(run: TextClassifier, text: str, target: str | None, integrator: Integrator) -> Target:
    """Return a feature classifier's class probability.

    Its frozen encoder's vectors, then the fitted scaler and logistic regression as tensor operations, so that the
    gradient reaches the tokens.
    """
    probabilities = _probabilities(run)
    vectors, (item,) = _sentence_vectors(run.vectorizer_.encoder_, integrator, run.vectorizer_.options_, [text])
    index = _class_index(run.classes_, target, lambda: probabilities(vectors(integrator.embed(item.ids), item, False)))
    score = lambda e: probabilities(vectors(e, item, False))[:, index]
    return Target(f"probability of {str(run.classes_[index])!r}", item, score, integrator)


def _probabilities(run: TextClassifier) -> Callable[[torch.Tensor], torch.Tensor]:
    """Return the run's fitted scaler and logistic regression as tensor operations: vectors → probabilities."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    *scalers, classifier = [step for _, step in run.head_.steps]
    if not isinstance(classifier, LogisticRegression) or not all(isinstance(s, StandardScaler) for s in scalers):
        raise InputError(
            f"attributions follow a standard scaler and a logistic regression; this run's head is "
            f"{' → '.join(type(step).__name__ for _, step in run.head_.steps)}."
        )

    tensor = lambda values: torch.as_tensor(np.asarray(values), dtype=torch.float32)
    shifts = [(tensor(s.mean_ if s.with_mean else 0.0), tensor(s.scale_ if s.with_std else 1.0)) for s in scalers]
    weights, bias = tensor(classifier.coef_), tensor(classifier.intercept_)

    def probabilities(vectors: torch.Tensor) -> torch.Tensor:
        for mean, scale in shifts:
            vectors = (vectors.float() - mean) / scale
        logits = vectors @ weights.T + bias
        if logits.shape[1] == 1:  # two classes: one logit, for the second
            return torch.cat([torch.sigmoid(-logits), torch.sigmoid(logits)], dim=1)
        return torch.softmax(logits, dim=1)

    return probabilities
