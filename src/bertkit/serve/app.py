"""`create_app`: the FastAPI app of `bertkit serve` — JSON errors, middleware, the batcher's lifespan, the routes.

Other faces extend the app with `create_app(..., routers=[...])` or `app.include_router(...)`; the shared state
(encoder, runs, batcher, metrics, settings) is `app.state.service`.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .. import __version__
from ..encoder.encode import Encoder
from ..encoder.options import EmbedOptions
from ..encoder.threads import release_openmp_threads
from ..errors import BertkitError, brief
from .errors import OPENAI_PREFIX, ServeError, error_response
from .middleware import ApiKeyMiddleware, BodyLimitMiddleware, LocalAccessMiddleware, MetricsMiddleware
from .routes import service_routes
from .runs import ServedRun
from .schemas import Vocabulary, check_option
from .service import ClientGone, Service
from .settings import ServeSettings, ServeSpec
from .web import nested_deeper

if TYPE_CHECKING:
    from ..tasks.index import VectorIndex

log = logging.getLogger("bertkit.serve")
TOO_MANY = ("inputs", "input", "texts", "documents", "sentences")
NOT_SERVED = (("path", "run"), ("body", "model"))
HTTP_KINDS = {404: "not_found", 405: "method_not_allowed"}


def vocabulary(service: Service) -> Vocabulary:
    """List what this server's requests may say: its limits and its model's option values."""
    encoder = service.encoder
    every = "cls+mean+max" if encoder.num_layers else "mean"  # a static model's rows are averaged only
    widest = encoder.output_dim(EmbedOptions(layers="all:concat", pooling=every, dense=False))
    return Vocabulary(
        max_inputs=service.settings.max_inputs,
        max_dimensions=max(widest, encoder.output_dim(EmbedOptions())),  # its own vector: after its Dense layers
        model=encoder,
        model_names=tuple(sorted(service.model_names)),
        prompt_names=tuple(sorted(encoder.info()["prompts"])),
        rerankers=tuple(sorted(name for name, run in service.runs.items() if run.ranks)),
        indexes=tuple(sorted(service.indexes)),
        max_chars=service.settings.max_body_bytes,
    )


def build_app(spec: ServeSpec) -> tuple[FastAPI, str]:
    """Return the app of `spec` and what it serves, in words: `bertkit serve`'s app, and each `--ray` replica's.

    The model, its runs and indexes; a `bertkit probe` folder among the runs shows on the explainer page.
    """
    from ..encoder.devices import describe
    from ..encoder.threads import set_threads
    from ..explain.explainer import load_probe
    from ..tasks.index import load_index
    from ..tasks.runs import parse_run_specs
    from .runs import load_runs
    from .security import load_api_key

    directories = parse_run_specs(list(spec.runs))
    probes = {name: load_probe(str(d)) for name, d in directories.items() if not (d / "bertkit.json").is_file()}
    probes = {name: record for name, record in probes.items() if record is not None}
    set_threads(spec.threads)
    settings = dataclasses.replace(spec.settings, api_key=load_api_key(spec.api_key_env, spec.api_key_file))
    encoder = Encoder.from_pretrained(spec.model, precision=spec.precision, device=spec.device)
    runs = load_runs({name: d for name, d in directories.items() if name not in probes})
    indexes = {name: load_index(path) for name, path in parse_run_specs(list(spec.indexes), "--index").items()}
    application = create_app(encoder, runs, settings, indexes=indexes)
    application.state.explain_probes = probes
    where = f"{describe(encoder.device)}, {encoder.precision}"
    serving = f"{encoder.source.spec} on {where} ({spec.threads} threads), runs: {', '.join(runs) or 'none'}"
    for kind, names in (("indexes", indexes), ("probes", probes)):
        serving += f"; {kind}: {', '.join(names)}" if names else ""
    return application, serving


def create_app(
    encoder: Encoder | None = None,
    runs: dict[str, ServedRun] | None = None,
    settings: ServeSettings | None = None,
    *,
    routers: Sequence[APIRouter] = (),
    indexes: dict[str, VectorIndex] | None = None,
) -> FastAPI:
    """Make the service app for `encoder` (default: the packaged model), `runs` and vector `indexes`.

    The indexes are searched at /search. Call it once per process.
    """
    service = Service(encoder or Encoder.from_pretrained(), runs, settings, indexes)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # the model and the web stack are half a million long-lived objects: frozen, a full collection never scans
        # them (a stall of a few hundred milliseconds in some request's latency)
        gc.collect()
        gc.freeze()
        # the main thread's OpenMP team, left from loading, makes libgomp's workers stop spin-waiting: int8's many
        # small ops pay a wake-up each (README, serving); fp32 was faster with the team kept
        if service.encoder.precision == "int8":
            release_openmp_threads()
        service.batcher.start()
        try:
            yield
        finally:  # uvicorn has finished the requests in flight; the queue drains what is still waiting
            await service.batcher.stop()

    app = FastAPI(
        title="bertkit serve",
        version=__version__,
        lifespan=lifespan,
        description="Embeddings from any layer with any pooling, tokenization and predictions of trained runs.",
    )
    app.state.service = service
    _add_error_handlers(app)
    app.include_router(service_routes(service, vocabulary(service)))  # the explainer page's routes too, at GET /
    for router in routers:
        app.include_router(router)
    _add_middleware(app, service.settings, service.metrics)
    return app


def _add_middleware(app: FastAPI, settings: ServeSettings, metrics: Any) -> None:
    """Add the middleware, outermost first.

    Metrics see every answer; Host and Origin are checked before anything else, CORS answers (preflight included)
    come before the key check, and the key before the body is read.
    """
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    if settings.api_key:
        app.add_middleware(ApiKeyMiddleware, key=settings.api_key)
    if settings.allow_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.allow_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
            max_age=600,
            expose_headers=["Retry-After", "X-Bertkit-Truncated", "X-Bertkit-Truncated-Inputs"],
        )
    app.add_middleware(LocalAccessMiddleware, allow_hosts=settings.allow_hosts, allow_origins=settings.allow_origins)
    app.add_middleware(MetricsMiddleware, metrics=metrics)


def _validation_answer(request: Request, exc: RequestValidationError) -> tuple[int, str, str, str | None]:
    """Return (status, kind, message, field) for a request FastAPI could not parse.

    400 for a body that is not JSON, 413 for more texts than --max-inputs, 404 for a run or model not served, the
    library's own message for an option this model does not take, else 422 naming the fields.
    """
    errors = exc.errors()
    refused = next((e for e in errors if e.get("type") == "invalid_input"), None)  # an option the library refused
    if refused is not None:
        return 422, "invalid_input", refused["msg"], refused.get("ctx", {}).get("field")
    bad_json = next((e for e in errors if e.get("type") == "json_invalid"), None)
    if bad_json is not None:
        detail = brief(bad_json.get("ctx", {}).get("error", ""))
        return 400, "invalid_json", f"the request body is not valid JSON ({detail}); send a JSON object.", None
    for error in errors:
        answer = _special(request, error)
        if answer is not None:
            return answer
    parts: dict[str, str] = {}
    for error in sorted(errors, key=lambda e: e.get("type") != "extra_forbidden"):  # an unknown field first
        where = _where(error)
        if where not in parts:
            message = error.get("msg", "invalid")
            if error.get("type") == "extra_forbidden":
                message = f"unknown field {str(error['loc'][-1])!r}; check its spelling"
            elif error.get("type") == "wrong_shape":
                message = f"{message}, not {type(error.get('input')).__name__}"
            elif where.split(".")[0] in ("inputs", "input") and error.get("type") == "string_type":
                message = f"must be a string, not {type(error.get('input')).__name__}"
            parts[where] = message
    text = "; ".join(f"{where}: {brief(message)}" for where, message in list(parts.items())[:4])
    first = next((str(e["loc"][1]) for e in errors if len(e.get("loc", ())) > 1), None)
    return 422, "validation_error", f"{text}.", first


_FIELD = re.compile(r"[a-z_][a-z0-9_]*")
_TYPE_TAGS = {"str", "int", "float", "bool", "none", "list", "dict"}


def _tags(error: dict) -> list[bool]:
    """Which parts of an error's location are pydantic's names for a union's member (`list[constrained-str]`).

    An unknown field's name (the last part of `extra_forbidden`) is the client's, whatever its spelling.
    """
    loc = error.get("loc", ())
    user = len(loc) - 1 if error.get("type") == "extra_forbidden" else -1
    return [
        i != user and isinstance(p, str) and (not _FIELD.fullmatch(p) or p in _TYPE_TAGS) for i, p in enumerate(loc)
    ]


def _where(error: dict) -> str:
    """Name the field an error is about as the request does: `inputs.1`, `inputs.context` (no union tags)."""
    kept = [str(p) for p, is_tag in zip(error.get("loc", ()), _tags(error)) if p != "body" and not is_tag]
    if error.get("type") == "extra_forbidden" and len(kept) > 1:  # the message names it: where it was sent
        kept.pop()
    return ".".join(kept) or "body"


def _special(request: Request, error: dict) -> tuple[int, str, str, str | None] | None:
    """Answer an error that is about a limit, a name not served or an option this model does not take."""
    service = request.app.state.service
    loc, kind, value = tuple(str(p) for p in error.get("loc", ())), error.get("type"), error.get("input")
    field = loc[1] if len(loc) > 1 else None
    if nested_deeper(value):  # never shown: its text alone recurses past Python's limit (a route of another face)
        return None
    if loc[:2] in NOT_SERVED and kind in ("literal_error", "enum"):
        if loc == ("path", "run"):
            served = ", ".join(sorted(service.runs)) or "none (start the server with --run NAME=DIR)"
            return 404, "unknown_run", f"no run named {brief(value)!r}; served runs: {served}.", None
        if request.url.path.startswith(OPENAI_PREFIX + "embeddings"):
            names = ", ".join(sorted(service.model_names))
            return 404, "model_not_found", f"model {brief(value)!r} is not served here; use one of: {names}.", field
        try:  # a served run that does not rerank: the service says why
            service.reranker(str(value))
        except ServeError as exc:
            return exc.status, exc.error_type, str(exc), field
        return 404, "unknown_run", f"no served reranker named {brief(value)!r}.", field
    if field in TOO_MANY and kind == "too_long" and len(loc) <= 3:
        most = service.settings.max_inputs
        message = f"{field} has more than {most} texts; this server takes at most {most} per request (--max-inputs)."
        return 413, "too_many_inputs", message + " Split them over several requests.", field
    if field in TOO_MANY and kind == "too_short" and len(loc) <= 3:
        return 422, "invalid_input", f"{field} is an empty list; give at least one text.", field
    out_of_range = kind in ("literal_error", "enum", "none_required", "greater_than_equal", "less_than_equal")
    said = check_option(service.encoder, field, value) if len(loc) == 2 and out_of_range else None
    if said is not None:  # a value outside an option's schema: the library's own words for it
        return 422, "invalid_input", said, field
    if request.url.path == "/explain" and field in ("text", "compare", "pair") and len(loc) == 2:
        from ..explain.request import check_text

        try:
            check_text(value, field)
        except BertkitError as exc:
            return 422, "invalid_input", str(exc), field
    return None


def _http_message(request: Request, exc: StarletteHTTPException) -> str:
    if exc.detail != HTTPStatus(exc.status_code).phrase:  # a route's own message
        return str(exc.detail)
    if exc.status_code == 404:
        return f"no endpoint {brief(request.url.path)}; see /docs for the API."
    if exc.status_code == 405:
        return f"{request.method} is not allowed on {brief(request.url.path)}."
    return str(exc.detail)


def _error_answer(request: Request, exc: Exception) -> tuple[int, str, str, dict | None, str | None]:
    """Return (status, kind, message, headers, field) of the answer to an error."""
    if isinstance(exc, ServeError):  # the batcher's Overloaded and ShuttingDown, the body limit's BodyTooLarge too
        return exc.status, exc.error_type, str(exc), exc.headers, exc.param
    if isinstance(exc, BertkitError):  # what the library refused of the request (its options are checked earlier)
        return 422, "invalid_input", brief(exc, 500), None, None
    if isinstance(exc, RequestValidationError):
        status, kind, message, field = _validation_answer(request, exc)
        return status, kind, message, None, field
    if isinstance(exc, StarletteHTTPException):
        kind = HTTP_KINDS.get(exc.status_code, "http_error")
        return exc.status_code, kind, _http_message(request, exc), exc.headers, None
    if isinstance(exc, (ClientGone, ClientDisconnect)):  # ClientDisconnect: gone while its body was being read
        return 499, "client_closed_request", "the client closed the connection; the request was dropped.", None, None
    log.error("request %s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, brief(exc))
    message = "the server failed on this request (it keeps serving others); the server log has the details."
    return 500, "internal_error", message, None, None


def _add_error_handlers(app: FastAPI) -> None:
    """Answer every error in the service's JSON error shape (serve/errors.py)."""

    async def answer(request: Request, exc: Exception) -> JSONResponse:
        status, kind, message, headers, field = _error_answer(request, exc)
        return error_response(status, kind, message, request.url.path, headers, field)

    handled = (ServeError, BertkitError, RequestValidationError, StarletteHTTPException, ClientGone, ClientDisconnect)
    for error in (*handled, Exception):
        app.add_exception_handler(error, answer)
