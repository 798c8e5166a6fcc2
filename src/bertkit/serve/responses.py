"""Response shapes of the service: built as plain JSON, documented by these models in the OpenAPI document.

Each is `shape(name, what it is, **fields)`: a field is a type, or (type, `Field(...)`) with its default and words.
"""

from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from .schemas import Strict


def shape(name: str, doc: str, base: type[BaseModel] = BaseModel, /, **fields: Any) -> Any:
    """Make a documented answer shape named `name` (its OpenAPI component) of `fields`."""
    typed = {key: value if isinstance(value, tuple) else (value, ...) for key, value in fields.items()}
    return create_model(name, __base__=base, __doc__=doc, **typed)


def described(kind: Any, words: str, default: Any = ...) -> tuple[Any, Any]:
    """Type a field with its description (and default)."""
    return kind, Field(default, description=words)


Usage = shape("Usage", "OpenAI's token counts of an embeddings request.", prompt_tokens=int, total_tokens=int)
EmbeddingObject = shape(
    "EmbeddingObject",
    "One input's vector in OpenAI's embeddings answer.",
    object=(Literal["embedding"], "embedding"),
    index=int,
    embedding=described(list[float] | str, "floats, or base64 of little-endian float32"),
)
OpenAIEmbeddingResponse = shape(
    "OpenAIEmbeddingResponse",
    "OpenAI's `/v1/embeddings` answer.",
    object=(Literal["list"], "list"),
    data=list[EmbeddingObject],  # type: ignore[valid-type]
    model=str,
    usage=Usage,
)
Token = shape(
    "Token",
    "One token as TEI's /tokenize gives it (id, text, special, start, stop), with bertkit's token, word and type ids.",
    id=int,
    text=described(str, "the input's characters [start, stop) of the token; a special token's own name"),
    special=bool,
    start=described(int | None, "character offset in the input; null for a special token"),
    stop=described(int | None, "end character offset (exclusive); null for a special token"),
    token=described(str, "the vocabulary's token, e.g. '##ing'"),
    word_id=described(int | None, "the input's word the token belongs to; null for a special token"),
    type_id=int,
)
TokenVectors = shape(
    "TokenVectors",
    '`pooling: "none"`: one vector per token, with the tokens.',
    tokens=list[str],
    word_ids=list[int | None],
    vectors=list[list[float]],
)
LabelScore = shape("LabelScore", "A label and its probability.", label=str, score=float)
ClassPrediction = shape(
    "ClassPrediction",
    "A classifier's answer: the most probable label, its probability and every label's.",
    LabelScore,
    probabilities=list[LabelScore],  # type: ignore[valid-type]
)
ScorePrediction = shape("ScorePrediction", "A regressor's answer.", score=described(float, "a regressor's output"))
LabelSetPrediction = shape(
    "LabelSetPrediction",
    "A multi-label classifier's answer.",
    labels=described(list[str], "every label whose probability reaches the run's threshold"),
    probabilities=list[LabelScore],  # type: ignore[valid-type]
)
RerankItem = shape(
    "RerankItem",
    "TEI's `/rerank` answer item (sorted by score, best first).",
    index=int,
    score=float,
    text=described(str | None, "with return_text", None),
)
CohereDocument = shape("CohereDocument", "A document as Cohere's rerank answer returns it.", text=str)
CohereRerankResult = shape(
    "CohereRerankResult",
    "One document of Cohere's `/v1/rerank` answer: its index and relevance score.",
    index=int,
    relevance_score=float,
    document=described(CohereDocument | None, "with return_documents", None),
)
RerankUsage = shape("RerankUsage", "The tokens a rerank request took (Jina's `usage`).", total_tokens=int)
CohereRerankResponse = shape(
    "CohereRerankResponse",
    "Cohere's `/v1/rerank` answer (id, results, meta), with Jina's `model` and `usage` too.",
    id=str,
    model=str,
    results=list[CohereRerankResult],  # type: ignore[valid-type]
    meta=dict[str, Any],
    usage=RerankUsage,
)
EntityOut = shape(
    "EntityOut",
    "One entity a tagger found: its type, text, character span and score.",
    type=str,
    text=str,
    start=described(int, "character offset where the entity starts"),
    end=described(int, "character offset just past the entity"),
    score=float | None,
)
TagPrediction = shape("TagPrediction", "A tagger's answer for one text: its entities.", entities=list[EntityOut])  # type: ignore[valid-type]
Answer = shape(
    "Answer",
    'A question-answering run\'s answer (Hugging Face\'s shape); no answer: `{"answer": "", "start": 0, "end": 0}`.',
    answer=str,
    score=float,
    start=described(int, "character offset in the context where the answer starts"),
    end=described(int, "character offset just past the answer"),
)
Health = shape("Health", '`GET /health`: "ok" (200) while the queue runs, else 503.', status=str)
IndexInfo = shape(
    "IndexInfo",
    "A loaded vector index (`bertkit serve --index NAME=FILE`).",
    name=str,
    rows=int,
    dim=int,
    precision=str,
    metric=str,
)
SearchHit = shape(
    "SearchHit",
    "One row of an index near the query, best first (sentence-transformers' `semantic_search` item, plus its id).",
    id=described(int | str, "the row's id in the vectors file the index was built from (a number or a string)"),
    corpus_id=described(int, "the row's position in the index"),
    score=float,
    text=described(str | None, "the row's text, where the server can read the file it was embedded from", None),
)
RunInfo = shape(
    "RunInfo",
    "A served run, as `GET /info` lists it.",
    name=str,
    kind=described(str, "features, finetuned-text, finetuned-token or finetuned-qa"),
    labels=list[str],
    problem=described(
        str,
        "single_label_classification, multi_label_classification, regression, token_classification or "
        "question_answering",
    ),
    pairs=described(bool, "the run takes text pairs (a cross-encoder)"),
    reranks=described(bool, "the run serves /rerank and /v1/rerank"),
)
Limits = shape(
    "Limits",
    "The server's limits on requests and batching.",
    **{name: int for name in ("max_inputs", "max_body_bytes", "max_batch_tokens", "max_queue_tokens")},
)
FACTS = {"attention_heads": int | None, "cased": bool, "pooler": bool, "token_type_ids": bool}
ServiceInfo = shape(
    "ServiceInfo",
    "`GET /info`: model facts (names, never paths), served runs, limits and batching settings.",
    **{name: str for name in ("model", "architecture", "model_type", "max_length_source", "precision")},
    **{name: int for name in ("layers", "hidden_states", "hidden_size", "max_length", "position_limit")},
    **{name: int for name in ("vocab_size", "parameters", "threads", "concurrent_batches")},
    **FACTS,
    runs=list[RunInfo],  # type: ignore[valid-type]
    indexes=(list[IndexInfo], Field(default_factory=list, description="vector indexes searched at /search")),  # type: ignore[valid-type]
    probes=(list[str], Field(default_factory=list, description="`bertkit probe` outputs shown on the page")),
    limits=Limits,
    auth=bool,
)
ExplainInfo = shape(
    "ExplainInfo",
    "`GET /explain/info`: what the explainer page needs before the first sentence.",
    **{name: str for name in ("model", "architecture")},
    **{name: int for name in ("layers", "hidden_states", "hidden_size", "max_length")},
    heads=int | None,
    pooler=bool,
    limits=dict[str, int],
    runs=described(dict[str, str], "run name → kind"),
    map_runs=list[str],
    probes=list[str],
)
ExplainResponse = shape(
    "ExplainResponse",
    '`POST /explain`: every panel for one sentence; each panel is its data, or `{"error": message}`.',
    **{name: dict[str, Any] for name in ("settings", "tokenization", "model", "sentence", "map")},
    predictions=dict[str, dict[str, Any]],
    probes=dict[str, dict[str, Any]],
)
ErrorResponse = shape(
    "ErrorResponse",
    "bertkit's error answer (serve/errors.py): one line that says what to do, and a machine-readable kind.",
    Strict,
    error=str,
    error_type=str,
)
OpenAIError = shape(
    "OpenAIError",
    "OpenAI's error object: message, kind, the field it is about and bertkit's own kind.",
    Strict,
    message=str,
    type=described(str, "OpenAI's kind: invalid_request_error, authentication_error, ..."),
    param=described(str | None, "the request field the error is about"),
    code=described(str, "bertkit's own kind (error_type)"),
)
OpenAIErrorResponse = shape(
    "OpenAIErrorResponse",
    "The error answer under `/v1/`: OpenAI's shape, so that the `openai` client's exception carries the message.",
    Strict,
    error=OpenAIError,
)
