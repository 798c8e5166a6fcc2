"""bertkit serve vs a naive FastAPI endpoint (one forward per request), real HTTP over loopback, SST-2 sentences.

    flock /tmp/bertkit-cpu.lock .venv/bin/python benchmarks/serve.py [--seconds 10] [--levels 1,8,32,128] [--soak 120]

Each server runs alone in its own process with the same model and torch threads; the load generator is an async
httpx client in this process. Prints requests/s and p50/p95/p99 per concurrency, the ratios, a bare
`Encoder.embed` on one sentence, and with --soak a c=64 run of that many seconds (errors, 429s, RSS growth).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from pydantic import BaseModel


class Body(BaseModel):
    """The naive endpoint's request: TEI's `inputs`."""

    inputs: str | list[str]

ROOT = Path(__file__).resolve().parents[1]
SST2 = Path(os.environ.get("BERTKIT_DATA", ROOT.parent / "shared" / "data")) / "sst2" / "dev.tsv"


def naive_app(threads: int):
    """The way most tutorials serve a model: one forward pass per request in FastAPI's thread pool."""
    from fastapi import FastAPI

    from bertkit import Encoder

    encoder = Encoder.from_pretrained(threads=threads, concurrent_batches=1)
    app = FastAPI()

    @app.post("/embed")
    def embed(body: Body):
        return encoder.embed(body.inputs if isinstance(body.inputs, list) else [body.inputs], warn=False).tolist()

    @app.get("/health")
    def health():
        return {"status": "ok"}

    return app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(kind: str, threads: int, extra: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    if kind == "bertkit":
        command = [sys.executable, "-m", "bertkit.cli", "serve", "--port", str(port), "--threads", str(threads), *extra]
    else:
        command = [sys.executable, __file__, "--naive-server", str(port), "--threads", str(threads)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{kind} server did not start")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def load(url: str, sentences: list[str], concurrency: int, seconds: float) -> dict:
    """`concurrency` clients each sending one sentence at a time for `seconds`; latencies of 200s, counts of others."""
    latencies: list[float] = []
    codes: dict[int, int] = {}
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        async def worker(k: int):
            i = k
            while time.perf_counter() < deadline:
                began = time.perf_counter()
                try:
                    response = await client.post("/embed", json={"inputs": sentences[i % len(sentences)]})
                    code = response.status_code
                except httpx.HTTPError:
                    code = -1
                codes[code] = codes.get(code, 0) + 1
                if code == 200:
                    latencies.append(time.perf_counter() - began)
                i += concurrency

        started = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        elapsed = time.perf_counter() - started
    ms = np.array(latencies) * 1000 if latencies else np.array([float("nan")])
    return {"rps": len(latencies) / elapsed, "p50": np.percentile(ms, 50), "p95": np.percentile(ms, 95),
            "p99": np.percentile(ms, 99), "codes": codes}


def bare_embed_ms(sentences: list[str], threads: int) -> float:
    from bertkit import Encoder

    encoder = Encoder.from_pretrained(threads=threads, concurrent_batches=1)
    for s in sentences[:20]:
        encoder.embed([s], warn=False)
    times = []
    for s in sentences[:200]:
        began = time.perf_counter()
        encoder.embed([s], warn=False)
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--levels", default="1,8,32,128")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--serve-args", default="", help="extra flags for bertkit serve")
    parser.add_argument("--soak", type=float, default=0, help="seconds of c=64 load on bertkit serve after the table")
    parser.add_argument("--naive-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.naive_server:
        import uvicorn

        uvicorn.run(naive_app(args.threads), host="127.0.0.1", port=args.naive_server, log_level="warning",
                    access_log=False)
        return
    sentences = [line.split("\t")[0] for line in SST2.read_text(encoding="utf-8").splitlines() if line.strip()]
    levels = [int(x) for x in args.levels.split(",")]
    rows = {}
    for kind in ("bertkit", "naive"):
        process, url = start(kind, args.threads, args.serve_args.split())
        try:
            asyncio.run(load(url, sentences, 4, 2))  # warm-up
            for c in levels:
                rows[kind, c] = asyncio.run(load(url, sentences, c, args.seconds))
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
    bare = bare_embed_ms(sentences, args.threads)
    print(f"CPU threads {args.threads}; {args.seconds:.0f} s per level; single SST-2 dev sentences; bare Encoder.embed "
          f"on one sentence: p50 {bare:.1f} ms")
    print("| c | bertkit req/s | p50 | p95 | p99 ms | naive req/s | p50 | p95 | p99 ms | throughput x | p99 ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for c in levels:
        b, n = rows["bertkit", c], rows["naive", c]
        print(f"| {c} | {b['rps']:.0f} | {b['p50']:.1f} | {b['p95']:.1f} | {b['p99']:.1f} | {n['rps']:.0f} | "
              f"{n['p50']:.1f} | {n['p95']:.1f} | {n['p99']:.1f} | {b['rps'] / max(n['rps'], 1e-9):.2f} | {b['p99'] / n['p99']:.2f} |")
        for kind, row in (("bertkit", b), ("naive", n)):
            if set(row["codes"]) - {200}:
                print(f"    {kind} c={c} status counts: {row['codes']}")
    if args.soak:
        process, url = start("bertkit", args.threads, args.serve_args.split())
        try:
            asyncio.run(load(url, sentences, 64, 5))
            before = rss_mb(process.pid)
            result = asyncio.run(load(url, sentences, 64, args.soak))
            after = rss_mb(process.pid)
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(60)
        errors = sum(v for k, v in result["codes"].items() if k not in (200, 429))
        print(f"soak c=64 {args.soak:.0f} s: {result['rps']:.0f} req/s, p99 {result['p99']:.1f} ms, statuses "
              f"{result['codes']}, errors (not 200/429) {errors}, RSS {before:.0f} → {after:.0f} MB "
              f"({after - before:+.1f} MB), exit status {code}")


if __name__ == "__main__":
    main()
