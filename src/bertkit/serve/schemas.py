"""Request and response shapes: TEI's (`/embed`, `/tokenize`), OpenAI's (`/v1/embeddings`) and bertkit's own fields.

Requests are validated strictly (no silent coercion of numbers into text) so a wrong type is a clear 422.
Responses are built as plain JSON for speed; the models below document them in the OpenAPI schema, which
`tests/test_serve_fuzz.py` holds to what a real server answers (schemathesis).

Where a request model accepts more than the service serves, so that the answer can say what is wrong (OpenAI's
token-id inputs, an empty list of texts), the published schema says what is served (`WithJsonSchema`), and
`request_schema` adds one server's own limits (`--max-inputs`, the model names it answers to).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from annotated_types import Ge
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, StrictStr, WithJsonSchema

TEXTS_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
    ],
    "description": "One text, or a list of at least one (at most the server's --max-inputs, see /info).",
}
LAYERS_DESCRIPTION = (
    "Hidden states to use, as in the library: 'last', '-2', '0,3', 'last4:sum|mean|concat', 'all:sum|mean|concat'. "
    "A layer this model does not have is a 422 (invalid_input) that lists the valid forms."
)
POOLING_DESCRIPTION = (
    "cls, pooler (last layer only), mean, max, several joined with '+' ('cls+mean'), or 'none' for token vectors. "
    "An unknown or ill-fitting pooling is a 422 (invalid_input)."
)

Inputs = Annotated[StrictStr | list[StrictStr], WithJsonSchema(TEXTS_SCHEMA)]


def _whole(value: Any) -> Any:
    """JSON Schema's integer: 3 and 3.0 alike (no strings, no fractions, no booleans)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


PositiveWhole = Annotated[StrictInt, Ge(1), BeforeValidator(_whole)]
PAIR_SCHEMA: dict[str, Any] = {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2}
PREDICT_SCHEMA: dict[str, Any] = {
    "anyOf": [*TEXTS_SCHEMA["anyOf"], {"type": "array", "items": PAIR_SCHEMA, "minItems": 1}],
    "description": "One text, a list of texts, or (for a pair run) a list of [text, pair] pairs, as TEI's /predict.",
}
PredictInputs = Annotated[
    StrictStr | list[StrictStr] | list[Annotated[list[StrictStr], Field(min_length=2, max_length=2)]],
    WithJsonSchema(PREDICT_SCHEMA),
]
DOCUMENTS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "minItems": 1,
    "items": {
        "anyOf": [
            {"type": "string"},
            {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": False,
            },
        ]
    },
    "description": "The documents: strings, or objects with a 'text' (Cohere's structured form).",
}
Layers = Annotated[StrictStr, Field(description=LAYERS_DESCRIPTION, examples=["last", "last4:sum", "-2"])]
Pooling = Annotated[StrictStr, Field(description=POOLING_DESCRIPTION, examples=["mean", "cls", "cls+max"])]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
PromptName = Annotated[StrictStr | None, Field(description="one of the model's named prompts (see /info)")]
Prompt = Annotated[StrictStr | None, Field(description="a text put before every input, e.g. 'query: '")]
Dimensions = Annotated[
    PositiveWhole | None, Field(description="keep the first N numbers of each vector (at most the vector's size)")
]


class EmbedRequest(_Request):
    """TEI's `/embed` body plus bertkit's `layers`, `pooling`, `prompt` and `output_type` (as `Encoder.embed`)."""

    inputs: Inputs
    truncate: StrictBool = True
    normalize: StrictBool = False
    truncation_direction: Direction = "right"
    prompt_name: PromptName = None
    prompt: Prompt = None
    dimensions: Dimensions = None
    output_type: OutputType = "float32"
    layers: Layers = "last"
    pooling: Pooling = "mean"


SIMILARITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "source_sentence": {"type": "string"},
        "sentences": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["source_sentence", "sentences"],
    "additionalProperties": False,
    "description": "the sentence every other one is compared with, and those others",
}


class SimilarityRequest(_Request):
    """TEI's `/similarity` body: the cosine of a source sentence's vector with each of the others'."""

    inputs: Annotated[dict[str, StrictStr | list[StrictStr]], WithJsonSchema(SIMILARITY_SCHEMA)]
    truncate: StrictBool = True
    truncation_direction: Direction = "right"
    prompt_name: PromptName = None


class TokenizeRequest(_Request):
    """TEI's `/tokenize` body: one text or a list."""

    inputs: Inputs
    truncate: StrictBool = True
    add_special_tokens: Literal[True] = True


class PredictRequest(_Request):
    """Texts (or text pairs, for a pair run) for a served run."""

    inputs: PredictInputs


class RerankRequest(_Request):
    """TEI's `/rerank` body, plus bertkit's `model`: which served pair run, when there are several."""

    query: StrictStr
    texts: Annotated[list[StrictStr], Field(min_length=1)]
    raw_scores: StrictBool = Field(False, description="the model's logit (margin) instead of its score")
    return_text: StrictBool = False
    truncate: StrictBool = Field(False, description="false: a pair longer than the run's max length is a 413")
    truncation_direction: Literal["right", "Right"] = "right"
    model: StrictStr | None = Field(None, description="the served pair run to use (see /info); needed with several")


class CohereRerankRequest(_Request):
    """Cohere's and Jina's `/v1/rerank` body (Cohere's v2 at `/v2/rerank`); `model` names a served pair run."""

    model: StrictStr = Field(description="a served pair run's name (see /info)")
    query: StrictStr
    documents: Annotated[list[StrictStr | dict[str, StrictStr]], WithJsonSchema(DOCUMENTS_SCHEMA)]
    top_n: PositiveWhole | None = None
    return_documents: StrictBool = False
    rank_fields: list[Literal["text"]] | None = Field(None, description="only 'text' is ranked")


class OpenAIEmbeddingRequest(BaseModel):
    """OpenAI's `/v1/embeddings` body; `layers`/`pooling` may come as extra fields (the client's `extra_body`)."""

    model_config = ConfigDict(extra="forbid")

    # token ids are parsed so that the answer can say they are not accepted (422 invalid_input, param "input")
    input: Annotated[
        StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]],
        WithJsonSchema({**TEXTS_SCHEMA, "description": "One text or a list of texts; token ids are refused (422)."}),
    ]
    model: StrictStr = Field(description="'default', 'bertkit' or the model's name (see /info); others are a 404.")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: the vector's bytes, little-endian, in its output_type (float32 by default)"
    )
    dimensions: Dimensions = None
    user: StrictStr | None = None
    layers: Layers = "last"
    pooling: Pooling = "mean"
    prompt_name: PromptName = None
    prompt: Prompt = None
    output_type: OutputType = "float32"
    truncation_direction: Direction = "right"


class ExplainRequest(_Request):
    """The explainer's `POST /explain` body (parsed by `explain.explainer.Settings.from_json`; documentation only).

    Out-of-range `pad_to`, `layer`, `attention_layer`, `head`, `layers` or `pooling` do not fail the request: the
    panel they concern carries `{"error": message}` instead of its data.
    """

    text: str = Field(min_length=1, max_length=2000, pattern=r"\S", description="The sentence (not blank).")
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
        None, max_length=2000, pattern=r"^$|\S", description="A second sentence to compare with (cosine), or null."
    )
    map_run: str | None = Field(None, description="The feature run whose training sentences the map shows.")


def request_schema(
    model: type[BaseModel],
    max_inputs: int | None = None,
    model_names: Iterable[str] = (),
    prompt_names: Iterable[str] = (),
) -> dict:
    """The JSON schema of a request body as one server takes it: its `--max-inputs` and the model names it serves.

    Parameters
    ----------
    model : type of BaseModel
        The request model (`EmbedRequest`, `OpenAIEmbeddingRequest`, ...).
    max_inputs : int, optional
        The most texts one request may carry (`maxItems` of the list form of `inputs`/`input`).
    model_names : iterable of str
        The names `/v1/embeddings` accepts as `model` (an `enum`); empty leaves `model` a plain string.
    prompt_names : iterable of str
        The model's named prompts: what `prompt_name` may be (besides null).

    Returns
    -------
    dict
        A self-contained JSON schema (the request models nest no other models).
    """
    schema = copy.deepcopy(model.model_json_schema())
    properties = schema.get("properties", {})
    for name in ("inputs", "input", "texts", "documents"):
        if name in properties and max_inputs is not None:
            for option in [properties[name], *properties[name].get("anyOf", ())]:
                if option.get("type") == "array":
                    option["maxItems"] = max_inputs
    names = sorted(set(model_names))
    if names and "model" in properties:
        properties["model"]["enum"] = names
    if "prompt_name" in properties:
        prompts = sorted(set(prompt_names))
        choices = [{"type": "string", "enum": prompts}] if prompts else []
        description = properties["prompt_name"].get("description", "")
        properties["prompt_name"] = {
            "anyOf": [*choices, {"type": "null"}],
            "default": None,
            "description": description + ("" if prompts else " (this model names none)"),
        }
    return schema


# ---- responses ----------------------------------------------------------------------------------------------------
class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingObject(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="floats, or base64 of little-endian float32")


class OpenAIEmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingObject]
    model: str
    usage: Usage


class TokenView(BaseModel):
    """One input's tokenization: the tutorial's table as parallel lists."""

    tokens: list[str]
    ids: list[int]
    attention_mask: list[int]
    type_ids: list[int]
    word_ids: list[int | None]
    offsets: list[tuple[int, int]] = Field(description="character [start, end) of each token in the input")
    truncated: bool
    full_length: int


class TokenVectors(BaseModel):
    """`pooling: "none"`: one vector per token, with the tokens."""

    tokens: list[str]
    word_ids: list[int | None]
    vectors: list[list[float]]


class LabelScore(BaseModel):
    label: str
    score: float


class ClassPrediction(BaseModel):
    label: str
    score: float
    probabilities: list[LabelScore]


class ScorePrediction(BaseModel):
    score: float = Field(description="a regressor's output")


class LabelSetPrediction(BaseModel):
    labels: list[str] = Field(description="every label whose probability reaches the run's threshold")
    probabilities: list[LabelScore]


class RerankItem(BaseModel):
    """TEI's `/rerank` answer item (sorted by score, best first)."""

    index: int
    score: float
    text: str | None = Field(None, description="with return_text")


class CohereDocument(BaseModel):
    text: str


class CohereRerankResult(BaseModel):
    index: int
    relevance_score: float
    document: CohereDocument | None = Field(None, description="with return_documents")


class RerankUsage(BaseModel):
    total_tokens: int


class CohereRerankResponse(BaseModel):
    """Cohere's `/v1/rerank` answer (id, results, meta), with Jina's `model` and `usage` too."""

    id: str
    model: str
    results: list[CohereRerankResult]
    meta: dict[str, Any]
    usage: RerankUsage


class EntityOut(BaseModel):
    type: str
    text: str
    start: int = Field(description="character offset where the entity starts")
    end: int = Field(description="character offset just past the entity")
    score: float | None


class TagPrediction(BaseModel):
    entities: list[EntityOut]


class Health(BaseModel):
    """`GET /health`: "ok" (200) while the model threads run, else 503."""

    status: str


class RunInfo(BaseModel):
    name: str
    kind: str = Field(description="features, finetuned-text or finetuned-token")
    labels: list[str]
    problem: str = Field(
        description="single_label_classification, multi_label_classification, regression or token_classification"
    )
    pairs: bool = Field(description="the run takes text pairs (a cross-encoder)")
    reranks: bool = Field(description="the run serves /rerank and /v1/rerank")


class Limits(BaseModel):
    max_inputs: int
    max_body_bytes: int
    max_batch_tokens: int
    max_queue_tokens: int


class ServiceInfo(BaseModel):
    """`GET /info`: model facts (names, never paths), served runs, limits and batching settings."""

    model: str
    architecture: str
    model_type: str
    layers: int
    hidden_states: int
    hidden_size: int
    attention_heads: int | None
    max_length: int
    max_length_source: str
    position_limit: int
    vocab_size: int
    cased: bool
    pooler: bool
    token_type_ids: bool
    parameters: int
    precision: str
    threads: int
    concurrent_batches: int
    runs: list[RunInfo]
    probes: list[str] = Field(default_factory=list, description="`bertkit probe` outputs shown on the page")
    limits: Limits
    auth: bool


class ExplainInfo(BaseModel):
    """`GET /explain/info`: what the explainer page needs before the first sentence."""

    model: str
    architecture: str
    layers: int
    hidden_states: int
    hidden_size: int
    heads: int | None
    max_length: int
    pooler: bool
    limits: dict[str, int]
    runs: dict[str, str] = Field(description="run name → kind")
    map_runs: list[str]
    probes: list[str]


class ExplainResponse(BaseModel):
    """`POST /explain`: every panel for one sentence; each panel is its data, or `{"error": message}`."""

    settings: dict[str, Any]
    tokenization: dict[str, Any]
    model: dict[str, Any]
    sentence: dict[str, Any]
    map: dict[str, Any]
    predictions: dict[str, dict[str, Any]]
    probes: dict[str, dict[str, Any]]


class ErrorResponse(BaseModel):
    """bertkit's error answer (serve/errors.py): one line that says what to do, and a machine-readable kind."""

    model_config = ConfigDict(extra="forbid")

    error: str
    error_type: str


class OpenAIError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str
    type: str = Field(description="OpenAI's kind: invalid_request_error, authentication_error, ...")
    param: str | None = Field(description="the request field the error is about")
    code: str = Field(description="bertkit's own kind (error_type)")


class OpenAIErrorResponse(BaseModel):
    """The error answer under `/v1/`: OpenAI's shape, so that the `openai` client's exception carries the message."""

    model_config = ConfigDict(extra="forbid")

    error: OpenAIError
