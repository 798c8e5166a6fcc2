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
from ..serve.settings import ServeSettings
from .common import app, existing_indexes, make_encoder, running_on, say
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
    graceful_timeout: Annotated[int, Opt(help="Seconds SIGTERM waits for requests in flight.")] = 30,
    access_log: Annotated[bool, Opt("--access-log/--no-access-log", help="Log every request (off: faster).")] = False,
    log_level: Annotated[str, Opt(help="uvicorn's log level.")] = "info",
) -> None:
    """Serve embeddings (TEI and OpenAI shapes), tokenization and trained runs over HTTP, with micro-batching."""
    listening = bound_socket(host, port)  # a bad or busy port is refused before the model loads, and stays ours
    import uvicorn

    from ..serve.security import load_api_key

    settings = replace(settings, api_key=load_api_key(api_key_env, api_key_file))
    application, serving = _application(model, precision, device, threads or _cores(), run or [], index or [], settings)
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


def _application(
    model: str | None, precision: str, device: str, threads: int, run: list[str], index: list[str], settings: Any
) -> tuple[Any, str]:
    """Return the app (the model, its runs, indexes; a `bertkit probe` folder shows on the page) and what it serves."""
    from ..encoder.threads import set_threads
    from ..explain.explainer import load_probe
    from ..serve.app import create_app
    from ..serve.runs import load_runs
    from ..tasks.index import load_index
    from ..tasks.runs import parse_run_specs

    directories = parse_run_specs(run)
    probes = {name: load_probe(str(d)) for name, d in directories.items() if not (d / "bertkit.json").is_file()}
    probes = {name: record for name, record in probes.items() if record is not None}
    set_threads(threads)
    encoder = make_encoder(model, precision, device)
    runs = load_runs({name: d for name, d in directories.items() if name not in probes})
    indexes = {name: load_index(path) for name, path in parse_run_specs(index, "--index").items()}
    application = create_app(encoder, runs, settings, indexes=indexes)
    application.state.explain_probes = probes
    serving = f"{encoder.source.spec} on {running_on(encoder)} ({threads} threads), runs: {', '.join(runs) or 'none'}"
    for kind, names in (("indexes", indexes), ("probes", probes)):
        serving += f"; {kind}: {', '.join(names)}" if names else ""
    return application, serving
