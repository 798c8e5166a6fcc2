"""HTTP routes of the explainer: GET / (the page), its static files, GET /explain/info and POST /explain (all panels).

The routes read the server's shared state (`app.state.service`: encoder and runs), so the page explains with the
very model and runs that `/embed` and `/predict` serve; a probe record can be added with `add_routes(app, probes)`.
"""

from __future__ import annotations

import json
import threading

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from starlette.concurrency import run_in_threadpool

from ..errors import BertkitError
from . import page
from .explainer import Explainer, Settings, load_probe

MAX_BODY_BYTES = 1 << 20  # a 100k-character paste still arrives, so that the answer can say what is wrong with it
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
            app.state.explainer = Explainer(service.encoder, runs, dict(getattr(app.state, "explain_probes", {})))
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
            return _error(404, f"no static file {name!r}; the page uses {', '.join(page.STATIC_FILES)}.", "not_found")
        return FileResponse(page.static_path(name), media_type=page.STATIC_FILES[name],
                            headers={"Cache-Control": "max-age=3600"})

    @routes.get("/explain/info", summary="Explainer: model facts, served runs and probes (the page's menus)")
    def explainer_info(request: Request) -> dict:
        return explainer_of(request.app).info()

    @routes.post("/explain", summary="Explainer: every panel for one sentence (tokens, layers, attention, vector, map, "
                 "predictions, probes)")
    async def explain(request: Request):
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return _error(413, f"the request body is {len(body):,} bytes; the explainer takes up to {MAX_BODY_BYTES:,}.",
                          "payload_too_large")
        try:
            payload = json.loads(body or b"null")
        except ValueError as exc:
            return _error(400, f"the request body is not valid JSON ({exc}); send {{\"text\": \"...\"}}.", "invalid_json")
        try:
            settings = Settings.from_json(payload)
            explainer = explainer_of(request.app)
            # a plain JSONResponse: FastAPI's jsonable_encoder would walk every float of the heatmaps (~12 ms)
            return JSONResponse(await run_in_threadpool(explainer.explain, settings))
        except BertkitError as exc:
            return _error(400, str(exc), "invalid_input")
        except TypeError as exc:
            return _error(400, f"bad settings: {exc}.", "invalid_input")

    return routes


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": message, "error_type": kind}, status_code=status)
