"""Request shapes: TEI's (`/embed`, `/tokenize`), OpenAI's (`/v1/embeddings`) and bertkit's own fields.

`request_models` makes one server's request bodies, strict and with its limits, so that the schema says what the
service takes. Their embedding options are `EmbedOptions`' own fields (type, choices, help), under the library's names
but where a peer's shape fixes another (TEI, OpenAI); each body builds its `EmbedOptions` and resolves it against the
served model as it is read: a value the library refuses is a 422 that names the field, and the code behind trusts
`body.options`. The response shapes are in `responses`.
"""

import dataclasses
import typing
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Annotated, Any, Literal, Union

from annotated_types import Ge, Le
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StrictStr,
    Tag,
    WithJsonSchema,
    create_model,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ..encoder.options import OPTIONS, EmbedOptions
from ..errors import InputError, brief
from ..tasks.qa import AnswerOptions

# the library's name → the one a peer's request shape fixes: TEI's /embed (huggingface_hub's feature_extraction sends
# both) and OpenAI's /v1/embeddings; every other body says the library's names
TEI_NAMES = {"truncate_dim": "dimensions", "normalize_embeddings": "normalize"}
OPENAI_NAMES = {"truncate_dim": "dimensions"}
LIBRARY_NAMES = {**{name: name for name in OPTIONS}, **{peer: name for name, peer in TEI_NAMES.items()}}


class Strict(BaseModel):
    """A JSON object of these fields only: an unknown field is a 422 that names it."""

    model_config = ConfigDict(extra="forbid")


def _whole(value: Any) -> Any:
    """JSON Schema's integer: 3 and 3.0 alike (no strings, no fractions, no booleans)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _shape(value: Any) -> str:
    """Name a JSON value's shape as `by_shape` tags do: str, int, {}, and a list by its first item: [str], [[int]]."""
    if isinstance(value, list):
        return f"[{_shape(value[0]) if value else 'str'}]"
    return "{}" if isinstance(value, dict) else type(value).__name__


def by_shape(expected: str, members: dict[str, Any]) -> Any:
    """Make a union whose member is chosen by the value's shape (`_shape`): a value is checked by that one alone.

    Any other shape is one `wrong_shape` error: "must be `expected`".
    """
    tagged = tuple(Annotated[member, Tag(shape)] for shape, member in members.items())
    return Annotated[
        Union[tagged],  # noqa: UP007 - a union built from a tuple
        Discriminator(_shape, custom_error_type="wrong_shape", custom_error_message=f"must be {expected}"),
    ]


MAX_SEARCH_TOP_K = 1000  # rows one query of /search may ask for


def Whole(low: int, high: int | None = None) -> Any:  # noqa: N802 - a type
    """Type a whole number from `low` to `high` (JSON Schema's minimum and maximum)."""
    bounds = (Ge(low),) if high is None else (Ge(low), Le(high))
    return Annotated[(StrictInt, *bounds, BeforeValidator(_whole))]


def dataclass_model(table: type) -> type[BaseModel]:
    """Make the request model of a dataclass whose fields carry their JSON types and bounds (`ExplainRequest`)."""
    hints = typing.get_type_hints(table, include_extras=True)
    fields = {
        f.name: (hints[f.name], ... if f.default is dataclasses.MISSING else f.default)
        for f in dataclasses.fields(table)
    }
    return create_model(table.__name__, __base__=Strict, __doc__=table.__doc__, **fields)


def fields_model(name: str, doc: str, options: type) -> type[BaseModel]:
    """Make the request model of an options dataclass (`AnswerOptions`) from its fields' metadata.

    Each field is optional (null or absent: its default), typed and bounded as the metadata says, described by its help.
    """
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(options):
        meta = field.metadata
        kind = StrictBool if "/" in (meta.get("flag") or "") else Whole(meta["low"], meta.get("high"))
        described = meta["help"] if field.default is None else f"{meta['help']} ({field.default})"
        fields[field.name] = (kind | None, Field(None, description=described))
    return create_model(name, __base__=Strict, __doc__=doc, **fields)


@dataclass(frozen=True)
class Vocabulary:
    """What one server's requests may say: its limits and what its model names (its schemas publish them)."""

    max_inputs: int
    max_dimensions: int  # the widest sentence vector (all layers, three poolings): each request is checked exactly
    model: Any = None  # the served Encoder: each body's options are resolved against it
    model_names: tuple[str, ...] = ("default",)
    prompt_names: tuple[str, ...] = ()
    rerankers: tuple[str, ...] = ()
    indexes: tuple[str, ...] = ()
    max_chars: int = 100_000  # the longest text a request may carry (characters)


def option_field(name: str, v: Vocabulary) -> tuple[Any, Any]:
    """Make the request field of `EmbedOptions` field `name`: its type, choices (in either case), pattern and help."""
    option = OPTIONS[name]
    kind: Any = {"str": StrictStr, "int": Whole(1), "bool": StrictBool}[str(option.type).split(" |")[0]]
    choices, pattern, help = option.metadata["choices"], option.metadata.get("pattern"), option.metadata["help"]
    if name == "prompt_name":  # the model's own prompts
        choices = v.prompt_names
    if choices is not None:
        kind = Literal[tuple(dict.fromkeys([*choices, *(c.capitalize() for c in choices)]))] if choices else None
    elif pattern is not None:  # published; the library's own check refuses a value, in its words (validated once)
        kind = Annotated[StrictStr, WithJsonSchema({"type": "string", "pattern": pattern})]
        help += " The pattern is the syntax; a value the served model cannot take (a layer it lacks) is a 422."
    elif name == "truncate_dim":
        kind = Whole(1, v.max_dimensions)
    elif name == "prompt":
        kind = Annotated[StrictStr, Field(max_length=v.max_chars)]
    optional = kind | None if option.default is None and kind is not None else kind
    return optional, Field(option.default, description=help)


class OptionsBody(Strict):
    """A body with embedding options: `options` is their `EmbedOptions`, resolved against the served model."""

    _options: EmbedOptions | None = PrivateAttr(None)

    @property
    def options(self) -> EmbedOptions:
        """The resolved options this body asks for."""
        assert self._options is not None
        return self._options


def options_body(
    name: str, doc: str, v: Vocabulary, names: tuple[str, ...], fixed: dict, peer: dict, **fields: Any
) -> Any:
    """Make a request model of route `fields` and the options `names` (`peer`: names a peer's shape fixes).

    `fixed`: options the route sets itself. The body's options are resolved as it is read; a route that answers
    sentence vectors refuses `pooling='none'`.
    """
    said = {option: peer.get(option, option) for option in OPTIONS}

    def resolve(body: OptionsBody) -> OptionsBody:
        given = {option: getattr(body, said[option]) for option in names}
        given = {option: value for option, value in given.items() if value is not None} | fixed
        if "truncate" in fields:  # TEI's truncate: cut a long text, or refuse it (413)
            given["long_text"] = "truncate" if body.truncate else "error"  # type: ignore[attr-defined]
        try:
            body._options = EmbedOptions(**given).resolve(v.model)
            if body._options.token_vectors and "pooling" not in fixed and name != "EmbedRequest":
                raise InputError("pooling='none' gives token vectors; this route answers one vector per input.")
        except InputError as exc:
            raise option_error(str(exc), said) from None
        return body

    options = {said[option]: option_field(option, v) for option in names}
    validators = {"resolve": model_validator(mode="after")(resolve)}
    return create_model(name, __base__=OptionsBody, __doc__=doc, __validators__=validators, **fields, **options)


def option_error(message: str, said: dict[str, str]) -> PydanticCustomError:
    """Say the library's refusal of an option in the request's name for it (`said`): a 422 naming the field."""
    library = next((n for n in OPTIONS if message.startswith((f"{n}=", f"{n} "))), None)
    field = said.get(library or "", library)
    if library is not None and field != library:
        message = field + message.removeprefix(library)
    return PydanticCustomError("invalid_input", "{message}", {"message": brief(message, 500), "field": field})


def check_option(model: Any, field: str, value: Any) -> str | None:
    """Say what the library says of one option value sent as request field `field` (None: it takes it)."""
    library = LIBRARY_NAMES.get(field)
    if library is None:
        return None
    try:
        EmbedOptions(**{library: value}).resolve(model)
    except (InputError, TypeError) as exc:
        return option_error(str(exc), {library: field}).context["message"]  # type: ignore[index]
    return None


def request_models(v: Vocabulary) -> SimpleNamespace:
    """Make the request bodies of one server: pydantic models whose JSON schemas say exactly what it serves.

    FastAPI parses each route's body with its model and publishes the model's schema in the OpenAPI document.
    """
    text = {"type": "string", "maxLength": v.max_chars}
    many = {"type": "array", "items": text, "minItems": 1, "maxItems": v.max_inputs}
    texts = {"anyOf": [text, many], "description": f"One text, or a list of 1 to {v.max_inputs} (--max-inputs)."}
    t = SimpleNamespace(texts_schema=texts, Text=Annotated[StrictStr, Field(max_length=v.max_chars)])
    t.TextList = Annotated[list[t.Text], Field(min_length=1, max_length=v.max_inputs)]
    one_or_many = "a string or a list of strings"
    t.Texts = Annotated[by_shape(one_or_many, {"str": t.Text, "[str]": t.TextList}), WithJsonSchema(texts)]
    t.Pair = Annotated[list[t.Text], Field(min_length=2, max_length=2)]
    t.Reranker = Literal[tuple(v.rerankers)] if v.rerankers else StrictStr  # type: ignore[valid-type]
    return SimpleNamespace(**_embedding_models(v, t), **_run_models(v, t))


SENTENCE = ("layers", "pooling", "truncation_direction", "prompt_name", "prompt", "truncate_dim", "output_type")


def _embedding_models(v: Vocabulary, t: SimpleNamespace) -> dict[str, type[BaseModel]]:
    """/embed, /embed_all, /v1/embeddings, /similarity and /tokenize bodies."""
    tei = {"inputs": (t.Texts, ...), "truncate": (StrictBool, True)}
    embed = options_body(
        "EmbedRequest",
        "TEI's `/embed` body plus bertkit's options (as `Encoder.embed`; `pooling: none`: token vectors).",
        v,
        (*SENTENCE, "normalize_embeddings"),
        {},
        TEI_NAMES,
        **tei,
    )
    embed_all = options_body(
        "EmbedAllRequest",
        "TEI's `/embed_all` body: every token's vector of the chosen layers.",
        v,
        ("layers", "truncation_direction", "prompt_name", "prompt", "normalize_embeddings"),
        {"pooling": "none"},
        {},
        **tei,
    )
    # token ids are parsed so that the answer can say they are not accepted (422 invalid_input, param "input")
    ids = {"[int]": list[StrictInt], "[[int]]": Annotated[list[list[StrictInt]], Field(min_length=1)]}
    texts_or_ids = by_shape("a string or a list of strings", {"str": t.Text, "[str]": t.TextList, **ids})
    refused = {**t.texts_schema, "description": "One text or a list of texts; token ids are refused (422)."}
    names = Literal[tuple(v.model_names)]  # type: ignore[valid-type]
    openai = options_body(
        "OpenAIEmbeddingRequest",
        "OpenAI's `/v1/embeddings` body; bertkit's options may come as extra fields (the client's `extra_body`).",
        v,
        SENTENCE,
        {"normalize_embeddings": True},  # unit length, as OpenAI's (after dimensions)
        OPENAI_NAMES,
        input=(Annotated[texts_or_ids, WithJsonSchema(refused)], ...),
        model=(names, Field(description="'default', 'bertkit' or the model's name (see /info)")),
        encoding_format=(
            Literal["float", "base64"],
            Field("float", description="base64: little-endian float32 bytes, whatever the output_type"),
        ),
        user=(StrictStr | None, None),
    )

    class SimilarityInputs(Strict):
        """The sentence every other one is compared with, and those others."""

        source_sentence: t.Text
        sentences: t.TextList

    similarity = options_body(
        "SimilarityRequest",
        "TEI's `/similarity` body: the model's similarity of a source sentence's vector with each of the others'.",
        v,
        ("truncation_direction", "prompt_name"),
        {},
        {},
        **{**tei, "inputs": (SimilarityInputs, ...)},
    )

    class TokenizeRequest(Strict):
        """TEI's `/tokenize` body: one text or a list."""

        inputs: t.Texts
        truncate: StrictBool = True
        add_special_tokens: Annotated[StrictBool, Field(description="false: without [CLS], [SEP], ...")] = True

    return {body.__name__: body for body in (embed, embed_all, openai, similarity, TokenizeRequest)}


def _run_models(v: Vocabulary, t: SimpleNamespace) -> dict[str, type[BaseModel]]:
    """/predict/{run}, /rerank and /v1/rerank bodies."""

    class QuestionInput(Strict):
        """A question and the text its answer is in (Hugging Face's question-answering inputs)."""

        question: t.Text
        context: t.Text

    QuestionParameters = fields_model(  # noqa: N806 - a class
        "QuestionParameters",
        "Hugging Face's question-answering parameters (a QA run's `answer`); null or absent: its default.",
        AnswerOptions,
    )

    class PredictRequest(Strict):
        """Texts (or [text, pair] pairs, for a pair run) for a served run, as TEI's /predict.

        For a question-answering run, Hugging Face's shape: `{"inputs": {"question", "context"}, "parameters": {...}}`.
        """

        inputs: by_shape(  # type: ignore[valid-type]
            "a string, a list of strings or of [text, pair] pairs, or a question object",
            {
                "str": t.Text,
                "[str]": t.TextList,
                "[[str]]": Annotated[list[t.Pair], Field(min_length=1, max_length=v.max_inputs)],
                "{}": QuestionInput,
                "[{}]": Annotated[list[QuestionInput], Field(min_length=1, max_length=v.max_inputs)],
            },
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
        documents: Annotated[
            list[by_shape("a string or a {'text': ...} object", {"str": t.Text, "{}": TextObject})],  # type: ignore[misc]
            Field(min_length=1, max_length=v.max_inputs),
        ]
        top_n: Whole(1) | None = None
        return_documents: StrictBool = False
        rank_fields: list[Literal["text"]] | None = Field(None, description="only 'text' is ranked")

    IndexName = Literal[tuple(v.indexes)] if v.indexes else StrictStr  # type: ignore[valid-type]

    class SearchRequest(Strict):
        """bertkit's `/search` body: one query or a list, answered from a loaded vector index."""

        query: t.Texts
        top_k: Whole(1, MAX_SEARCH_TOP_K) = Field(10, description=f"rows per query (1 to {MAX_SEARCH_TOP_K})")
        index: IndexName | None = Field(None, description="the loaded index to search (see /info); one: that one")  # type: ignore[valid-type]
        prompt: StrictStr | None = Field(
            None, max_length=v.max_chars, description="put before each query instead of the prompt the vectors record"
        )

    return {body.__name__: body for body in (SearchRequest, PredictRequest, RerankRequest, CohereRerankRequest)}


class TextObject(Strict):
    """Cohere's structured document: an object with one field, 'text'."""

    text: StrictStr
