"""The service's one JSON error shape, for route handlers and middleware alike.

bertkit's own routes answer `{"error": "<what to do>", "error_type": "<kind>"}`. Under `/v1/` (OpenAI's API) the
answer is OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, so that the `openai` client puts the
message into the exception it raises (`str(exc)`, `exc.message`) instead of only `Error code: 404`.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

OPENAI_PREFIX = "/v1/"


def openai_type(status: int) -> str:
    """OpenAI's error `type` for an HTTP status (bertkit's own kind goes into `code`)."""
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def error_body(status: int, error_type: str, message: str, path: str = "", param: str | None = None) -> dict:
    """Return the error as JSON content: bertkit's shape, or OpenAI's under `/v1/`.

    Parameters
    ----------
    status : int
        The HTTP status of the answer.
    error_type : str
        bertkit's machine-readable kind (`invalid_input`, `overloaded`, ...); OpenAI's `code` under `/v1/`.
    message : str
        One line that says what is wrong and what to do.
    path : str
        The request's path: `/v1/...` gets OpenAI's shape.
    param : str, optional
        The request field the error is about (OpenAI's `param`).

    Returns
    -------
    dict
        The JSON content of the answer.
    """
    if path.startswith(OPENAI_PREFIX):
        return {"error": {"message": message, "type": openai_type(status), "param": param, "code": error_type}}
    return {"error": message, "error_type": error_type}


def error_response(
    status: int,
    error_type: str,
    message: str,
    path: str = "",
    headers: dict[str, str] | None = None,
    param: str | None = None,
) -> JSONResponse:
    """Return the error as a response; also an ASGI app: middleware answers with `await response(scope, receive, send)`.

    Parameters
    ----------
    status, error_type, message, path, param
        As for `error_body`.
    headers : dict, optional
        Extra response headers (`Retry-After`, `WWW-Authenticate`).

    Returns
    -------
    JSONResponse
        The answer.
    """
    return JSONResponse(error_body(status, error_type, message, path, param), status_code=status, headers=headers)
