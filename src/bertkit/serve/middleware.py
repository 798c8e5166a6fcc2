"""Pure ASGI middleware (no request buffering): Host and Origin checks, API key, body size, metrics.

Every refusal is the service's JSON error (serve/errors.py), answered before the request reaches a route.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .errors import ServeError, error_response
from .metrics import Metrics
from .security import authorized, host_allowed, needs_key, origin_allowed, same_origin

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send


def _header(scope: Scope, name: bytes) -> str | None:
    value = dict(scope["headers"]).get(name)
    return value.decode("latin-1") if value is not None else None


class BodyTooLarge(ServeError):
    """The request body passed `--max-body-bytes`: 413."""

    def __init__(self, limit: int) -> None:
        message = f"the request body is larger than {limit} bytes (--max-body-bytes); send fewer or shorter texts."
        super().__init__(413, "payload_too_large", message)


class LocalAccessMiddleware:
    """Refuse (403) a `Host` that does not name this server and a browser `Origin` it does not admit.

    An admitted `Origin` is this server's own or one `--allow-origin` names (see serve/security.py: DNS rebinding and
    cross-site requests).
    """

    def __init__(self, app: ASGIApp, allow_hosts: tuple[str, ...] = (), allow_origins: tuple[str, ...] = ()) -> None:
        self.app = app
        self.allow_hosts = allow_hosts
        self.allow_origins = allow_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check an HTTP request's `Host` and `Origin`, then pass it on."""
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        host = _header(scope, b"host")
        if not host_allowed(host, scope.get("server"), self.allow_hosts):
            name = (host or "").strip() or "(none)"
            message = (
                f"Host {name!r} is not a name of this server; if clients reach it by that name, start it with "
                f"--allow-host {name.rsplit(':', 1)[0] if name != '(none)' else 'NAME'}."
            )
            return await error_response(403, "host_not_allowed", message, scope["path"])(scope, receive, send)
        origin = _header(scope, b"origin")
        if origin is not None and not same_origin(origin, host) and not origin_allowed(origin, self.allow_origins):
            message = (
                f"requests from web pages of origin {origin!r} are refused; if that page is yours, start the "
                f"server with --allow-origin {origin}."
            )
            return await error_response(403, "origin_not_allowed", message, scope["path"])(scope, receive, send)
        return await self.app(scope, receive, send)


class ApiKeyMiddleware:
    """Every request but /health and the page's GETs needs `Authorization: Bearer <key>`."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.key = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the API key of a request that needs one (401 without it), then pass it on."""
        if scope["type"] != "http" or not needs_key(scope["method"], scope["path"]):
            return await self.app(scope, receive, send)
        header = dict(scope["headers"]).get(b"authorization")
        if authorized(header, self.key):
            return await self.app(scope, receive, send)
        message = f"{'missing' if header is None else 'wrong'} API key: send the header 'Authorization: Bearer <key>'."
        response = error_response(401, "unauthorized", message, scope["path"], {"WWW-Authenticate": "Bearer"})
        return await response(scope, receive, send)


class BodyLimitMiddleware:
    """Refuse a body over `limit` bytes: at once from Content-Length, or while reading a chunked body."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass a request on, refusing its body once it is over `limit` bytes."""
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            response = error_response(413, "payload_too_large", str(BodyTooLarge(self.limit)), scope["path"])
            return await response(scope, receive, send)
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        return await self.app(scope, limited_receive, send)


class MetricsMiddleware:
    """Count requests by route and status, and time them up to the start of the response."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass a request on, counting it and timing it up to the start of its response."""
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                endpoint = getattr(scope.get("route"), "path", None) or "unmatched"
                self.metrics.observe_request(endpoint, message["status"], time.perf_counter() - started)
            await send(message)

        await self.app(scope, receive, timed_send)
