"""The service's errors and their one JSON shape, for route handlers and middleware alike.

bertkit's own routes answer `{"error": "<what to do>", "error_type": "<kind>"}`; under `/v1/` the answer is OpenAI's
`{"error": {"message", "type", "param", "code"}}`, so that the `openai` client's exception carries the message.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

OPENAI_PREFIX = "/v1/"
OPENAI_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


class ServeError(Exception):
    """An error with its HTTP status and machine-readable type; the message says what to change."""

    def __init__(
        self,
        status: int,
        error_type: str,
        message: str,
        headers: dict[str, str] | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.error_type, self.headers, self.param = status, error_type, headers or {}, param


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
    status : int
        The HTTP status of the answer.
    error_type : str
        bertkit's machine-readable kind (`invalid_input`, `overloaded`, ...); OpenAI's `code` under `/v1/`.
    message : str
        One line that says what is wrong and what to do.
    path : str
        The request's path: `/v1/...` gets OpenAI's shape.
    headers : dict, optional
        Extra response headers (`Retry-After`, `WWW-Authenticate`).
    param : str, optional
        The request field the error is about (OpenAI's `param`).

    Returns
    -------
    JSONResponse
        The answer.
    """
    body: dict = {"error": message, "error_type": error_type}
    if path.startswith(OPENAI_PREFIX):
        kind = OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        body = {"error": {"message": message, "type": kind, "param": param, "code": error_type}}
    return JSONResponse(body, status_code=status, headers=headers)
