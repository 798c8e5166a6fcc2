"""`FineTunedQA`: extractive question answering on the one runner, with run_qa.py's pre- and post-processing.

Contexts are read in the tokenizer's overflow windows; each window's best `N_BEST` start and end tokens make the
candidate spans, merged across windows; the null answer scores the smallest [CLS] start + end logit (SQuAD v2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..encoder import tokenize as tok
from ..encoder.runner import Row
from ..errors import InputError, quoted
from ..io.squad import QAExample, read_squad
from .answer_options import QUESTION_TOKENS, AnswerOptions
from .answer_spans import N_BEST, character_span, window_spans
from .finetuned_model import EVAL_BATCH_SIZE, FineTuned
from .runs import KIND_QA
from .squad import SquadReport, squad_scores

DOC_STRIDE = 128  # tokens two windows share (run_qa's doc_stride), at most half the room a window has for context
NO_ANSWER = float("inf")  # the null-score difference of a question with no span at all


@dataclass
class Windows:
    """Questions tokenized for the model: each question's windows over its context (tokenizers `Encoding`s)."""

    questions: list[str]
    contexts: list[str]
    parts: list[list[Any]]
    context_side: int  # which sequence of a window is the context: 1 (question first) or 0 (context first)

    @property
    def count(self) -> int:
        """The windows of every question."""
        return sum(len(p) for p in self.parts)

    @property
    def tokens(self) -> int:
        """The tokens of every window."""
        return sum(len(w.ids) for p in self.parts for w in p)

    def rows(self) -> list[Row]:
        """Return every window as a runner row (ids and type ids), in order."""
        return [Row(w.ids, w.type_ids) for p in self.parts for w in p]


def qa_windows(
    tokenizer: Any,
    questions: Sequence[str],
    contexts: Sequence[str],
    max_length: int,
    doc_stride: int | None = None,
    max_question_len: int = QUESTION_TOKENS,
) -> Windows:
    """Tokenize each (question, context) in overflow windows sharing `doc_stride` tokens, the question cut short."""
    questions, contexts = tok.check_texts(questions, "questions"), tok.check_texts(contexts, "contexts")
    if len(questions) != len(contexts):
        raise InputError(f"{len(questions)} questions but {len(contexts)} contexts; give one context per question.")
    blank = [
        f"{name} {i}"
        for name, given in (("question", questions), ("context", contexts))
        for i, text in enumerate(given)
        if not text.strip()
    ]
    if blank:
        raise InputError(f"{blank[0]} is empty or blank; every question needs words, and a context to answer from.")
    room = max_length - tokenizer.num_special_tokens_to_add(pair=True)  # tokens for the question and the context
    stride = min(DOC_STRIDE, room // 2) if doc_stride is None else doc_stride
    if isinstance(stride, bool) or not isinstance(stride, int) or not 0 <= stride <= room // 2:
        raise InputError(
            f"doc_stride={stride!r}: give 0 to {room // 2} tokens shared by two windows (at most half of the "
            f"{room} tokens a window of {max_length} holds besides its special tokens)."
        )
    keep = max(1, min(max_question_len, room // 2))
    stripped = [q.lstrip() for q in questions]
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    alone = tok.encode(tokenizer, stripped, max_length=keep + specials)  # a question is truncated as any text is
    kept, strides = [], []
    for question, item in zip(stripped, alone):
        end = tok.content_bounds(item.encoding.special_tokens_mask)[1]
        kept.append(question[: item.encoding.offsets[end - 1][1]] if item.truncated else question)
        strides.append(max(0, min(stride, room - min(item.full_length - specials, keep) - 1)))  # long: less overlap
    left = getattr(tokenizer, "padding_side", "right") == "left"
    parts: list[list[Any]] = [[] for _ in questions]
    for shared in sorted(set(strides)):
        rows = [i for i, s in enumerate(strides) if s == shared]
        first = [contexts[i] if left else kept[i] for i in rows]
        second = [kept[i] if left else contexts[i] for i in rows]
        side = "first" if left else "second"
        encoded = tok.encode(
            tokenizer, first, second, max_length=max_length, long_text="window", stride=shared, window_side=side
        )
        for i, item in zip(rows, encoded):
            parts[i] = item.parts
    return Windows(kept, contexts, parts, 0 if left else 1)


@dataclass
class Candidates:
    """A question's scored spans, {(char start, char end): (logit, window)}, and its null answer's logit and window."""

    spans: dict[tuple[int, int], tuple[float, int]]
    null: float
    null_window: int

    def best(self) -> tuple[tuple[int, int], float, int] | None:
        """Return the best span with its logit and window; None without a span."""
        if not self.spans:
            return None
        span = max(self.spans, key=lambda s: self.spans[s][0])
        return span, *self.spans[span]


def _softmax(values: list[float]) -> np.ndarray:
    shifted = np.exp(np.asarray(values, dtype=np.float64) - max(values))
    return shifted / shifted.sum()


class FineTunedQA(FineTuned):
    """A fine-tuned extractive question-answering model: `answer` finds each answer's span in its context.

    Examples
    --------
    >>> qa = bertkit.load_run("runs/qa")  # doctest: +SKIP
    >>> qa.answer("Who rejects the call?", "EU rejects German call to boycott British lamb .")  # doctest: +SKIP
    {'answer': 'EU', 'score': 0.97, 'start': 0, 'end': 2}
    """

    KIND = KIND_QA
    AUTO_CLASS = "AutoModelForQuestionAnswering"
    OUTPUTS = ("start_logits", "end_logits")
    _threshold: float | None = None

    @property
    def doc_stride(self) -> int | None:
        """The tokens two windows share, as in training (None: the default)."""
        return self.record_.get("data", {}).get("doc_stride")

    @property
    def negatives(self) -> bool:
        """Whether the run learned unanswerable questions (SQuAD v2): then it predicts "no answer" too."""
        return bool(self.record_.get("data", {}).get("negatives", False))

    @property
    def null_threshold(self) -> float:
        """How much the null score must beat the best span's (logits) for "no answer": chosen on dev in training."""
        if self._threshold is not None:
            return self._threshold
        return float(self.record_.get("metrics", {}).get("null_threshold", 0.0))

    @null_threshold.setter
    def null_threshold(self, value: float) -> None:
        self._threshold = float(value)

    def facts(self) -> dict[str, str]:
        """Say what this run is, in a few lines, its labels being answer spans."""
        facts = super().facts()
        facts["labels"] = "answer spans" + (" or no answer" if self.negatives else "")
        return facts

    def windows(
        self, questions: Sequence[str], contexts: Sequence[str], options: AnswerOptions = AnswerOptions()
    ) -> Windows:
        """Tokenize the windows the model reads (`qa_windows` at this run's length and stride), and nothing more."""
        length = self.max_length if options.max_seq_len is None else min(options.max_seq_len, self.max_length)
        stride = options.doc_stride
        if stride is None and self.doc_stride is not None:  # the run's, within a shorter window's half
            stride = min(self.doc_stride, (length - self.tokenizer.num_special_tokens_to_add(pair=True)) // 2)
        return qa_windows(self.tokenizer, questions, contexts, length, stride, options.max_question_len)

    def candidates(
        self, windows: Windows, options: AnswerOptions = AnswerOptions(), batch_size: int = EVAL_BATCH_SIZE
    ) -> list[Candidates]:
        """Every window through the runner in token-budget passes; each question's spans merged over its windows."""
        logits = self.outputs(windows.rows(), batch_size)
        return self._merge(windows, logits, options.max_answer_len, options.align_to_words)

    def _merge(self, windows: Windows, logits: list, max_answer_len: int, align: bool) -> list[Candidates]:
        rows, cls_id, side = iter(logits), self.tokenizer.cls_token_id, windows.context_side
        found = []
        for parts in windows.parts:
            spans: dict[tuple[int, int], tuple[float, int]] = {}
            null, null_window = np.inf, 0
            for k, window in enumerate(parts):
                start, end = next(rows)
                cls = window.ids.index(cls_id) if cls_id in window.ids else 0
                if start[cls] + end[cls] < null:
                    null, null_window = float(start[cls] + end[cls]), k
                for score, first, last in window_spans(start, end, window, side, max_answer_len):
                    span = character_span(window, side, first, last, align)
                    if span not in spans or spans[span][0] < score:
                        spans[span] = (score, k)
            found.append(Candidates(spans, null, null_window))
        return found

    def answer(
        self,
        question: str | Sequence[str],
        context: str | Sequence[str],
        options: AnswerOptions | None = None,
        *,
        batch_size: int = EVAL_BATCH_SIZE,
        **parameters: Any,
    ) -> Any:
        """Answer each question from its context, as transformers' question-answering pipeline does.

        Parameters
        ----------
        question : str or list of str
            One question, or several.
        context : str or list of str
            The text each answer is found in: one per question, or one for all of them.
        options : AnswerOptions, optional
            How to answer; `parameters` (`top_k=3`, `max_answer_len=`, ...: `AnswerOptions`' fields) replace its
            fields, as the pipeline's keywords.
        batch_size : int
            Windows per forward pass at most (within the token budget).
        **parameters
            `AnswerOptions`' fields.

        Returns
        -------
        dict or list
            `{answer, score, start, end}` (character offsets into the context) for one question and `top_k=1`; a
            list of them for `top_k > 1`; for a list of questions, a list of those.
        """
        for name, given in (("question", question), ("context", context)):
            if not isinstance(given, (str, Iterable)):  # a list, an array, a pandas Series
                raise InputError(f"{name}={quoted(given)}: give a string, or a list of them.")
        options = dataclasses.replace(options or AnswerOptions(), **parameters)
        single = isinstance(question, str)
        questions: list[str] = [question] if isinstance(question, str) else list(question)
        contexts = [context] * len(questions) if isinstance(context, str) else list(context)
        found = self.ranked(self.windows(questions, contexts, options), options, batch_size)
        shaped = [answers[0] if options.top_k == 1 else answers for answers in found]
        return shaped[0] if single else shaped

    def ranked(
        self, windows: Windows, options: AnswerOptions = AnswerOptions(), batch_size: int = EVAL_BATCH_SIZE
    ) -> list[list[dict]]:
        """Each question's `top_k` answers, best first: what `answer` returns, before it is shaped."""
        found = self.candidates(windows, options, batch_size)
        impossible = options.handle_impossible_answer
        impossible = self.negatives if impossible is None else impossible
        return [self._rank(c, f, options.top_k, impossible) for c, f in zip(windows.contexts, found)]

    def _rank(self, context: str, found: Candidates, top_k: int, handle_impossible: bool) -> list[dict]:
        spans = sorted(found.spans.items(), key=lambda item: -item[1][0])[: max(top_k, N_BEST)]
        logits = [score for _, (score, _) in spans]
        entries = [(context[s:e], s, e) for (s, e), _ in spans]
        if handle_impossible or not spans:
            logits.append(found.null - self.null_threshold if spans else 0.0)
            entries.append(("", 0, 0))
        shares = _softmax(logits)
        order = sorted(range(len(entries)), key=lambda i: -shares[i])[:top_k]
        return [
            {"answer": entries[i][0], "score": float(shares[i]), "start": entries[i][1], "end": entries[i][2]}
            for i in order
        ]

    def explanation(self, question: str, context: str) -> dict:
        """Explain one answer as the explainer page draws it.

        The answer, the window it came from, that window's start and end probabilities over its context tokens
        (softmax over them and [CLS]), and the null score.
        """
        windows = self.windows([question], [context])
        logits = self.outputs(windows.rows())
        found = self._merge(windows, logits, AnswerOptions.max_answer_len, True)[0]
        best = self._rank(context, found, 1, self.negatives)[0]
        k = found.spans[(best["start"], best["end"])][1] if best["answer"] else found.null_window
        window, (start, end) = windows.parts[0][k], logits[k]
        keep = [i for i, s in enumerate(window.sequence_ids) if s == windows.context_side]
        cls = window.ids.index(self.tokenizer.cls_token_id) if self.tokenizer.cls_token_id in window.ids else 0
        p_start, p_end = (_softmax([float(x[i]) for i in [cls, *keep]]) for x in (start, end))
        return {
            "kind": "qa",
            "question": windows.questions[0],
            "context": context,
            "answer": best,
            "window": k,
            "windows": len(windows.parts[0]),
            "span": [window.offsets[keep[0]][0], window.offsets[keep[-1]][1]] if keep else [0, 0],
            "tokens": [window.tokens[i] for i in keep],
            "start": [round(float(p), 4) for p in p_start[1:]],
            "end": [round(float(p), 4) for p in p_end[1:]],
            "null_score": round(found.null, 4),
            "null_probability": round(float(p_start[0] * p_end[0]), 4),
            "threshold": round(self.null_threshold, 4),
        }

    def predictions(
        self, examples: Sequence[QAExample], batch_size: int = EVAL_BATCH_SIZE
    ) -> tuple[dict[str, str], dict[str, str], dict[str, float]]:
        """Predict, for each question id, the answer, the best span, and the no-answer score.

        The answer as SQuAD's prediction file has it ("" for no answer), the best span whatever the null score, and
        the null score minus the best span's (the official script's no-answer score).
        """
        windows = self.windows([e.question for e in examples], [e.context for e in examples])
        answers, spans, null_diff = {}, {}, {}
        for example, found in zip(examples, self.candidates(windows, batch_size=batch_size)):
            best = found.best()
            text = example.context[best[0][0] : best[0][1]] if best else ""
            null_diff[example.id] = found.null - best[1] if best else NO_ANSWER
            spans[example.id] = text
            answers[example.id] = "" if self.negatives and null_diff[example.id] > self.null_threshold else text
        return answers, spans, null_diff

    def evaluate(self, inputs: Any, labels: Any = None) -> Any:
        """Score exact match and F1 by the official SQuAD v2.0 rules: what `bertkit evaluate` prints.

        With unanswerable questions, HasAns / NoAns and the best threshold too.

        Parameters
        ----------
        inputs : str, Path or list of QAExample
            A SQuAD JSON / JSONL file, or its questions (`bertkit.io.squad.read_squad`).
        labels : None
            Unused: the gold answers are in the data.

        Returns
        -------
        EvaluationReport
            The official script's keys (exact, f1, total, HasAns_*, NoAns_*, best_*), and `threshold`.
        """
        examples = read_squad(inputs).examples if isinstance(inputs, (str, Path)) else list(inputs)
        _, spans, null_diff = self.predictions(examples)
        gold = {e.id: [text for text, _ in e.answers] for e in examples}
        if not self.negatives:
            return SquadReport(squad_scores(gold, spans))
        finite = {k: v if np.isfinite(v) else 1e9 for k, v in null_diff.items()}
        return SquadReport({**squad_scores(gold, spans, finite, self.null_threshold), "threshold": self.null_threshold})

    def _take(self, group: list[int], inputs: dict, out: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per window of a pass: its start and end logits over its real tokens."""
        start, end = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
        lengths = inputs["attention_mask"].sum(1).tolist()
        return [(start[k, :n], end[k, :n]) for k, n in enumerate(lengths)]
