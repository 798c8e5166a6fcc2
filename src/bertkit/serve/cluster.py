"""`bertkit serve --ray`: the same service as a Ray Serve application, balanced per request over its replicas.

Two deployments. `bertkit-model` replicas each build the app `bertkit serve` runs (`build_app`: the model, its
micro-batcher and model thread, runs, indexes, every route and check) and answer requests by calling it in process.
The `bertkit` ingress behind Ray Serve's HTTP proxy forwards each request, as it came, to one of them: Ray Serve
balances per request, so a keep-alive client's requests spread over every replica. A replica that dies mid-request
is replaced by Ray Serve; the ingress sends the request once more to another replica (every bertkit route is
idempotent), and answers 503 with Retry-After if that fails too, so no request hangs. `GET /health` adds how many
replicas are ready.

`application(args)` is Ray Serve's application builder: `bertkit serve --ray` runs it, and `--print-config` writes
the `serve deploy` / KubeRay config that names it (`import_path: bertkit.serve.cluster:application`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from typing import Any

from ..errors import InputError
from .app import build_app
from .middleware import BodyLimitMiddleware, BodyTooLarge
from .settings import RayServeSettings, ServeSpec

log = logging.getLogger("bertkit.serve")

APP_NAME = "bertkit"
INGRESS, MODEL = "bertkit", "bertkit-model"
EXTRA = "pip install 'bertkit[ray]'"
RETRY_AFTER_S = 1  # what a 503 tells the client to wait: Ray Serve starts a replacement replica meanwhile
HEALTH_CACHE_S = 1.0  # how long /health reuses the controller's replica count
FORWARDED = ("method", "path", "raw_path", "query_string", "headers", "server", "client", "scheme", "http_version")


def check_ray_serve() -> None:
    """Refuse `--ray` where Ray Serve is not installed, naming the extra."""
    try:
        import ray.serve  # noqa: F401
    except ImportError:
        raise InputError(f"bertkit serve --ray needs Ray Serve: {EXTRA}.") from None


def application(args: dict, env_vars: dict | None = None) -> Any:
    """Build the Ray Serve application of `args`: the application builder of `serve run`, `serve deploy`, KubeRay.

    `args` is `{"service": ServeSpec fields, "scaling": RayServeSettings fields}`, as `--print-config` writes it;
    `env_vars` are set in each model replica (the API key's variable, when `bertkit serve --ray` runs it).
    """
    from ray import serve

    spec = ServeSpec.from_dict(args.get("service", {}))
    scaling = RayServeSettings(**args.get("scaling", {}))
    threads = max(1, int(scaling.replica_cpus))  # encoder/threads.py: a replica's torch threads are its CPUs
    options = scaling.deployment_options()
    if env_vars:
        options["ray_actor_options"]["runtime_env"] = {"env_vars": env_vars}
    model = serve.deployment(ModelReplica).options(name=MODEL, **options)
    ingress = serve.deployment(serve.ingress()(Ingress)).options(
        name=INGRESS, num_replicas=1, ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1024
    )
    return ingress.bind(model.bind(dataclasses.replace(spec, threads=threads)), spec.settings.max_body_bytes)


def config_yaml(args: dict, host: str, port: int) -> str:
    """Return the Ray Serve config of `args` (`serve deploy serve.yaml`; KubeRay's `RayService` `serveConfigV2`)."""
    config = {
        "proxy_location": "EveryNode",
        "http_options": {"host": host, "port": port},
        "applications": [
            {"name": APP_NAME, "route_prefix": "/", "import_path": f"{__name__}:application", "args": args}
        ],
    }
    return json.dumps(config, indent=2) + "\n"  # JSON is YAML: `serve deploy` reads it as written


class ModelReplica:
    """One replica: the app `bertkit serve` runs, built here, with its lifespan (the micro-batcher) running."""

    async def __init__(self, spec: ServeSpec) -> None:
        self.app, serving = build_app(spec)
        self._lifespan = self.app.router.lifespan_context(self.app)
        await self._lifespan.__aenter__()
        log.info("bertkit serve --ray replica: %s", serving)

    async def __call__(self, request: dict) -> tuple[int, list, bytes]:
        """Answer one forwarded request through the app: (status, headers, body)."""
        return await call_app(self.app, request)

    async def __del__(self) -> None:
        await self._lifespan.__aexit__(None, None, None)


class Ingress:
    """The application's HTTP face: forwards each request to a model replica, once more if that replica died."""

    def __init__(self, model: Any, max_body_bytes: int) -> None:
        self.model, self.max_body_bytes = model, max_body_bytes
        self._replicas: tuple[float, dict] = (0.0, {})

    def __serve_build_asgi_app__(self) -> Any:
        async def app(scope: dict, receive: Any, send: Any) -> None:  # a coroutine function: read as ASGI 3
            await self.relay(scope, receive, send)

        return BodyLimitMiddleware(app, self.max_body_bytes)  # a body over the limit is never buffered here

    async def relay(self, scope: dict, receive: Any, send: Any) -> None:
        """Answer lifespan events; forward an HTTP request whole and send its answer back whole (the ASGI app)."""
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        from .errors import error_response

        chunks, more = [], True
        try:
            while more:
                message = await receive()
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
        except BodyTooLarge as error:  # a chunked body past --max-body-bytes, as the app itself answers it
            await error_response(413, "payload_too_large", str(error), scope["path"])(scope, receive, send)
            return
        body = b"".join(chunks)
        request = {key: scope[key] for key in FORWARDED if key in scope} | {"body": body}
        answer = await self._answer(request)
        if answer is None:
            message = "a model replica stopped while answering; Ray Serve is starting another: retry in a second."
            retry = {"Retry-After": str(RETRY_AFTER_S)}
            await error_response(503, "unavailable", message, scope["path"], retry)(scope, receive, send)
            return
        status, headers, content = answer
        if scope["path"] == "/health" and status in (200, 503):
            content, headers = self._with_replicas(content, headers)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    async def _answer(self, request: dict) -> tuple[int, list, bytes] | None:
        from ray.exceptions import ActorUnavailableError, RayActorError

        for attempt in range(2):  # every bertkit route is idempotent: a request a dying replica held is sent again
            try:
                return await self.model.remote(request)
            except (RayActorError, ActorUnavailableError) as error:
                log.warning(
                    "a model replica failed (%s); %s", type(error).__name__, "giving up" if attempt else "retrying"
                )
        return None

    def _with_replicas(self, content: bytes, headers: list) -> tuple[bytes, list]:
        """Add `replicas: {ready, wanted}` to a /health answer (the controller's count, reused for a second)."""
        now, (when, count) = time.monotonic(), self._replicas
        if now - when > HEALTH_CACHE_S:
            count = replica_count()
            self._replicas = (now, count)
        body = json.loads(content) | {"replicas": count}
        content = json.dumps(body).encode()
        headers = [(k, str(len(content)).encode() if k.lower() == b"content-length" else v) for k, v in headers]
        return content, headers


def replica_count() -> dict:
    """Count the model deployment's replicas: how many are running and how many Ray Serve is aiming for."""
    from ray import serve

    try:
        deployment = serve.status().applications[serve.get_replica_context().app_name].deployments[MODEL]
    except (KeyError, RuntimeError, AttributeError):
        return {"ready": 0, "wanted": 0}
    states = {str(getattr(state, "value", state)): n for state, n in deployment.replica_states.items()}
    return {"ready": states.get("RUNNING", 0), "wanted": sum(states.values())}


async def call_app(app: Any, request: dict) -> tuple[int, list, bytes]:
    """Run one HTTP request through an ASGI app in process: (status, headers, body).

    The request is the scope's fields the ingress forwards and the whole body; the app sees the client connected
    until it has answered.
    """
    scope = {"type": "http", "asgi": {"version": "3.0"}, "root_path": ""} | {
        k: v for k, v in request.items() if k != "body"
    }
    answered, given = asyncio.Event(), False
    status, headers, chunks = 500, [], []

    async def receive() -> dict:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": request["body"], "more_body": False}
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                answered.set()

    try:
        await app(scope, receive, send)
    finally:
        answered.set()
    return status, headers, b"".join(chunks)


def serve_on_ray(args: dict, scaling: RayServeSettings, host: str, port: int, say: Any) -> None:
    """Run the application of `args` on Ray Serve until Ctrl-C or SIGTERM, then delete it, its requests drained.

    Ray Serve and the Ray cluster are stopped when this call started them, never another's.
    """
    import signal
    import threading

    import ray
    from ray import serve

    from ..ray.files import connect

    env = {}
    if name := args["service"].get("api_key_env"):  # the replicas read the key where they run
        import os

        env[name] = os.environ.get(name, "")
    own_cluster = connect(scaling.address)
    stop = threading.Event()
    try:
        scaling.check_cluster({"nodes": [node["Resources"] for node in ray.nodes() if node["Alive"]]})
        own_serve = not _serve_running()
        serve.start(http_options={"host": host, "port": port})
        handlers = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            serve.run(application(args, env), name=APP_NAME, route_prefix="/", blocking=False)
            low, high = scaling.replica_range
            replicas = f"{low}" if low == high else f"{low} to {high} (autoscaled)"
            where = f"Ray cluster at {ray.get_runtime_context().gcs_address}"
            say(
                f"bertkit serve --ray: {replicas} replicas × {scaling.replica_cpus:g} CPUs, {where}; http://{host}:{port}"
            )
            while not stop.wait(0.5):
                pass
        finally:
            say("bertkit serve --ray: stopping (requests in flight finish first)...")
            serve.delete(APP_NAME)
            if own_serve:
                serve.shutdown()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
    finally:
        if own_cluster:
            ray.shutdown()
    say("bertkit serve --ray: stopped.")


def _serve_running() -> bool:
    """Tell whether Ray Serve already runs on the connected cluster (another's: never shut down here)."""
    from ray import serve

    try:
        return bool(serve.status().proxies)
    except Exception:  # noqa: BLE001 (no controller yet: Serve is not running)
        return False
