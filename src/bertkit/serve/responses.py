"""Response shapes of the service: built as plain JSON, documented by these models in the OpenAPI document."""

from typing import Any, Literal

from pydantic import BaseModel, Field

from .schemas import Strict


class Usage(BaseModel):
    """OpenAI's token counts of an embeddings request."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingObject(BaseModel):
    """One input's vector in OpenAI's embeddings answer."""

    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="floats, or base64 of little-endian float32")


class OpenAIEmbeddingResponse(BaseModel):
    """OpenAI's `/v1/embeddings` answer."""

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
    """A label and its probability."""

    label: str
    score: float


class ClassPrediction(LabelScore):
    """A classifier's answer: the most probable label, its probability and every label's."""

    probabilities: list[LabelScore]


class ScorePrediction(BaseModel):
    """A regressor's answer."""

    score: float = Field(description="a regressor's output")


class LabelSetPrediction(BaseModel):
    """A multi-label classifier's answer."""

    labels: list[str] = Field(description="every label whose probability reaches the run's threshold")
    probabilities: list[LabelScore]


class RerankItem(BaseModel):
    """TEI's `/rerank` answer item (sorted by score, best first)."""

    index: int
    score: float
    text: str | None = Field(None, description="with return_text")


class CohereDocument(BaseModel):
    """A document as Cohere's rerank answer returns it."""

    text: str


class CohereRerankResult(BaseModel):
    """One document of Cohere's `/v1/rerank` answer: its index and relevance score."""

    index: int
    relevance_score: float
    document: CohereDocument | None = Field(None, description="with return_documents")


class RerankUsage(BaseModel):
    """The tokens a rerank request took (Jina's `usage`)."""

    total_tokens: int


class CohereRerankResponse(BaseModel):
    """Cohere's `/v1/rerank` answer (id, results, meta), with Jina's `model` and `usage` too."""

    id: str
    model: str
    results: list[CohereRerankResult]
    meta: dict[str, Any]
    usage: RerankUsage


class EntityOut(BaseModel):
    """One entity a tagger found: its type, text, character span and score."""

    type: str
    text: str
    start: int = Field(description="character offset where the entity starts")
    end: int = Field(description="character offset just past the entity")
    score: float | None


class TagPrediction(BaseModel):
    """A tagger's answer for one text: its entities."""

    entities: list[EntityOut]


class Answer(BaseModel):
    """A question-answering run's answer (Hugging Face's shape); no answer: `{"answer": "", "start": 0, "end": 0}`."""

    answer: str
    score: float
    start: int = Field(description="character offset in the context where the answer starts")
    end: int = Field(description="character offset just past the answer")


class Health(BaseModel):
    """`GET /health`: "ok" (200) while the queue runs, else 503."""

    status: str


class IndexInfo(BaseModel):
    """A loaded vector index (`bertkit serve --index NAME=FILE`)."""

    name: str
    rows: int
    dim: int
    precision: str
    metric: str


class SearchHit(BaseModel):
    """One row of an index near the query, best first (sentence-transformers' `semantic_search` item, plus its id)."""

    id: str = Field(description="the row's id in the vectors file the index was built from")
    corpus_id: int = Field(description="the row's position in the index")
    score: float


class RunInfo(BaseModel):
    """A served run, as `GET /info` lists it."""

    name: str
    kind: str = Field(description="features, finetuned-text, finetuned-token or finetuned-qa")
    labels: list[str]
    problem: str = Field(
        description="single_label_classification, multi_label_classification, regression, token_classification or "
        "question_answering"
    )
    pairs: bool = Field(description="the run takes text pairs (a cross-encoder)")
    reranks: bool = Field(description="the run serves /rerank and /v1/rerank")


class Limits(BaseModel):
    """The server's limits on requests and batching."""

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
    indexes: list[IndexInfo] = Field(default_factory=list, description="vector indexes searched at /search")
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


class ErrorResponse(Strict):
    """bertkit's error answer (serve/errors.py): one line that says what to do, and a machine-readable kind."""

    error: str
    error_type: str


class OpenAIError(Strict):
    """OpenAI's error object: message, kind, the field it is about and bertkit's own kind."""

    message: str
    type: str = Field(description="OpenAI's kind: invalid_request_error, authentication_error, ...")
    param: str | None = Field(description="the request field the error is about")
    code: str = Field(description="bertkit's own kind (error_type)")


class OpenAIErrorResponse(Strict):
    """The error answer under `/v1/`: OpenAI's shape, so that the `openai` client's exception carries the message."""

    error: OpenAIError
