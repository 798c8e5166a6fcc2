"""What every route of the service shares over HTTP: documented answers, strict JSON bodies, fast vector JSON."""

from collections.abc import Callable, Sequence
from itertools import chain, compress
from typing import Any

import numpy as np
import orjson
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute

from ..errors import brief
from .errors import OPENAI_PREFIX, ServeError
from .responses import ErrorResponse, OpenAIErrorResponse
from .security import is_json

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
POST_ERRORS = (400, 403, 413, 415, 422, 429, 500, 503)
GET_ERRORS = (403, 500)
RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}}


def responses(
    path: str, model: Any = None, codes: Sequence[int] = POST_ERRORS, key: bool = False, headers: dict | None = None
) -> dict[int | str, dict]:
    """Document a route's answers: `model` for 200 (the routes build their JSON themselves), and its errors.

    For each error code, bertkit's JSON error (OpenAI's shape under `/v1/`).
    """
    shape = OpenAIErrorResponse if path.startswith(OPENAI_PREFIX) else ErrorResponse
    documented: dict[int | str, dict] = {}
    if model is not None:
        documented[200] = {"model": model, "description": "Successful Response"}
        if headers:
            documented[200]["headers"] = headers
    for code in sorted({*codes, *([401] if key else [])}):
        documented[code] = {"model": shape, "description": ERROR_CODES[code]}
        if model is None:  # a route whose own answer is not JSON (/metrics): its errors still are
            reference = {"schema": {"$ref": f"#/components/schemas/{shape.__name__}"}}
            documented[code] = {"description": ERROR_CODES[code], "content": {"application/json": reference}}
        if code in (429, 503):
            documented[code]["headers"] = RETRY_AFTER
    return documented


class StrictJSONRequest(Request):
    """A request whose JSON body is read by orjson: strict (no NaN, 1e400 or lone surrogates) and fast."""

    async def json(self) -> Any:
        """Read the body as JSON with orjson, once."""
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())  # orjson.JSONDecodeError is a json.JSONDecodeError
        return self._json


class StrictJSONRoute(APIRoute):
    """FastAPI's route with `StrictJSONRequest` (FastAPI's documented way to change how a body is read)."""

    def get_route_handler(self) -> Callable:
        """Wrap FastAPI's handler: the request becomes a `StrictJSONRequest`; a POST body must be JSON, not empty.

        A body that is not `application/json` is a 415: a web page's plain form (text/plain, form encoding) is a
        request a browser sends cross-site without asking the server first.
        """
        handler = super().get_route_handler()

        async def strict(request: Request) -> Any:
            request = StrictJSONRequest(request.scope, request.receive)
            kind = request.headers.get("content-type")
            if request.method == "POST" and not is_json(kind):
                got = kind.split(";", 1)[0].strip() if kind else "none"
                message = (
                    f"the request body must be JSON sent as 'Content-Type: application/json' (got {got}); with curl "
                    "use --json '{...}' or -H 'Content-Type: application/json'."
                )
                raise ServeError(415, "unsupported_media_type", message)
            # the body is read here, not inside FastAPI (which answers any failure there with a 400): a body over
            # the limit is a 413 and a client gone mid-body a 499, as the app's handlers say
            if request.method == "POST":
                await _refuse_empty_or_deep(request)
            return await handler(request)

        return strict


async def _refuse_empty_or_deep(request: StrictJSONRequest) -> None:
    """Refuse an empty body (400) and one nested deeper than `MAX_NESTING` (422), before FastAPI reads the body."""
    if not await request.body():
        error = {"type": "json_invalid", "loc": ("body", 0), "msg": "empty", "ctx": {"error": "no body"}}
        raise RequestValidationError([error])
    try:  # parsed once: FastAPI's handler gets the same parsed body
        body = await request.json()
    except orjson.JSONDecodeError:  # not JSON: FastAPI's handler answers it (400, invalid_json)
        return
    fields = body.items() if isinstance(body, dict) else [("body", body)]  # the first field too deep, shown by name
    field = next((brief(name, 80) for name, value in fields if nested_deeper(value)), None)
    if field is not None:  # nothing of its value is shown
        message = f"{field}: lists or objects nested more than {MAX_NESTING} deep; no field of this API takes that."
        raise ServeError(422, "validation_error", message, param=field)


# lists and objects inside each other in one field's value: no field of the service takes more than two; orjson reads
# up to 1024, deep enough that Python code walking such a value (its repr, an error message, a renderer) recurses past
# Python's limit
MAX_NESTING = 32
_CONTAINERS = frozenset({list, dict})


def nested_deeper(value: Any, limit: int = MAX_NESTING) -> bool:
    """Say whether JSON `value` holds lists or objects more than `limit` deep, walked level by level (no recursion).

    Parameters
    ----------
    value : Any
        A value as a JSON reader returns it (dicts, lists, strings, numbers, booleans, None).
    limit : int
        How many lists and objects inside each other are allowed; `[[1]]` is 2 deep, `1` is 0.

    Returns
    -------
    bool
        True when `value` nests deeper than `limit`.
    """
    level = [value] if type(value) in _CONTAINERS else []
    for _ in range(limit):
        if not level:
            return False
        items = list(chain.from_iterable(c.values() if type(c) is dict else c for c in level))
        level = list(compress(items, map(_CONTAINERS.__contains__, map(type, items))))  # the lists and objects in them
    return bool(level)


def _array_fallback(value: Any) -> Any:
    if isinstance(value, np.ndarray):  # not C-contiguous: orjson hands it here
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


async def json_answer(content: Any, headers: dict[str, str] | None = None) -> Response:
    """Answer `content` as JSON, written off the event loop one list item or dict entry at a time.

    orjson holds the GIL while it writes, so one call per piece lets the loop answer other requests (/health) in
    between.
    """
    from ..encoder.threads import off_the_loop  # here: this module loads before torch

    body = await off_the_loop(_render, content)
    return Response(body, media_type="application/json", headers=headers)


def _render(content: Any) -> bytes:
    """Write `content` as orjson's bytes (the same bytes as one `orjson.dumps`), in pieces of at most one row."""
    if isinstance(content, dict):
        return b"{" + b",".join(_dumps(str(key)) + b":" + _render(value) for key, value in content.items()) + b"}"
    nested = (
        isinstance(content, (list, tuple)) and bool(content) and isinstance(content[0], (list, tuple, dict, np.ndarray))
    )
    if nested or (isinstance(content, np.ndarray) and content.ndim > 1):
        return b"[" + b",".join(_render(item) for item in content) + b"]"
    return _dumps(content)


def _dumps(content: Any) -> bytes:
    return orjson.dumps(content, default=_array_fallback, option=orjson.OPT_SERIALIZE_NUMPY)
