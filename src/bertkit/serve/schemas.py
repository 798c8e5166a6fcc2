"""Request shapes: TEI's (`/embed`, `/tokenize`), OpenAI's (`/v1/embeddings`) and bertkit's own fields.

`request_models` makes one server's request bodies, strict and with its limits and option values, so that the schema
says exactly what the service takes. The response shapes are in `responses`.
"""

import itertools
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Annotated, Any, Literal

from annotated_types import Ge, Le
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, StrictStr, WithJsonSchema

from ..tasks.qa import MIN_WINDOW

LAYERS_DESCRIPTION = (
    "Hidden states to use, as in the library: 'last', '-2', '0,3', 'last4:sum|mean|concat', 'all:sum|mean|concat'. "
    "A layer this model does not have is a 422 (invalid_input) that lists the valid forms."
)
POOLING_DESCRIPTION = (
    "cls, pooler (last layer only), mean, max, several joined with '+' ('cls+mean'), or 'none' for token vectors. "
    "An unknown or ill-fitting pooling is a 422 (invalid_input)."
)


class Strict(BaseModel):
    """A JSON object of these fields only: an unknown field is a 422 that names it."""

    model_config = ConfigDict(extra="forbid")


def _whole(value: Any) -> Any:
    """JSON Schema's integer: 3 and 3.0 alike (no strings, no fractions, no booleans)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


PositiveWhole = Annotated[StrictInt, Ge(1), BeforeValidator(_whole)]
MAX_SEARCH_TOP_K = 1000  # rows one query of /search may ask for


def Whole(low: int, high: int) -> Any:  # noqa: N802 - a type
    """Type a whole number from `low` to `high` (JSON Schema's minimum and maximum)."""
    return Annotated[StrictInt, Ge(low), Le(high), BeforeValidator(_whole)]


COMBINES = ("sum", "mean", "concat")
# a character that is not white space as Python's str.strip() sees it, spelled out: JSON Schema's (ECMAScript's),
# Python's and pydantic's (Rust's) `\S` each disagree on some characters (U+0085, U+001C-U+001F)
NOT_BLANK = "[^\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"


@dataclass(frozen=True)
class Vocabulary:
    """What one server's requests may say: its limits and its model's option values (its schemas publish them)."""

    max_inputs: int
    hidden_states: int  # the model's layers + 1
    has_pooler: bool
    max_dimensions: int  # the widest sentence vector (all layers, three poolings): each request is checked exactly
    model_names: tuple[str, ...] = ("default",)
    prompt_names: tuple[str, ...] = ()
    rerankers: tuple[str, ...] = ()
    indexes: tuple[str, ...] = ()
    max_chars: int = 100_000  # the longest text a request may carry (characters)

    def layer_specs(self) -> str:
        """Return a pattern of every layer spec this model takes (indices within its hidden states)."""
        n = self.hidden_states
        index = "(?:" + "|".join(str(i) for i in range(-n, n)) + ")"
        count = "(?:" + "|".join(str(i) for i in range(1, n + 1)) + ")"
        combine = "(?:" + "|".join(COMBINES) + ")"
        forms = [
            "last",
            "second_to_last",
            "embeddings",
            f"all:{combine}",
            f"last{count}:{combine}",
            f"{index}(?:,{index})*(?::{combine})?",
        ]
        return "^(?:" + "|".join(forms) + ")$"

    def last_layer_specs(self) -> list[str]:
        """List the specs that choose the last layer alone: what `pooling='pooler'` takes."""
        last = [str(self.hidden_states - 1), "-1"]
        return ["last", *last, *(f"{x}:{c}" for x in [*last, "last1"] for c in COMBINES)]

    def poolings(self, token_vectors: bool = True) -> list[str]:
        """Every pooling spec this model takes: one method or several joined by '+' (and 'none')."""
        methods = ["cls", "mean", "max"] + (["pooler"] if self.has_pooler else [])
        specs = ["+".join(p) for k in range(1, len(methods) + 1) for p in itertools.permutations(methods, k)]
        return specs + (["none"] if token_vectors else [])


def request_models(vocabulary: Vocabulary) -> SimpleNamespace:
    """Make the request bodies of one server: pydantic models whose JSON schemas say exactly what it serves.

    FastAPI parses each route's body with its model and publishes the model's schema in the OpenAPI document.
    """
    types = _types(vocabulary)
    return SimpleNamespace(**_embedding_models(vocabulary, types), **_run_models(vocabulary, types))


def _types(v: Vocabulary) -> SimpleNamespace:
    """Make the field types of one server's requests: its limits and its model's option values."""
    text = {"type": "string", "maxLength": v.max_chars}
    texts_schema = {
        "anyOf": [text, {"type": "array", "items": text, "minItems": 1, "maxItems": v.max_inputs}],
        "description": f"One text, or a list of 1 to {v.max_inputs} (--max-inputs).",
    }
    Text = Annotated[StrictStr, Field(max_length=v.max_chars)]
    TextList = Annotated[list[Text], Field(min_length=1, max_length=v.max_inputs)]
    Texts = Annotated[Text | TextList, WithJsonSchema(texts_schema)]
    Layers = Annotated[
        StrictStr, Field(pattern=v.layer_specs(), description=LAYERS_DESCRIPTION, examples=["last4:sum"])
    ]
    PoolingValues = Literal[tuple(v.poolings())]  # type: ignore[valid-type]
    SentencePoolings = Literal[tuple(v.poolings(token_vectors=False))]  # type: ignore[valid-type]
    Pooling = Annotated[PoolingValues | None, Field(description=POOLING_DESCRIPTION)]
    SentencePooling = Annotated[SentencePoolings | None, Field(description=POOLING_DESCRIPTION)]
    PromptName = Annotated[
        Literal[tuple(v.prompt_names)] | None if v.prompt_names else None,  # type: ignore[valid-type]
        Field(description="one of the model's named prompts (see /info)"),
    ]
    Prompt = Annotated[StrictStr | None, Field(max_length=v.max_chars, description="a text put before every input")]
    Dimensions = Annotated[
        Whole(1, v.max_dimensions) | None,
        Field(description=f"keep the first N numbers of each vector (1 to its width, at most {v.max_dimensions})"),
    ]
    pooler_rule = {
        "if": {
            "properties": {"pooling": {"enum": [p for p in v.poolings() if "pooler" in p]}},
            "required": ["pooling"],
        },
        "then": {"properties": {"layers": {"enum": v.last_layer_specs()}}},
    }
    pooler_rule_config = ConfigDict(json_schema_extra=pooler_rule if v.has_pooler else None)
    Pair = Annotated[list[Text], Field(min_length=2, max_length=2)]
    Reranker = Literal[tuple(v.rerankers)] if v.rerankers else StrictStr  # type: ignore[valid-type]
    found = dict(locals())
    return SimpleNamespace(**{name: kind for name, kind in found.items() if name not in ("v", "text")})


def _embedding_models(v: Vocabulary, t: SimpleNamespace) -> dict[str, type[BaseModel]]:
    """/embed, /embed_all, /v1/embeddings, /similarity and /tokenize bodies."""

    class EmbedRequest(Strict):
        """TEI's `/embed` body plus bertkit's `layers`, `pooling`, `prompt` and `output_type` (as `Encoder.embed`)."""

        model_config = t.pooler_rule_config
        inputs: t.Texts
        truncate: StrictBool = True
        normalize: StrictBool | None = Field(None, description="unit length (default: as the model says)")
        truncation_direction: Direction = "right"
        prompt_name: t.PromptName = None
        prompt: t.Prompt = None
        dimensions: t.Dimensions = None
        output_type: OutputType = "float32"
        layers: t.Layers = "last"
        pooling: t.Pooling = None

    class EmbedAllRequest(Strict):
        """TEI's `/embed_all` body: every token's vector of the chosen layers."""

        inputs: t.Texts
        truncate: StrictBool = True
        normalize: StrictBool = False
        truncation_direction: Direction = "right"
        prompt_name: t.PromptName = None
        prompt: t.Prompt = None
        layers: t.Layers = "last"
        pooling: Literal["mean", "none"] = Field("mean", description="token vectors: 'none' (or TEI's 'mean')")

    class OpenAIEmbeddingRequest(Strict):
        """OpenAI's `/v1/embeddings` body; `layers`/`pooling` may come as extra fields (the client's `extra_body`)."""

        model_config = t.pooler_rule_config
        # token ids are parsed so that the answer can say they are not accepted (422 invalid_input, param "input")
        input: Annotated[
            t.Text
            | t.TextList
            | Annotated[list[StrictInt], Field(min_length=1)]
            | Annotated[list[list[StrictInt]], Field(min_length=1)],
            WithJsonSchema(
                {**t.texts_schema, "description": "One text or a list of texts; token ids are refused (422)."}
            ),
        ]
        model: Literal[tuple(v.model_names)] = Field(  # type: ignore[valid-type]
            description="'default', 'bertkit' or the model's name (see /info)"
        )
        encoding_format: Literal["float", "base64"] = Field(
            "float",
            description="base64: little-endian float32 bytes, whatever the output_type (as OpenAI's clients decode it)",
        )
        dimensions: t.Dimensions = None
        user: StrictStr | None = None
        layers: t.Layers = "last"
        pooling: t.SentencePooling = None
        prompt_name: t.PromptName = None
        prompt: t.Prompt = None
        output_type: OutputType = "float32"
        truncation_direction: Direction = "right"

    class SimilarityInputs(Strict):
        """The sentence every other one is compared with, and those others."""

        source_sentence: t.Text
        sentences: t.TextList

    class SimilarityRequest(Strict):
        """TEI's `/similarity` body: the cosine of a source sentence's vector with each of the others'."""

        inputs: SimilarityInputs
        truncate: StrictBool = True
        truncation_direction: Direction = "right"
        prompt_name: t.PromptName = None

    class TokenizeRequest(Strict):
        """TEI's `/tokenize` body: one text or a list."""

        inputs: t.Texts
        truncate: StrictBool = True
        add_special_tokens: Literal[True] = True

    bodies = (EmbedRequest, EmbedAllRequest, OpenAIEmbeddingRequest, SimilarityRequest, TokenizeRequest)
    return {body.__name__: body for body in bodies}


def _run_models(v: Vocabulary, t: SimpleNamespace) -> dict[str, type[BaseModel]]:
    """/predict/{run}, /rerank and /v1/rerank bodies."""

    class QuestionInput(Strict):
        """A question and the text its answer is in (Hugging Face's question-answering inputs)."""

        question: t.Text
        context: t.Text

    class QuestionParameters(Strict):
        """Hugging Face's question-answering parameters (a QA run's `answer`); null or absent: its default."""

        top_k: Whole(1, 100) | None = Field(None, description="answers per question (1)")
        doc_stride: Annotated[StrictInt, Ge(0), BeforeValidator(_whole)] | None = Field(
            None, description="tokens two windows share (the run's; at most half a window: else 422)"
        )
        max_answer_len: Whole(1, 1024) | None = Field(None, description="tokens (30)")
        max_question_len: Whole(1, 1024) | None = Field(None, description="tokens (64)")
        max_seq_len: Annotated[StrictInt, Ge(MIN_WINDOW), BeforeValidator(_whole)] | None = Field(
            None, description="tokens per window (at most the run's)"
        )
        handle_impossible_answer: StrictBool | None = Field(None, description='allow "no answer" (false)')
        align_to_words: StrictBool | None = Field(None, description="widen answers to whole words (true)")

    class PredictRequest(Strict):
        """Texts (or [text, pair] pairs, for a pair run) for a served run, as TEI's /predict.

        For a question-answering run, Hugging Face's shape: `{"inputs": {"question", "context"}, "parameters": {...}}`.
        """

        inputs: (
            t.Text
            | t.TextList
            | Annotated[list[t.Pair], Field(min_length=1, max_length=v.max_inputs)]
            | QuestionInput
            | Annotated[list[QuestionInput], Field(min_length=1, max_length=v.max_inputs)]
        )
        parameters: QuestionParameters | None = Field(None, description="question answering only")

    class RerankRequest(Strict):
        """TEI's `/rerank` body, plus bertkit's `model`: which served pair run, when there are several."""

        query: t.Text
        texts: t.TextList
        raw_scores: StrictBool = Field(False, description="the model's logit (margin) instead of its score")
        return_text: StrictBool = False
        truncate: StrictBool = Field(False, description="false: a pair longer than the run's max length is a 413")
        truncation_direction: Literal["right", "Right"] = "right"
        model: t.Reranker | None = Field(None, description="the served pair run to use (see /info)")  # type: ignore

    class CohereRerankRequest(Strict):
        """Cohere's and Jina's `/v1/rerank` body (Cohere's v2 at `/v2/rerank`); `model` names a served pair run."""

        model: t.Reranker = Field(description="a served pair run's name (see /info)")  # type: ignore[valid-type]
        query: t.Text
        documents: Annotated[list[t.Text | TextObject], Field(min_length=1, max_length=v.max_inputs)]
        top_n: PositiveWhole | None = None
        return_documents: StrictBool = False
        rank_fields: list[Literal["text"]] | None = Field(None, description="only 'text' is ranked")

    IndexName = Literal[tuple(v.indexes)] if v.indexes else StrictStr  # type: ignore[valid-type]

    class SearchRequest(Strict):
        """bertkit's `/search` body: one query or a list, answered from a loaded vector index."""

        query: t.Texts
        top_k: Whole(1, MAX_SEARCH_TOP_K) = Field(10, description=f"rows per query (1 to {MAX_SEARCH_TOP_K})")
        index: IndexName | None = Field(None, description="the loaded index to search (see /info); one: that one")  # type: ignore[valid-type]
        prompt: t.Prompt = Field(None, description="put before each query instead of the prompt the vectors record")

    return {body.__name__: body for body in (SearchRequest, PredictRequest, RerankRequest, CohereRerankRequest)}


class TextObject(Strict):
    """Cohere's structured document: an object with one field, 'text'."""

    text: StrictStr


Direction = Annotated[
    Literal["right", "Right", "left", "Left"],
    Field(description="which end of a long text truncation keeps: right keeps the beginning, left the end"),
]
OutputType = Annotated[
    Literal["float32", "float16", "int8", "uint8", "binary", "ubinary"],
    Field(
        description="compact vectors, as sentence-transformers' quantize_embeddings (int8 ranges: bertkit's "
        "calibration sentences); binary types are packed 8 dimensions to a byte"
    ),
]


class ExplainRequest(Strict):
    """The explainer's `POST /explain` body (parsed by `explain.explainer.Settings.from_json`; documentation only).

    Out-of-range `pad_to`, `layer`, `attention_layer`, `head`, `layers` or `pooling` do not fail the request: the
    panel they concern carries `{"error": message}` instead of its data.
    """

    text: str = Field(min_length=1, max_length=2000, pattern=NOT_BLANK, description="The sentence (not blank).")
    # any JSON is taken for these four: a value the model cannot show is reported in its panel, not refused
    pad_to: Any = Field(None, description="Pad the tokens to this length (3 to 128), or null.")
    layer: Any = Field(
        None,
        description="Hidden states whose token vectors to send: an index, a list of them, 'all' or null (the last).",
    )
    attention_layer: Any = Field(None, description="Layers whose attention to send: an index, a list, 'all' or null.")
    head: Any = Field(None, description="Heads of those layers: an index, a list, 'all', 'mean' or null (their mean).")
    layers: str = Field("last", description=LAYERS_DESCRIPTION)
    pooling: str = Field("mean", description=POOLING_DESCRIPTION)
    compare: str | None = Field(
        None,
        max_length=2000,
        pattern=f"^$|{NOT_BLANK}",
        description="A second sentence to compare with (cosine), or null.",
    )
    map_run: str | None = Field(None, description="The feature run whose training sentences the map shows.")
    pair: str | None = Field(None, max_length=2000, description="A second text, read as a pair.")
