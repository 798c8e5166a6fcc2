"""HTTP routes of the explainer: GET / (the page), its static files, GET /explain/info and POST /explain (all panels).

The page explains with the very model and runs that `/embed` and `/predict` serve (`app.state.service`), and
`POST /explain` runs on the service's model thread under its queue limit like every other model call.
"""

import threading

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException

from ..explain import page
from ..explain.explainer import Explainer, Settings, load_probe
from .responses import ExplainInfo, ExplainResponse
from .schemas import ExplainRequest
from .web import GET_ERRORS, POST_ERRORS, StrictJSONRoute, json_answer, responses

_BUILD = threading.Lock()


def add_routes(app: FastAPI, probes: dict[str, str] | None = None) -> None:
    """Mount the page on a serve app; `probes` maps names to `bertkit probe` output directories."""
    records = {name: load_probe(directory) for name, directory in (probes or {}).items()}
    app.state.explain_probes = {name: record for name, record in records.items() if record is not None}
    app.include_router(router())


def explainer_of(app: FastAPI) -> Explainer:
    """Return the app's Explainer, built once from its service's encoder and runs (or set as app.state.explainer)."""
    with _BUILD:
        if getattr(app.state, "explainer", None) is None:
            service = app.state.service
            runs = {name: getattr(run, "model", run) for name, run in service.runs.items()}
            probes = dict(getattr(app.state, "explain_probes", {}))
            app.state.explainer = Explainer(service.encoder, runs, probes, map_texts=service.settings.map_texts)
        return app.state.explainer


def router() -> APIRouter:
    """Route the page, its static files, /explain/info and POST /explain."""
    routes = APIRouter(route_class=StrictJSONRoute)

    @routes.get("/", response_class=HTMLResponse, include_in_schema=False)
    def explainer_page() -> HTMLResponse:
        return HTMLResponse(page.live_page())

    @routes.get("/explain/static/{name}", include_in_schema=False)
    def explainer_static(name: str) -> FileResponse:
        if name not in page.STATIC_FILES:
            raise HTTPException(404, f"no static file {name!r}; the page uses {', '.join(page.STATIC_FILES)}.")
        return FileResponse(
            page.static_path(name), media_type=page.STATIC_FILES[name], headers={"Cache-Control": "max-age=3600"}
        )

    @routes.get(
        "/explain/info",
        summary="Explainer: model facts, served runs and probes (the page's menus)",
        responses=responses("/explain/info", ExplainInfo, GET_ERRORS),
    )
    def explainer_info(request: Request) -> JSONResponse:
        return JSONResponse(explainer_of(request.app).info())

    @routes.post(
        "/explain",
        summary="Explainer: every panel for one sentence (tokens, layers, attention, vector, map, predictions, probes)",
        responses=responses("/explain", ExplainResponse, POST_ERRORS),
    )
    async def explain(body: ExplainRequest, request: Request) -> JSONResponse:
        settings = Settings.from_json(body.model_dump(exclude_unset=True))
        explainer = explainer_of(request.app)
        result = await request.app.state.service.call(
            lambda: explainer.explain(settings), explainer.work_tokens(settings)
        )
        return await json_answer(result)  # written off the loop (FastAPI's encoder would walk every float)

    return routes
