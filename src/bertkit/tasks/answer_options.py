"""`AnswerOptions`: the one table of how a question-answering run answers (light: the command line builds from it)."""

from __future__ import annotations

from dataclasses import dataclass

from ..encoder.defaults import check_fields, option_field

QUESTION_TOKENS = 64  # the question is cut to this many tokens (transformers' max_question_len)
MIN_WINDOW = 8  # tokens a window needs at least (--max-length's floor)


@dataclass(frozen=True)
class AnswerOptions:
    """How a question-answering run answers: transformers' question-answering pipeline's parameters.

    The one table of them: `FineTunedQA.answer`'s keywords, `bertkit answer`'s options and `POST /predict`'s
    `parameters` are made of these fields, and checked here.

    Parameters
    ----------
    top_k : int
        Answers per question, best first (fewer when the context holds fewer candidates).
    max_answer_len : int
        Longest answer, in tokens.
    max_question_len : int
        Tokens of the question kept.
    doc_stride : int, optional
        Tokens two windows of a long context share (None: the run's; at most half a window).
    max_seq_len : int, optional
        Tokens per window (None and at most: the run's maximum length).
    handle_impossible_answer : bool, optional
        Allow "no answer" (`{"answer": "", "start": 0, "end": 0}`), taken where the null score beats the best span's
        by more than the run's threshold (None: the run's own, True for a run trained with unanswerable questions).
    align_to_words : bool
        Widen a span to whole words (as the tokenizer splits them).
    """

    top_k: int = option_field(1, "Answers per question, best first.", low=1, high=100)
    max_answer_len: int = option_field(30, "Longest answer, in tokens.", low=1, high=1024)
    max_question_len: int = option_field(QUESTION_TOKENS, "Tokens of the question kept.", low=1, high=1024)
    doc_stride: int | None = option_field(
        None, "Tokens two windows share (default: the run's; at most half a window).", low=0
    )
    max_seq_len: int | None = option_field(
        None, "Tokens per window (default and at most: the run's length).", low=MIN_WINDOW
    )
    handle_impossible_answer: bool | None = option_field(
        None,
        "Allow 'no answer' ({answer: '', start: 0, end: 0}); default: the run's own (on for a SQuAD v2 run).",
        flag="--handle-impossible-answer/--no-handle-impossible-answer",
    )
    align_to_words: bool = option_field(
        True, "Widen answers to whole words.", flag="--align-to-words/--no-align-to-words"
    )

    def __post_init__(self) -> None:
        check_fields(self)
