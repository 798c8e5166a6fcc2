"""Why this prediction? The score each kind of run is attributed by: a logit, a probability, an answer, an entity.

Integrated Gradients itself (the path, the steps, completeness, word scores) and two texts' similarity are
`encoder.attribution`; a run reaches this module through its `explain` method. A run is told by what it does (answers,
tags, or reads vectors through a frozen encoder), not by its class: the runs' modules import this one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..encoder.attribution import DEFAULT_STEPS, Attribution, Integrator, TextAttribution, sentence_vectors
from ..encoder.tokenize import Encoded
from ..errors import InputError, quoted

if TYPE_CHECKING:
    from .classify import TextClassifier
    from .finetuned import FineTunedClassifier
    from .qa import FineTunedQA
    from .tagger import FineTunedTagger

__all__ = ["Attribution", "TextAttribution", "attribute_prediction"]


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
    run : FineTunedClassifier, TextClassifier, FineTunedQA or FineTunedTagger
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
    return prediction_target(run, text, text_pair, target, integrator_of(run, n_steps, baseline)).attribute()


class ExplainsPredictions:
    """What every run has: `explain`, which words made its prediction (`attribute_prediction` on the run)."""

    def explain(
        self,
        text: str,
        text_pair: str | None = None,
        *,
        target: str | None = None,
        n_steps: int = DEFAULT_STEPS,
        baseline: str = "pad",
    ) -> Attribution:
        """Which words made this run's prediction: Integrated Gradients of its score over the input's tokens.

        `attribute_prediction(self, ...)`: `text_pair` is a pair run's second text (a QA run: the context),
        `target` the class (a tagger: the entity's text) to attribute instead of the predicted one.

        Returns
        -------
        Attribution
            The attributed score and each text's word scores; `to_dict()` is its JSON.
        """
        run: Any = self  # a run class that mixes this in
        return attribute_prediction(run, text, text_pair, target=target, n_steps=n_steps, baseline=baseline)


def integrator_of(run: Any, n_steps: int, baseline: str) -> Integrator:
    """Return the integrator of a run's model: a fine-tuned run's network, or a feature classifier's encoder's."""
    owner = run.vectorizer_.encoder_ if _reads_vectors(run) else run
    return Integrator.of(owner.network, n_steps, baseline)


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
    if hasattr(run, "answer"):
        if text_pair is None or target is not None:
            raise InputError("a question-answering run attributes its answer: give the question and its context.")
        return _answer_target(run, text, text_pair, integrator)
    tags = hasattr(run, "token_logits")
    pairs = not (_reads_vectors(run) or tags) and bool(run.takes_pairs)
    if (text_pair is not None) != pairs:
        raise InputError("this run reads text pairs: give text_pair." if pairs else "this run reads single texts.")
    if _reads_vectors(run):
        return _feature_target(run, text, target, integrator)
    if tags:
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


def _reads_vectors(run: Any) -> bool:
    """Say whether `run` is a feature classifier (`bertkit train`): a head on the vectors of a frozen encoder."""
    return hasattr(type(run), "vectorizer_")  # on the class: an unfitted classifier's property says so itself


def _answer_target(run: FineTunedQA, question: str, context: str, integrator: Integrator) -> Target:
    """Return a QA run's answer score: its first token's start logit plus its last token's end logit.

    That is the score `answer` ranks spans by, in the window the answer came from; "no answer": the [CLS] start + end
    logit of its window.
    """
    from .answer_options import AnswerOptions
    from .answer_spans import character_span, window_spans

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
    question = windows.questions[0]  # as the windows read it: stripped, cut to its token limit
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
    from .finetune.examples import split_words

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
    vectors, (item,) = sentence_vectors(run.vectorizer_.encoder_, integrator, run.vectorizer_.options_, [text])
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
