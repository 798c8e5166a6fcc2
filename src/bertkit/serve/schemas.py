"""Request and response shapes: TEI's (`/embed`, `/tokenize`), OpenAI's (`/v1/embeddings`) and bertkit's own fields.

Requests are validated strictly (no silent coercion of numbers into text) so a wrong type is a clear 422.
Responses are built as plain JSON for speed; the models below document them in the OpenAPI schema.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

Inputs = StrictStr | list[StrictStr]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmbedRequest(_Request):
    """TEI's `/embed` body plus bertkit's `layers` and `pooling` (same strings as `Encoder.embed`)."""

    inputs: Inputs
    truncate: StrictBool = True
    normalize: StrictBool = False
    truncation_direction: Literal["right", "Right"] = "right"
    layers: StrictStr = "last"
    pooling: StrictStr = "mean"


class TokenizeRequest(_Request):
    """TEI's `/tokenize` body: one text or a list."""

    inputs: Inputs
    truncate: StrictBool = True
    add_special_tokens: Literal[True] = True


class PredictRequest(_Request):
    """Texts for a served run."""

    inputs: Inputs


class OpenAIEmbeddingRequest(BaseModel):
    """OpenAI's `/v1/embeddings` body; `layers`/`pooling` may come as extra fields (the client's `extra_body`)."""

    model_config = ConfigDict(extra="forbid")

    input: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]
    model: StrictStr
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    user: StrictStr | None = None
    layers: StrictStr = "last"
    pooling: StrictStr = "mean"


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


class EntityOut(BaseModel):
    type: str
    text: str
    start: int = Field(description="character offset where the entity starts")
    end: int = Field(description="character offset just past the entity")
    score: float | None


class TagPrediction(BaseModel):
    entities: list[EntityOut]


class ErrorResponse(BaseModel):
    error: str
    error_type: str
