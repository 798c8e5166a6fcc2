"""`create_app`: the FastAPI app of `bertkit serve` — routes, JSON errors, middleware, and the batcher's lifespan.

Other faces extend it: `create_app(..., routers=[...])` or `app.include_router(...)` after it returns; the shared
state (encoder, runs, batcher, metrics, settings) is `app.state.service`. `GET /` is left for the explainer page.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import logging
import uuid
from collections.abc import Callable, Sequence
from contextlib import asynccontextmanager
from http import HTTPStatus

import numpy as np
import orjson
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .. import __version__
from ..encoder.encode import Encoder
from ..encoder.threads import release_openmp_threads
from ..errors import BertkitError
from ..explain.routes import add_routes as add_explainer_routes
from .batcher import Overloaded, ShuttingDown
from .errors import OPENAI_PREFIX, error_response
from .middleware import (
    ApiKeyMiddleware,
    BodyLimitMiddleware,
    BodyTooLarge,
    JsonBodyMiddleware,
    LocalAccessMiddleware,
    MetricsMiddleware,
)
from .runs import ServedRun
from .schemas import (
    ClassPrediction,
    CohereRerankRequest,
    CohereRerankResponse,
    EmbedRequest,
    ErrorResponse,
    ExplainInfo,
    ExplainRequest,
    ExplainResponse,
    Health,
    LabelSetPrediction,
    OpenAIEmbeddingRequest,
    OpenAIEmbeddingResponse,
    OpenAIErrorResponse,
    PredictRequest,
    RerankItem,
    RerankRequest,
    ScorePrediction,
    ServiceInfo,
    SimilarityRequest,
    TagPrediction,
    TokenizeRequest,
    TokenVectors,
    TokenView,
    request_schema,
)
from .security import check_allow_hosts, check_allow_origins
from .service import ClientGone, EmbedResult, ServeError, Service, VectorOptions
from .settings import ServeSettings

log = logging.getLogger("bertkit.serve")


def _array_fallback(value):
    if isinstance(value, np.ndarray):  # not C-contiguous: orjson hands it here
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class VectorJSONResponse(JSONResponse):
    """JSON written by orjson, float32 arrays straight from memory (far faster than the json module on vectors)."""

    def render(self, content) -> bytes:
        return orjson.dumps(content, default=_array_fallback, option=orjson.OPT_SERIALIZE_NUMPY)


# ---- the OpenAPI document: every status a route can answer, with its JSON shape ----------------------------------
ERROR_CODES = {
    400: "the body is not valid JSON (invalid_json)",
    401: "missing or wrong API key (unauthorized); only when the server was started with a key",
    403: "the Host header does not name this server, or a web page of another origin sent the request",
    404: "no such run or model",
    413: "body over --max-body-bytes, more texts than --max-inputs, or an input too long with truncate=false",
    415: "the body is not sent as Content-Type: application/json",
    422: "a field has the wrong type or value (validation_error), or the model cannot do what was asked "
    "(invalid_input); the message names the field",
    429: "the queue is full (overloaded); retry after Retry-After seconds",
    500: "the server failed on this request (internal_error); it keeps serving others",
    503: "the server is shutting down and takes no new requests",
}
REF = "#/components/schemas/"
POST_ERRORS = (400, 403, 413, 415, 422, 429, 500, 503)
GET_ERRORS = (403, 500)
RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}}
TRUNCATED = {
    "X-Bertkit-Truncated": {
        "description": "how many inputs were cut to the model's max length",
        "required": True,
        "schema": {"type": "integer"},
    },
    "X-Bertkit-Truncated-Inputs": {
        "description": "their indices, comma-separated (only when some were cut)",
        "schema": {"type": "string"},
    },
}


def _errors(codes: Sequence[int], path: str, key: bool) -> dict[int | str, dict]:
    """OpenAPI responses for error `codes` of a route: bertkit's JSON error, OpenAI's shape under `/v1/`.

    Given as JSON content (not as a model), so that a route whose answer is not JSON (`/metrics`) still documents
    JSON errors; `_add_openapi` puts the shapes into the document's components.
    """
    model = OpenAIErrorResponse if path.startswith(OPENAI_PREFIX) else ErrorResponse
    content = {"application/json": {"schema": {"$ref": REF + model.__name__}}}
    responses: dict[int | str, dict] = {}
    for code in sorted({*codes, *([401] if key else [])}):
        responses[code] = {"description": ERROR_CODES[code], "content": content}
        if code in (429, 503):
            responses[code]["headers"] = RETRY_AFTER
    return responses


def _ok(model, headers: dict | None = None) -> dict[int | str, dict]:
    """The documented 200 answer: `model` describes the body (the routes build their JSON themselves)."""
    return {200: {"model": model, "description": "Successful Response", **({"headers": headers} if headers else {})}}


def create_app(
    encoder: Encoder | None = None,
    runs: dict[str, ServedRun] | None = None,
    settings: ServeSettings | None = None,
    *,
    routers: Sequence[APIRouter] = (),
) -> FastAPI:
    """The service app for `encoder` (default: the packaged model) and `runs`; call it once per process."""
    service = Service(encoder or Encoder.from_pretrained(), runs, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # The model and the web stack are half a million long-lived objects: a full collection of them is a stall of
        # a few hundred milliseconds in some request's latency. Frozen, they are never scanned again.
        gc.collect()
        gc.freeze()
        # The model runs on the batcher's threads. The main thread's OpenMP team, left from loading, makes libgomp
        # stop spin-waiting (more threads than cores), so each parallel op pays a wake-up: int8, with its many small
        # ops, pays it most (README, serving). fp32 was faster with the team kept.
        if service.encoder.precision == "int8":
            release_openmp_threads()
        service.batcher.start()
        try:
            yield
        finally:  # uvicorn has finished the requests in flight; the batcher drains what is still queued
            await asyncio.to_thread(service.batcher.stop)

    app = FastAPI(
        title="bertkit serve",
        version=__version__,
        lifespan=lifespan,
        description="Embeddings from any layer with any pooling, tokenization and predictions of trained runs.",
    )
    app.state.service = service
    _add_error_handlers(app)
    app.include_router(_routes(service))
    add_explainer_routes(app)  # GET / (the visual guide, live), /explain/info, POST /explain
    _add_openapi(app, service.settings)
    for router in routers:
        app.include_router(router)
    _add_middleware(app, service.settings, service.metrics)
    return app


def _add_middleware(app: FastAPI, settings: ServeSettings, metrics) -> None:
    """Outermost first: metrics see every answer; Host and Origin are checked before anything else, CORS answers
    (preflight included) come before the key check, and the key before the body is read."""
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    app.add_middleware(JsonBodyMiddleware)
    if settings.api_key:
        app.add_middleware(ApiKeyMiddleware, key=settings.api_key)
    origins = check_allow_origins(settings.allow_origins)
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
            max_age=600,
            expose_headers=["Retry-After", "X-Bertkit-Truncated", "X-Bertkit-Truncated-Inputs"],
        )
    app.add_middleware(
        LocalAccessMiddleware, allow_hosts=check_allow_hosts(settings.allow_hosts), allow_origins=origins
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics)


def _service(request: Request) -> Service:
    return request.app.state.service


def _disconnected(request: Request):
    """A coroutine factory that returns once the client has closed the connection (the body is read by then)."""

    async def wait() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    return wait


def _truncation_headers(result: EmbedResult) -> dict[str, str]:
    headers = {"X-Bertkit-Truncated": str(len(result.truncated))}
    if result.truncated:
        headers["X-Bertkit-Truncated-Inputs"] = ",".join(map(str, result.truncated))
    return headers


def _token_vectors(result: EmbedResult, normalize: bool = False) -> list[dict]:
    return [
        {"tokens": e.tokens, "word_ids": e.word_ids(), "vectors": _normalized(v, normalize)}
        for e, v in zip(result.encoded, result.vectors)
    ]


def _normalized(vectors: np.ndarray, normalize: bool) -> np.ndarray:
    if not normalize:
        return vectors
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


async def _parse(request: Request, model: type[BaseModel]):
    """The JSON body as `model` (JsonBodyMiddleware has refused other content types)."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from None


def _body(schema: dict) -> dict:
    """OpenAPI description of a JSON request body (bodies are parsed by `_parse`, not by FastAPI)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _component(document: dict, model: type[BaseModel]) -> dict:
    """Add `model` (and the models it nests) to the document's components; a `$ref` to it."""
    schema = model.model_json_schema(ref_template=REF + "{model}")
    components = document.setdefault("components", {}).setdefault("schemas", {})
    components.update(schema.pop("$defs", {}))
    components[model.__name__] = schema
    return {"$ref": REF + model.__name__}


def _add_openapi(app: FastAPI, settings: ServeSettings) -> None:
    """FastAPI's OpenAPI document plus what it cannot see: the error shapes and the explainer's bodies.

    The explainer's routes (explain/routes.py) parse their bodies by hand, as the service's own routes do; their
    request and answers are described here, from the models in serve/schemas.py.
    """
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            document = build()  # cached by FastAPI as app.openapi_schema
            for model in (ErrorResponse, OpenAIErrorResponse):
                _component(document, model)
            explainer = {
                ("/explain", "post"): (ExplainResponse, POST_ERRORS, ExplainRequest),
                ("/explain/info", "get"): (ExplainInfo, GET_ERRORS, None),
            }
            for (path, method), (answer, codes, request) in explainer.items():
                operation = document.get("paths", {}).get(path, {}).get(method)
                if operation is None:
                    continue
                ok = {
                    "description": "Successful Response",
                    "content": {"application/json": {"schema": _component(document, answer)}},
                }
                operation["responses"] = {
                    "200": ok,
                    **{
                        str(code): response
                        for code, response in _errors(codes, path, settings.api_key is not None).items()
                    },
                }
                if request is not None:
                    operation.update(_body(_component(document, request)))
        return app.openapi_schema

    app.openapi = openapi


def _routes(service: Service) -> APIRouter:
    router = APIRouter()
    settings = service.settings
    key = settings.api_key is not None

    def body(model: type[BaseModel]) -> dict:
        names: Sequence[str] = ()
        if model is OpenAIEmbeddingRequest:
            names = sorted(service.model_names)
        elif model is CohereRerankRequest:  # its `model` is a served reranker's name
            names = sorted(name for name, run in service.runs.items() if run.ranks) or ["(no reranker served)"]
        return _body(request_schema(model, settings.max_inputs, names, service.encoder.info()["prompts"]))

    def answers(path: str, model, codes: Sequence[int] = POST_ERRORS, headers: dict | None = None) -> dict:
        return {**_ok(model, headers), **_errors(codes, path, key)}

    _status_routes(router, answers, key)
    _embedding_routes(router, body, answers)
    _prediction_routes(router, body, key)
    _rerank_routes(router, body, answers)
    _similarity_routes(router, body, answers)
    return router


def _status_routes(router: APIRouter, answers: Callable, key: bool) -> None:
    """/health, /info, /metrics."""

    @router.get(
        "/health",
        summary="Liveness: 200 while the model thread runs (no key needed)",
        responses={
            **_ok(Health),
            503: {"model": Health, "description": "the model thread has stopped"},
            **_errors((403, 500), "/health", key=False),
        },
    )
    async def health(request: Request):
        alive = _service(request).batcher.running
        return JSONResponse({"status": "ok" if alive else "model thread stopped"}, status_code=200 if alive else 503)

    @router.get(
        "/info",
        summary="Model, layers, hidden size, max length, served runs, limits",
        responses=answers("/info", ServiceInfo, GET_ERRORS),
    )
    async def info(request: Request):
        return {**_service(request).info(), "probes": sorted(getattr(request.app.state, "explain_probes", None) or {})}

    @router.get(
        "/metrics",
        summary="Prometheus metrics",
        response_class=PlainTextResponse,
        responses={
            200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"},
            **_errors(GET_ERRORS, "/metrics", key),
        },
    )
    async def metrics(request: Request):
        service = _service(request)
        return Response(service.metrics.exposition(), media_type=service.metrics.content_type)


def _embedding_routes(router: APIRouter, body: Callable, answers: Callable) -> None:
    """/embed (and TEI's POST /), /embed_all, /v1/embeddings, /tokenize."""

    @router.post(
        "/embed",
        openapi_extra=body(EmbedRequest),
        responses=answers("/embed", list[list[float]] | list[TokenVectors], headers=TRUNCATED),
        summary="Sentence vectors (TEI's /embed), or token vectors with pooling='none'",
    )
    @router.post("/", include_in_schema=False)  # TEI answers POST / too; huggingface_hub's InferenceClient posts there
    async def embed(request: Request):
        body = await _parse(request, EmbedRequest)
        service = _service(request)
        tokens_only = body.pooling.strip().lower() == "none"
        options = _vector_options(body, normalize=body.normalize and not tokens_only)
        result = await service.embed(
            service.texts(body.inputs), body.layers, body.pooling, body.truncate, _disconnected(request), options
        )
        if tokens_only:
            content = _token_vectors(result, body.normalize)
        else:
            content = np.stack(result.vectors)
        return VectorJSONResponse(content, headers=_truncation_headers(result))

    @router.post(
        "/embed_all",
        openapi_extra=body(EmbedRequest),
        responses=answers("/embed_all", list[list[list[float]]], headers=TRUNCATED),
        summary="TEI's /embed_all: every token's vector of the chosen layers",
    )
    async def embed_all(request: Request):
        body = await _parse(request, EmbedRequest)
        service = _service(request)
        if body.pooling not in ("mean", "none"):
            raise ServeError(
                422, "invalid_input", "/embed_all returns token vectors; leave out pooling, or use /embed."
            )
        result = await service.embed(
            service.texts(body.inputs),
            body.layers,
            "none",
            body.truncate,
            _disconnected(request),
            _vector_options(body, normalize=False),  # a prompt applies to token vectors too; dimensions do not
        )
        content = [_normalized(v, body.normalize) for v in result.vectors]
        return VectorJSONResponse(content, headers=_truncation_headers(result))

    @router.post(
        "/v1/embeddings",
        openapi_extra=body(OpenAIEmbeddingRequest),
        responses=answers("/v1/embeddings", OpenAIEmbeddingResponse, (*POST_ERRORS, 404), TRUNCATED),
        summary="OpenAI's embeddings API",
    )
    async def openai_embeddings(request: Request):
        body = await _parse(request, OpenAIEmbeddingRequest)
        service = _service(request)
        names = service.model_names
        if body.model not in names:
            raise ServeError(
                404,
                "model_not_found",
                f"model {body.model!r} is not served here; use one of: {', '.join(sorted(names))}.",
                param="model",
            )
        inputs = body.input
        if not isinstance(inputs, str) and inputs and not all(isinstance(x, str) for x in inputs):
            raise ServeError(
                422,
                "invalid_input",
                "input: token ids are not accepted; send a string or a list of strings.",
                param="input",
            )
        if body.pooling.strip().lower() == "none":
            raise ServeError(
                422, "invalid_input", "pooling='none' gives token vectors; use /embed for those.", param="pooling"
            )
        result = await service.embed(  # unit length, as OpenAI's (after `dimensions`: Matryoshka truncation)
            service.texts(inputs, "input"),
            body.layers,
            body.pooling,
            True,
            _disconnected(request),
            _vector_options(body, normalize=True),
        )
        data = []
        for index, vector in enumerate(result.vectors):
            if body.encoding_format == "base64":
                value = base64.b64encode(vector.astype(vector.dtype.newbyteorder("<")).tobytes()).decode("ascii")
            else:
                value = vector
            data.append({"object": "embedding", "index": index, "embedding": value})
        usage = {"prompt_tokens": result.tokens, "total_tokens": result.tokens}
        return VectorJSONResponse(
            {"object": "list", "data": data, "model": body.model, "usage": usage}, headers=_truncation_headers(result)
        )

    @router.post(
        "/tokenize",
        openapi_extra=body(TokenizeRequest),
        responses=answers("/tokenize", list[TokenView], headers=TRUNCATED),
        summary="Tokens, ids, mask, word ids, character offsets",
    )
    async def tokenize(request: Request):
        body = await _parse(request, TokenizeRequest)
        service = _service(request)
        encoded, truncated = service.encode(service.texts(body.inputs), body.truncate)
        views = []
        for item in encoded:
            offsets = item.encoding.offsets
            views.append(
                {
                    "tokens": item.tokens,
                    "ids": item.ids,
                    "attention_mask": [1] * len(item.ids),
                    "type_ids": item.type_ids,
                    "word_ids": item.word_ids(),
                    "offsets": [list(o) for o in offsets],
                    "truncated": item.truncated,
                    "full_length": item.full_length,
                }
            )
        headers = {"X-Bertkit-Truncated": str(len(truncated))}
        return VectorJSONResponse(views, headers=headers)


def _vector_options(body, normalize: bool) -> VectorOptions:
    """What an /embed or /v1/embeddings body asks of its vectors (errors name the field, in the route's shape)."""
    return VectorOptions(
        prompt=body.prompt,
        prompt_name=body.prompt_name,
        dimensions=body.dimensions,
        normalize=normalize,
        output=body.output_type,
        truncation_direction=body.truncation_direction.lower(),
    )


def _similarity_routes(router: APIRouter, body: Callable, answers: Callable) -> None:
    """/similarity (TEI): the cosine of a source sentence with each of the others."""

    @router.post(
        "/similarity",
        openapi_extra=body(SimilarityRequest),
        responses=answers("/similarity", list[float]),
        summary="TEI's /similarity: cosine of the source sentence's vector with each sentence's",
    )
    async def similarity(request: Request):
        body = await _parse(request, SimilarityRequest)
        service = _service(request)
        source, sentences = body.inputs.get("source_sentence"), body.inputs.get("sentences")
        if (
            set(body.inputs) != {"source_sentence", "sentences"}
            or not isinstance(source, str)
            or not (isinstance(sentences, list) and sentences)
        ):
            raise ServeError(
                422,
                "invalid_input",
                "inputs: give source_sentence (a text) and sentences (a list of "
                "at least one text), as TEI's /similarity takes them.",
                param="inputs",
            )
        texts = [source, *service.texts(sentences, "sentences")]
        options = VectorOptions(
            prompt_name=body.prompt_name, normalize=True, truncation_direction=body.truncation_direction.lower()
        )
        result = await service.embed(texts, "last", "mean", body.truncate, _disconnected(request), options)
        vectors = np.stack(result.vectors)
        return VectorJSONResponse((vectors[1:] @ vectors[0]).tolist(), headers=_truncation_headers(result))


def _prediction_routes(router: APIRouter, body: Callable, key: bool) -> None:
    """/predict/{run}."""

    @router.post(
        "/predict/{run}",
        response_model=list[ClassPrediction] | list[ScorePrediction] | list[LabelSetPrediction] | list[TagPrediction],
        openapi_extra=body(PredictRequest),
        responses=_errors((*POST_ERRORS, 404), "/predict", key),
        summary="A served run's labels with probabilities, or entities with character offsets",
    )
    async def predict(run: str, request: Request):
        service = _service(request)
        service.run(run)
        body = await _parse(request, PredictRequest)
        return await service.predict(run, service.texts(body.inputs), _disconnected(request))


def _rerank_routes(router: APIRouter, body: Callable, answers: Callable) -> None:
    """/rerank (TEI), /v1/rerank (Cohere v1, Jina) and /v2/rerank (Cohere v2): a served pair run, best first."""

    @router.post(
        "/rerank",
        openapi_extra=body(RerankRequest),
        responses=answers("/rerank", list[RerankItem], (*POST_ERRORS, 404)),
        summary="TEI's /rerank: the texts scored against the query by a served pair run, best first",
    )
    async def rerank(request: Request):
        body = await _parse(request, RerankRequest)
        service = _service(request)
        run = service.reranker(body.model)
        ranked, _ = await service.rerank(
            run, body.query, body.texts, body.raw_scores, body.truncate, _disconnected(request)
        )
        items = [
            {"index": i, "score": score, **({"text": body.texts[i]} if body.return_text else {})} for i, score in ranked
        ]
        return VectorJSONResponse(items)

    @router.post(
        "/v1/rerank",
        openapi_extra=body(CohereRerankRequest),
        responses=answers("/v1/rerank", CohereRerankResponse, (*POST_ERRORS, 404)),
        summary="Cohere's and Jina's /v1/rerank: documents ranked by a served pair run (model: its name)",
    )
    @router.post("/v2/rerank", include_in_schema=False)  # Cohere's v2 client; the same body and answer
    async def cohere_rerank(request: Request):
        body = await _parse(request, CohereRerankRequest)
        service = _service(request)
        documents = []
        for row, document in enumerate(body.documents):
            if isinstance(document, dict) and set(document) != {"text"}:
                raise ServeError(
                    422,
                    "invalid_input",
                    f"documents[{row}]: an object document has one field, 'text'.",
                    param="documents",
                )
            documents.append(document["text"] if isinstance(document, dict) else document)
        run = service.reranker(body.model)
        ranked, tokens = await service.rerank(run, body.query, documents, disconnected=_disconnected(request))
        results = [
            {
                "index": i,
                "relevance_score": score,
                **({"document": {"text": documents[i]}} if body.return_documents else {}),
            }
            for i, score in ranked[: body.top_n]
        ]
        meta = {"api_version": {"version": "1"}, "billed_units": {"search_units": 1}}
        return VectorJSONResponse(
            {
                "id": str(uuid.uuid4()),
                "model": body.model,
                "results": results,
                "meta": meta,
                "usage": {"total_tokens": tokens},
            }
        )


def _validation_message(exc: RequestValidationError) -> tuple[int, str, str]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        detail = next(e for e in errors if e.get("type") == "json_invalid").get("ctx", {}).get("error", "")
        return 400, "invalid_json", f"the request body is not valid JSON ({detail}); send a JSON object."
    parts: dict[str, str] = {}
    for error in errors:
        loc = ".".join(str(p) for p in error.get("loc", ()) if p != "body" and not str(p).startswith(("list[", "str")))
        where = loc or "body"
        if where not in parts:
            message = error.get("msg", "invalid")
            if error.get("type") == "extra_forbidden":
                message = "unknown field; check its spelling"
            elif where.split(".")[0] in ("inputs", "input") and error.get("type") == "string_type":
                got = type(error.get("input")).__name__
                message = f"must be a string or a list of strings, not {got}"
            parts[where] = message
    text = "; ".join(f"{where}: {message}" for where, message in list(parts.items())[:4])
    return 422, "validation_error", f"{text}."


def _validation_param(exc: RequestValidationError) -> str | None:
    """The first request field a validation error names (OpenAI's `param`)."""
    for error in exc.errors():
        names = [str(p) for p in error.get("loc", ()) if p != "body"]
        if names:
            return names[0]
    return None


def _http_message(request: Request, exc: StarletteHTTPException) -> str:
    if exc.detail != HTTPStatus(exc.status_code).phrase:  # a route's own message
        return str(exc.detail)
    if exc.status_code == 404:
        return f"no endpoint {request.url.path}; see /docs for the API."
    if exc.status_code == 405:
        return f"{request.method} is not allowed on {request.url.path}."
    return str(exc.detail)


def _add_error_handlers(app: FastAPI) -> None:
    def answer(
        request: Request,
        status: int,
        error_type: str,
        message: str,
        headers: dict[str, str] | None = None,
        param: str | None = None,
    ) -> JSONResponse:
        return error_response(status, error_type, message, request.url.path, headers, param)

    @app.exception_handler(ServeError)
    async def serve_error(request: Request, exc: ServeError):
        return answer(request, exc.status, exc.error_type, str(exc), exc.headers, exc.param)

    @app.exception_handler(BertkitError)
    async def bertkit_error(request: Request, exc: BertkitError):
        return answer(request, 422, "invalid_input", str(exc))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        return answer(request, *_validation_message(exc), param=_validation_param(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        kinds = {404: "not_found", 405: "method_not_allowed"}
        return answer(
            request, exc.status_code, kinds.get(exc.status_code, "http_error"), _http_message(request, exc), exc.headers
        )

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, exc: Overloaded):
        return answer(request, 429, "overloaded", str(exc), {"Retry-After": str(exc.retry_after)})

    @app.exception_handler(ShuttingDown)
    async def shutting_down(request: Request, exc: ShuttingDown):
        return answer(request, 503, "shutting_down", str(exc), {"Retry-After": "5"})

    @app.exception_handler(BodyTooLarge)
    async def too_large(request: Request, exc: BodyTooLarge):
        return answer(request, 413, "payload_too_large", str(exc))

    @app.exception_handler(ClientGone)
    @app.exception_handler(ClientDisconnect)  # the client left while its body was being read (not a server error)
    async def client_gone(request: Request, exc: ClientGone | ClientDisconnect):
        return answer(
            request, 499, "client_closed_request", "the client closed the connection; the request was dropped."
        )

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception):
        log.error("request %s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        return answer(
            request,
            500,
            "internal_error",
            "the server failed on this request (it keeps serving others); the server log has the details.",
        )
