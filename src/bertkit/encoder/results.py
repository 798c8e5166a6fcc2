"""What an embedding call gives back besides plain arrays: each text's token vectors, and the report of the call."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import display

if TYPE_CHECKING:
    from .coverage import Coverage


@dataclass(repr=False)
class TokenEmbedding:
    """Per-token vectors of one text (padding removed) with the tokens they belong to."""

    tokens: list[str]
    vectors: np.ndarray  # (num_tokens, dim) float32
    word_ids: list[int | None]

    def __repr__(self) -> str:
        shape = "×".join(map(str, self.vectors.shape))
        return (
            f"TokenEmbedding({len(self.tokens)} tokens, vectors {shape}: {' '.join(self.tokens[: display.MAX_ROWS])})"
        )

    def _repr_html_(self) -> str:
        return display.token_vectors_html(self.tokens, self.word_ids, self.vectors)


@dataclass
class EmbedReport:
    """What happened during an embedding call: truncation, windows, vocabulary coverage, the prompt used."""

    n_texts: int = 0
    max_length: int = 0  # the token limit this call applied (the caller's max_length, else the model's)
    truncated_rows: list[int] = field(default_factory=list)
    windowed_rows: list[int] = field(default_factory=list)
    words_without_tokens: int = 0
    coverage: Coverage | None = None
    prompt: str = ""  # the prompt put before every text ('' for none)
    tokenize_seconds: float = 0.0  # time spent tokenizing
    forward_seconds: float = 0.0  # time spent inside the model's forward passes (summed over concurrent passes)

    def add_chunk(self, part: EmbedReport, first: int) -> None:
        """Add the report of a chunk of this call's texts (its rows counted from `first`)."""
        self.truncated_rows += [first + row for row in part.truncated_rows]
        self.windowed_rows += [first + row for row in part.windowed_rows]
        self.tokenize_seconds += part.tokenize_seconds

    @property
    def n_truncated(self) -> int:
        """How many texts were cut at the token limit."""
        return len(self.truncated_rows)

    def facts(self) -> dict[str, str]:
        """Say what the report says, one line per fact: what `repr` and Jupyter show."""
        facts = {
            "texts": str(self.n_texts),
            "token limit": str(self.max_length),
            "truncated": _rows(self.truncated_rows),
            "in windows": _rows(self.windowed_rows),
        }
        if self.coverage is not None:
            facts["vocabulary coverage"] = self.coverage.message()
        if self.words_without_tokens:
            facts["words without tokens"] = str(self.words_without_tokens)
        if self.prompt:
            facts["prompt"] = repr(self.prompt)
        return facts

    def __repr__(self) -> str:
        return "EmbedReport(" + "; ".join(f"{name}: {value}" for name, value in self.facts().items()) + ")"

    def _repr_html_(self) -> str:
        return display.facts_table(self.facts(), "EmbedReport")


@dataclass
class EmbedResult:
    """The vectors of an embedding call with its report.

    `vectors` is an (n, dim) array of sentence vectors, or, for pooling='none', one `TokenEmbedding` per text.
    """

    vectors: np.ndarray | list[TokenEmbedding]
    report: EmbedReport

    def __iter__(self) -> Iterator[Any]:  # `vectors, report = encoder.embed_with_report(...)` reads naturally
        return iter((self.vectors, self.report))


def _rows(found: list[int]) -> str:
    if not found:
        return "0"
    shown = ", ".join(map(str, found[:10])) + (" …" if len(found) > 10 else "")
    return f"{len(found)} (rows {shown})"
