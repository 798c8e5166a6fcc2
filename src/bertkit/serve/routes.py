"""The service's routes: status, embeddings, served runs, search and the explainer page.

Each route turns its typed body into the library's own options and calls the `Service`; none computes a vector
its own way. The page explains with the very model and runs that `/embed` and `/predict` serve, and `POST /explain`
waits in the service's one queue like every other model call.
"""

import base64
import threading
import uuid
from typing import Any, Literal

import numpy as np
from fastapi import APIRouter, FastAPI, Path, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from ..explain import page
from ..explain.explainer import Explainer, ExplainRequest
from ..tasks.search import model_metric
from ..tasks.search import similarity as similarity_of
from . import responses as shapes
from .schemas import Vocabulary, dataclass_model, request_models
from .service import ServeError, Service
from .web import GET_ERRORS, POST_ERRORS, StrictJSONRoute, json_answer, responses

CUT, CUT_ROWS = "how many inputs were cut to the model's max length", "their indices, comma-separated (if any)"
TRUNCATED = {
    "X-Bertkit-Truncated": {"description": CUT, "required": True, "schema": {"type": "integer"}},
    "X-Bertkit-Truncated-Inputs": {"description": CUT_ROWS, "schema": {"type": "string"}},
}
_BUILD = threading.Lock()
EXPLAIN_BODY = dataclass_model(ExplainRequest)


def service_routes(service: Service, vocabulary: Vocabulary) -> APIRouter:
    """Every route of the service, with this server's request models (its limits, its model's options)."""
    router = APIRouter(route_class=StrictJSONRoute)
    models = request_models(vocabulary)
    key = service.settings.api_key is not None
    _status_routes(router, key)
    _embedding_routes(router, models, key)
    _run_routes(router, models, key, sorted(service.runs), vocabulary.rerankers)
    _search_routes(router, models, key, bool(service.indexes))
    _explainer_routes(router)
    return router


def _service(request: Request) -> Service:
    return request.app.state.service


def _texts(inputs: str | list[str]) -> list[str]:
    return [inputs] if isinstance(inputs, str) else list(inputs)


def _disconnected(request: Request) -> Any:
    """Make a coroutine factory that returns once the client has closed the connection (the body is read by then)."""

    async def wait() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    return wait


def _truncation_headers(truncated: list[int]) -> dict[str, str]:
    headers = {"X-Bertkit-Truncated": str(len(truncated))}
    if truncated:
        headers["X-Bertkit-Truncated-Inputs"] = ",".join(map(str, truncated))
    return headers


def _status_routes(router: APIRouter, key: bool) -> None:
    """/health, /info, /metrics."""
    health_answers = {
        **responses("/health", shapes.Health, (403, 500)),
        503: {"model": shapes.Health, "description": "queue stopped"},
    }

    @router.get("/health", summary="Liveness: 200 while the queue runs (no key needed)", responses=health_answers)
    async def health(request: Request) -> JSONResponse:
        alive = _service(request).batcher.running
        return JSONResponse({"status": "ok" if alive else "queue stopped"}, status_code=200 if alive else 503)

    @router.get(
        "/info",
        summary="Model, layers, hidden size, max length, served runs, limits",
        responses=responses("/info", shapes.ServiceInfo, GET_ERRORS, key),
    )
    async def info(request: Request) -> JSONResponse:
        probes = sorted(getattr(request.app.state, "explain_probes", None) or {})
        return JSONResponse({**_service(request).info(), "probes": probes})

    metrics_answers = {
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"},
        **responses("/metrics", None, GET_ERRORS, key),
    }

    @router.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse, responses=metrics_answers)
    async def metrics(request: Request) -> Response:
        service = _service(request)
        return Response(service.metrics.exposition(), media_type=service.metrics.content_type)


def _embedding_routes(router: APIRouter, models: Any, key: bool) -> None:
    """/embed (and TEI's POST /), /embed_all, /v1/embeddings, /similarity, /tokenize."""
    embed_answers = responses("/embed", list[list[float]] | list[shapes.TokenVectors], key=key, headers=TRUNCATED)

    @router.post("/embed", responses=embed_answers, summary="Sentence vectors (TEI's /embed), or token vectors")
    @router.post("/", include_in_schema=False)  # TEI answers POST / too; huggingface_hub's InferenceClient posts there
    async def embed(body: models.EmbedRequest, request: Request) -> Response:
        result = await _service(request).embed(_texts(body.inputs), body.options, _disconnected(request))
        content: Any = result.vectors
        if body.options.token_vectors:
            content = [{"tokens": e.tokens, "word_ids": e.word_ids, "vectors": e.vectors} for e in result.vectors]
        return await json_answer(content, headers=_truncation_headers(result.truncated))

    @router.post(
        "/embed_all",
        responses=responses("/embed_all", list[list[list[float]]], key=key, headers=TRUNCATED),
        summary="TEI's /embed_all: every token's vector of the chosen layers",
    )
    async def embed_all(body: models.EmbedAllRequest, request: Request) -> Response:
        result = await _service(request).embed(_texts(body.inputs), body.options, _disconnected(request))
        vectors = [item.vectors for item in result.vectors]
        return await json_answer(vectors, headers=_truncation_headers(result.truncated))

    @router.post(
        "/v1/embeddings",
        responses=responses("/v1/embeddings", shapes.OpenAIEmbeddingResponse, (*POST_ERRORS, 404), key, TRUNCATED),
        summary="OpenAI's embeddings API",
    )
    async def openai_embeddings(body: models.OpenAIEmbeddingRequest, request: Request) -> Response:
        texts = _texts(body.input)
        if not all(isinstance(x, str) for x in texts):
            message = "input: token ids are not accepted; send a string or a list of strings."
            raise ServeError(422, "invalid_input", message, param="input")
        result = await _service(request).embed(texts, body.options, _disconnected(request), count=True)
        if body.encoding_format == "base64":  # float32 whatever the output_type: OpenAI's clients decode it so
            vectors: list[Any] = [base64.b64encode(np.asarray(v, "<f4").tobytes()).decode() for v in result.vectors]
        else:
            vectors = list(result.vectors)
        data = [{"object": "embedding", "index": k, "embedding": v} for k, v in enumerate(vectors)]
        usage = {"prompt_tokens": result.tokens, "total_tokens": result.tokens}
        content = {"object": "list", "data": data, "model": body.model, "usage": usage}
        return await json_answer(content, headers=_truncation_headers(result.truncated))

    @router.post(
        "/similarity",
        responses=responses("/similarity", list[float], key=key),
        summary="TEI's /similarity: the model's similarity of the source sentence's vector with each sentence's",
    )
    async def similarity(body: models.SimilarityRequest, request: Request) -> Response:
        texts = [body.inputs.source_sentence, *body.inputs.sentences]
        service = _service(request)
        result = await service.embed(texts, body.options, _disconnected(request))
        scores = similarity_of(result.vectors[:1], result.vectors[1:], model_metric(service.encoder))[0]
        return await json_answer(scores.tolist(), headers=_truncation_headers(result.truncated))

    @router.post(
        "/tokenize",
        responses=responses("/tokenize", list[list[shapes.Token]], key=key, headers=TRUNCATED),
        summary="Each input's tokens as TEI gives them: id, text, special, character offsets (and word ids)",
    )
    async def tokenize(body: models.TokenizeRequest, request: Request) -> Response:
        texts = _texts(body.inputs)
        encoded = await _service(request).tokenize(texts, body.truncate, _disconnected(request))
        answer = [_tei_tokens(item, text, body.add_special_tokens) for item, text in zip(encoded, texts)]
        return await json_answer(answer, headers=_truncation_headers([i for i, e in enumerate(encoded) if e.truncated]))


def _tei_tokens(item: Any, text: str, add_special_tokens: bool) -> list[dict]:
    """One input's tokens in TEI's shape (a special token: its name, no offsets), with bertkit's ids beside."""
    encoding = item.encoding
    rows = zip(item.ids, item.tokens, encoding.offsets, encoding.special_tokens_mask, item.word_ids(), item.type_ids)
    return [
        {
            "id": token_id,
            "text": token if special else text[start:stop],
            "special": bool(special),
            "start": None if special else start,
            "stop": None if special else stop,
            "token": token,
            "word_id": word,
            "type_id": type_id,
        }
        for token_id, token, (start, stop), special, word, type_id in rows
        if add_special_tokens or not special
    ]


def _run_routes(router: APIRouter, models: Any, key: bool, runs: list[str], rerankers: tuple[str, ...]) -> None:
    """/predict/{run}, /rerank (TEI), /v1/rerank (Cohere v1, Jina) and /v2/rerank (Cohere v2)."""
    run_name = Literal[tuple(runs)] if runs else str  # type: ignore[valid-type]
    labels = list[shapes.ClassPrediction] | list[shapes.ScorePrediction] | list[shapes.LabelSetPrediction]
    predictions = labels | list[shapes.TagPrediction] | shapes.Answer | list[shapes.Answer] | list[list[shapes.Answer]]

    @router.post(
        "/predict/{run}",
        responses=responses("/predict", predictions, (*POST_ERRORS, 404), key),
        summary="A served run's labels with probabilities, entities with character offsets, or answers (Hugging "
        "Face's question-answering shape: one answer, or a list with top_k > 1 or several questions)",
        include_in_schema=bool(runs),
    )
    async def predict(
        body: models.PredictRequest,
        request: Request,
        run: run_name = Path(description="a served run"),  # type: ignore[valid-type]
    ) -> Response:
        service = _service(request)
        # a list holds one input or more (the request model's min_length): its first says what they are
        questions = isinstance(body.inputs[0] if isinstance(body.inputs, list) else body.inputs, BaseModel)
        if questions or body.parameters is not None:
            return await json_answer(await service.answer(run, body.inputs, body.parameters, _disconnected(request)))
        return await json_answer(await service.predict(run, _texts(body.inputs), _disconnected(request)))

    ranks = bool(rerankers)

    @router.post(
        "/rerank",
        responses=responses("/rerank", list[shapes.RerankItem], (*POST_ERRORS, 404), key, TRUNCATED),
        summary="TEI's /rerank: the texts scored against the query by a served pair run, best first",
        include_in_schema=ranks,
    )
    async def rerank(body: models.RerankRequest, request: Request) -> Response:
        asked = (body.model, body.query, body.texts, body.raw_scores, body.truncate, _disconnected(request))
        ranked, _, truncated = await _service(request).rerank(*asked)
        items = [{"index": i, "score": s, **({"text": body.texts[i]} if body.return_text else {})} for i, s in ranked]
        return await json_answer(items, headers=_truncation_headers(truncated))

    @router.post(
        "/v1/rerank",
        responses=responses("/v1/rerank", shapes.CohereRerankResponse, (*POST_ERRORS, 404), key, TRUNCATED),
        summary="Cohere's and Jina's /v1/rerank: documents ranked by a served pair run (model: its name)",
        include_in_schema=ranks,
    )
    @router.post("/v2/rerank", include_in_schema=False)  # Cohere's v2 client; the same body and answer
    async def cohere_rerank(body: models.CohereRerankRequest, request: Request) -> Response:
        documents = [d if isinstance(d, str) else d.text for d in body.documents]
        asked = (body.model, body.query, documents, False, True, _disconnected(request))
        ranked, tokens, truncated = await _service(request).rerank(*asked)
        results = [{"index": i, "relevance_score": s} for i, s in ranked[: body.top_n]]
        if body.return_documents:
            results = [{**result, "document": {"text": documents[result["index"]]}} for result in results]
        meta = {"api_version": {"version": "1"}, "billed_units": {"search_units": 1}}
        content = {"id": str(uuid.uuid4()), "model": body.model, "results": results, "meta": meta}
        return await json_answer({**content, "usage": {"total_tokens": tokens}}, headers=_truncation_headers(truncated))


def _search_routes(router: APIRouter, models: Any, key: bool, loaded: bool) -> None:
    """/search over the vector indexes loaded with `--index` (bertkit's own route: TEI has none)."""
    ranked = list[shapes.SearchHit]  # one query's answer

    @router.post(
        "/search",
        responses=responses("/search", ranked | list[ranked], (*POST_ERRORS, 404), key, TRUNCATED),
        summary="The rows of a loaded vector index nearest to the query (a list per query for a list), best first",
        include_in_schema=loaded,
    )
    async def search(body: models.SearchRequest, request: Request) -> Response:
        asked = (body.index, _texts(body.query), body.top_k, body.prompt, _disconnected(request))
        hits, result = await _service(request).search(*asked)
        answer = hits[0] if isinstance(body.query, str) else hits
        return await json_answer(answer, headers=_truncation_headers(result.truncated))


def explainer_of(app: FastAPI) -> Explainer:
    """Return the app's Explainer, built once from its service's encoder and runs (or set as app.state.explainer)."""
    with _BUILD:
        if getattr(app.state, "explainer", None) is None:
            service = app.state.service
            runs = {name: getattr(run, "model", run) for name, run in service.runs.items()}
            probes = dict(getattr(app.state, "explain_probes", {}))
            app.state.explainer = Explainer(service.encoder, runs, probes, map_texts=service.settings.map_texts)
        return app.state.explainer


def _explainer_routes(router: APIRouter) -> None:
    """GET / (the page), its static files, GET /explain/info and POST /explain (all panels)."""

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    def explainer_page() -> HTMLResponse:
        return HTMLResponse(page.live_page())

    @router.get("/explain/static/{name}", include_in_schema=False)
    def explainer_static(name: str) -> FileResponse:
        if name not in page.STATIC_FILES:
            raise HTTPException(404, f"no static file {name!r}; the page uses {', '.join(page.STATIC_FILES)}.")
        return FileResponse(
            page.static_path(name), media_type=page.STATIC_FILES[name], headers={"Cache-Control": "max-age=3600"}
        )

    @router.get(
        "/explain/info",
        summary="Explainer: model facts, served runs and probes (the page's menus)",
        responses=responses("/explain/info", shapes.ExplainInfo, GET_ERRORS),
    )
    def explainer_info(request: Request) -> JSONResponse:
        return JSONResponse(explainer_of(request.app).info())

    @router.post(
        "/explain",
        summary="Explainer: every panel for one sentence (tokens, layers, attention, vector, map, predictions, probes)",
        responses=responses("/explain", shapes.ExplainResponse, POST_ERRORS),
    )
    async def explain(body: EXPLAIN_BODY, request: Request) -> JSONResponse:  # type: ignore[valid-type]
        settings = ExplainRequest(**body.model_dump(exclude_unset=True))
        explainer = explainer_of(request.app)
        result = await _service(request).call(lambda: explainer.explain(settings), explainer.work_tokens(settings))
        return await json_answer(result)  # written off the loop (FastAPI's encoder would walk every float)
