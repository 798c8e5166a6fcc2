"""HTTP routes of the explainer: GET / (the page), its static files, GET /explain/info and POST /explain (all panels).

The routes read the server's shared state (`app.state.service`: encoder, runs and the batcher), so the page explains
with the very model and runs that `/embed` and `/predict` serve, and `POST /explain` runs on the service's model
thread under its queue limit like every other model call. Errors are raised, and answered by the app's handlers in
the service's one JSON error shape. A probe record can be added with `add_routes(app, probes)`.
"""

from __future__ import annotations

import threading

import orjson
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException

from . import page
from .explainer import Explainer, Settings, load_probe

_BUILD = threading.Lock()


def add_routes(app: FastAPI, probes: dict[str, str] | None = None) -> None:
    """Mount the page on a serve app; `probes` maps names to `bertkit probe` output directories."""
    records = {name: load_probe(directory) for name, directory in (probes or {}).items()}
    app.state.explain_probes = {name: record for name, record in records.items() if record is not None}
    app.include_router(router())


def explainer_of(app) -> Explainer:
    """The app's Explainer, built once from its service's encoder and runs (or set directly as app.state.explainer)."""
    with _BUILD:
        if getattr(app.state, "explainer", None) is None:
            service = app.state.service
            runs = {name: getattr(run, "model", run) for name, run in service.runs.items()}
            app.state.explainer = Explainer(
                service.encoder,
                runs,
                dict(getattr(app.state, "explain_probes", {})),
                map_texts=service.settings.map_texts,
            )
        return app.state.explainer


def router() -> APIRouter:
    """The page, its static files, /explain/info and POST /explain."""
    routes = APIRouter()

    @routes.get("/", response_class=HTMLResponse, include_in_schema=False)
    def explainer_page() -> HTMLResponse:
        return HTMLResponse(page.live_page())

    @routes.get("/explain/static/{name}", include_in_schema=False)
    def explainer_static(name: str):
        if name not in page.STATIC_FILES:
            raise HTTPException(404, f"no static file {name!r}; the page uses {', '.join(page.STATIC_FILES)}.")
        return FileResponse(
            page.static_path(name), media_type=page.STATIC_FILES[name], headers={"Cache-Control": "max-age=3600"}
        )

    @routes.get("/explain/info", summary="Explainer: model facts, served runs and probes (the page's menus)")
    def explainer_info(request: Request) -> dict:
        return explainer_of(request.app).info()

    @routes.post(
        "/explain",
        summary="Explainer: every panel for one sentence (tokens, layers, attention, vector, map, predictions, probes)",
    )
    async def explain(request: Request):
        settings = Settings.from_json(_json(await request.body()))
        explainer = explainer_of(request.app)
        result = await request.app.state.service.call(
            lambda: explainer.explain(settings), explainer.work_tokens(settings)
        )
        # a plain JSONResponse: FastAPI's jsonable_encoder would walk every float of the heatmaps (~12 ms)
        return JSONResponse(result)

    return routes


def _json(body: bytes):
    """The body as JSON, or the app's `invalid_json` error."""
    try:
        return orjson.loads(body or b"null")  # strict: no NaN, 1e400 or lone surrogates (json.loads takes them)
    except orjson.JSONDecodeError as exc:
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error", "ctx": {"error": str(exc)}}]
        ) from None
