"""Pure ASGI middleware (no request buffering): API key, body size limit, and per-request metrics."""

from __future__ import annotations

import json
import time

from .metrics import Metrics
from .security import EXEMPT_PATHS, authorized


async def send_error(send, status: int, error: str, error_type: str, headers: dict[str, str] | None = None) -> None:
    """Answer with bertkit's JSON error body straight from middleware."""
    body = json.dumps({"error": error, "error_type": error_type}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class BodyTooLarge(Exception):
    """The request body passed `--max-body-bytes`."""

    def __init__(self, limit: int):
        super().__init__(f"the request body is larger than {limit} bytes (--max-body-bytes); send fewer or shorter texts.")


class ApiKeyMiddleware:
    """Every path but /health needs `Authorization: Bearer <key>`."""

    def __init__(self, app, key: str):
        self.app = app
        self.key = key.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in EXEMPT_PATHS:
            return await self.app(scope, receive, send)
        header = dict(scope["headers"]).get(b"authorization")
        if not authorized(header, self.key):
            message = "missing API key" if header is None else "wrong API key"
            return await send_error(send, 401, f"{message}: send the header 'Authorization: Bearer <key>'.",
                                    "unauthorized", {"WWW-Authenticate": "Bearer"})
        return await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Refuse a body over `limit` bytes: at once from Content-Length, or while reading a chunked body."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await send_error(send, 413, str(BodyTooLarge(self.limit)), "payload_too_large")
        seen = 0

        async def limited_receive():
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

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500

        async def timed_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                route = scope.get("route")
                endpoint = getattr(route, "path", None) or "unmatched"
                self.metrics.observe_request(endpoint, status, time.perf_counter() - started)
            await send(message)

        await self.app(scope, receive, timed_send)
