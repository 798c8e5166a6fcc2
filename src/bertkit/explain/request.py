"""`ExplainRequest`: the one table of the explainer's options (light: the command line builds its flags from it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field, StrictBool

from ..encoder.layers import NOT_BLANK
from ..encoder.options import OPTIONS
from ..errors import InputError, check_flag

MAX_CHARS = 2000  # a sentence or a short paragraph; longer pastes are refused with a message


def check_text(text: object, name: str = "text") -> str:
    """Return the sentence to explain; refuse one that is not a string, empty, or longer than MAX_CHARS."""
    if not isinstance(text, str):
        raise InputError(f"{name} must be a string, got {type(text).__name__}.")
    if not text.strip():
        raise InputError(f"{name} is empty: type a sentence to see how the model reads it.")
    if len(text) > MAX_CHARS:
        raise InputError(
            f"{name} has {len(text):,} characters; the explainer takes up to {MAX_CHARS:,} (one sentence or a short "
            "paragraph). Shorten it, or embed long documents with `bertkit embed`."
        )
    return text


Anything = Any  # any JSON: a value the model cannot show is told in its panel, not refused
Sentence = Annotated[str, Field(max_length=MAX_CHARS)]


@dataclass
class ExplainRequest:
    """What the page asks for: the one table of the explainer's options, checked when made.

    `POST /explain` takes it as its body (its JSON types and the sentence's bounds are the schema's), and `bertkit
    explain` generates its --compare and --attributions flags from it. Out-of-range `pad_to`, `layer`,
    `attention_layer`, `head`, `layers` or `pooling` do not fail a request: the panel they concern carries
    `{"error": message}` instead of its data.
    """

    text: Annotated[Sentence, Field(min_length=1, pattern=NOT_BLANK, description="The sentence (not blank).")]
    pad_to: Annotated[Anything, Field(description="Pad the tokens to this length (3 to 128), or null.")] = None
    layer: Annotated[
        Anything,
        Field(
            description="Hidden states whose token vectors to send: an index, a list of them, 'all' or null (the last)."
        ),
    ] = None
    attention_layer: Annotated[
        Anything, Field(description="Layers whose attention to send: an index, a list, 'all' or null.")
    ] = None
    head: Annotated[
        Anything, Field(description="Heads of those layers: an index, a list, 'all', 'mean' or null (their mean).")
    ] = None
    layers: Annotated[str, Field(description=OPTIONS["layers"].metadata["help"])] = "last"
    pooling: Annotated[str | None, Field(description=OPTIONS["pooling"].metadata["help"])] = None  # None: the model's
    compare: Annotated[
        Sentence | None,
        Field(pattern=f"^$|{NOT_BLANK}", description="A second sentence: the cosine of the two vectors."),
    ] = None
    map_run: Annotated[str | None, Field(description="The feature run whose training sentences the map shows.")] = None
    pair: Annotated[Sentence | None, Field(description="A second text, read as a pair.")] = None
    attributions: Annotated[
        StrictBool,
        Field(
            description="Attribute the cosine (compare) and each run's prediction to the words (Integrated "
            "Gradients); it costs about 80 passes of the sentence per score.",
        ),
    ] = field(default=False, metadata={"flag": "--attributions/--no-attributions"})

    def __post_init__(self) -> None:
        """Refuse a text, compare or pair sentence that is not one (empty, too long) and a non-bool `attributions`."""
        for name in ("text", "compare", "pair"):
            if name == "text" or getattr(self, name):
                check_text(getattr(self, name), name)
        check_flag("attributions", self.attributions)
