"""`bertkit serve`: the HTTP service (embeddings, tokenization, served runs) under uvicorn."""

from __future__ import annotations

import errno
import os
import signal
import socket
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import InputError
from ..serve.settings import RayServeSettings, ServeSettings, ServeSpec
from .common import app, existing_indexes, say
from .options import Device, Generated, Model, Precision, Runs, Threads, from_fields


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def bound_socket(host: str, port: int) -> socket.socket:
    """Bind a TCP socket to host:port, to be handed to uvicorn later.

    The port is checked (range, free, allowed) before anything loads, and nothing else can take it meanwhile.
    """
    if not 1 <= port <= 65535:
        raise InputError(f"--port {port}: give a port from 1 to 65535 (e.g. 8080).")
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise InputError(f"--host {host}: not an address this machine can bind ({exc.strerror}).") from None
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a just-closed port is free
    try:
        listening.bind((host, port))
    except OSError as exc:
        listening.close()
        if exc.errno == errno.EADDRINUSE:
            raise InputError(
                f"--port {port}: {host}:{port} is already in use (another server?); stop it or choose another --port."
            ) from None
        raise InputError(f"--host {host} --port {port}: cannot listen there ({exc.strerror}).") from None
    return listening


Opt = typer.Option


@app.command()
@from_fields(RayServeSettings, "scaling", group="Ray")
@from_fields(ServeSettings, "settings")
def serve(
    ctx: typer.Context,
    model: Model = None,
    run: Runs = None,
    index: Annotated[
        list[str] | None,
        Opt(
            metavar="[NAME=]FILE",
            callback=existing_indexes,
            help="Answer POST /search from an index of `bertkit index` (NAME: the file's stem by default; repeatable). "
            "Its vectors must be this model's.",
        ),
    ] = None,
    host: Annotated[str, Opt(help="Address to bind (default loopback only).")] = "127.0.0.1",
    port: Annotated[int, Opt("--port", help="Port to listen on.")] = 8080,
    precision: Precision = "fp32",
    device: Device = "auto",
    threads: Threads = None,
    api_key_env: Annotated[
        str | None, Opt(help="Require this variable's value as 'Authorization: Bearer <key>' (not /health, the page).")
    ] = None,
    api_key_file: Annotated[Path | None, Opt(help="The same, with the key read from a file.")] = None,
    settings: Generated = None,
    ray: Annotated[
        bool, Opt("--ray", help="Serve as a Ray Serve application: replicas balanced per request (the Ray options).")
    ] = False,
    scaling: Generated = None,
    graceful_timeout: Annotated[int, Opt(help="Seconds SIGTERM waits for requests in flight.")] = 30,
    access_log: Annotated[bool, Opt("--access-log/--no-access-log", help="Log every request (off: faster).")] = False,
    log_level: Annotated[str, Opt(help="uvicorn's log level.")] = "info",
) -> None:
    """Serve embeddings (TEI and OpenAI shapes), tokenization and trained runs over HTTP, with micro-batching.

    --ray serves the same application on Ray Serve: --replicas N (or --autoscale MIN:MAX) replicas of --replica-cpus
    each, on a local Ray cluster or the one at --address; --print-config writes its config for `serve deploy`.
    """
    from ..serve.security import load_api_key

    load_api_key(api_key_env, api_key_file)  # a missing key is refused before anything starts
    key_file = str(Path(api_key_file).resolve()) if api_key_file else None
    spec = ServeSpec(
        model,
        precision,
        device,
        threads or _cores(),
        tuple(run or ()),
        tuple(index or ()),
        settings,
        api_key_env,
        key_file,
    )
    if ray or scaling != RayServeSettings():
        _serve_on_ray(ray, spec, scaling, host, port)
        return
    listening = bound_socket(host, port)  # a bad or busy port is refused before the model loads, and stays ours
    import uvicorn

    from ..serve.app import build_app

    application, serving = build_app(spec)
    settings = application.state.service.settings
    if host in ("0.0.0.0", "::") and not settings.allow_hosts:
        say(
            f"note: bound to {host}: requests are answered when their Host header is the address they reached or a "
            "localhost name; give --allow-host NAME for each name clients use (or '*' behind a proxy that checks it).",
            warning=True,
        )
    say(f"bertkit serve: {serving}; http://{host}:{port}")
    config = uvicorn.Config(
        application,
        host=host,
        port=port,
        workers=1,
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=graceful_timeout,
        # seconds an idle keep-alive connection stays open (nginx's default), longer than clients keep idle connections
        # (httpx 5 s, aiohttp 15 s): the client closes first, so a request never meets a connection the server is
        # closing at that moment (a reset that POST clients do not retry)
        timeout_keep_alive=75,
        server_header=False,
    )
    # uvicorn drains on SIGTERM, then restores this handler and re-raises the signal. SIG_IGN (not a Python no-op,
    # which interpreter teardown resets to the default) makes that, and any repeat during teardown, exit status 0.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    uvicorn.Server(config).run(sockets=[listening])
    say("bertkit serve: stopped.")


def _serve_on_ray(ray: bool, spec: Any, scaling: RayServeSettings, host: str, port: int) -> None:
    """`bertkit serve --ray`: check everything here, then print the config or run the application on Ray Serve."""
    from dataclasses import asdict

    from ..tasks.runs import parse_run_specs

    if not ray:
        raise InputError("--replicas, --autoscale, --replica-cpus, --address, --print-config: add --ray to use them.")
    from ..serve.cluster import check_ray_serve, config_yaml, serve_on_ray

    check_ray_serve()
    model = str(Path(spec.model).resolve()) if spec.model and Path(spec.model).exists() else spec.model
    runs = tuple(f"{name}={path.resolve()}" for name, path in parse_run_specs(list(spec.runs)).items())
    indexes = tuple(f"{name}={path.resolve()}" for name, path in parse_run_specs(list(spec.indexes), "--index").items())
    spec = replace(spec, model=model, runs=runs, indexes=indexes, threads=None)  # paths as every node reads them
    deployed = {k: v for k, v in asdict(scaling).items() if k not in ("address", "print_config")}
    args = {"service": spec.to_dict(), "scaling": deployed}
    if scaling.print_config:
        typer.echo(config_yaml(args, host, port), nl=False)
        return
    bound_socket(host, port).close()  # a bad or busy port is refused now; Ray Serve's proxy binds it
    serve_on_ray(args, scaling, host, port, say)
