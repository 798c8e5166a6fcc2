"""bertkit serve vs a naive FastAPI endpoint (one forward pass per request), real HTTP over loopback, SST-2 sentences.

    python benchmarks/serve.py [--seconds 10] [--repeats 3] [--levels 1,8,32,128] [--precisions fp32,bf16] [--soak 120]
    python benchmarks/serve.py --ray [--levels 16,32]

`--ray`: `bertkit serve --ray` on a local Ray cluster (Ray Serve's HTTP proxy, per-request balancing), the same wrk
load: 2 replicas × 1 CPU against 1 replica × 1 CPU (what a second replica adds to keep-alive clients), and 1 replica
× 2 CPUs against plain `bertkit serve --threads 2` (what the proxy and the ingress cost); fp32.

The load generator is wrk (Debian: apt-get install wrk), a C program on one thread, so it takes little of the CPU
the servers share with it; benchmarks/wrk_embed.lua sends one SST-2 dev sentence per request (TEI's `{"inputs": ...}`)
and reports p50/p95/p99. Each server runs alone in its own process with the same model, precision and torch threads.
Every level runs `--repeats` times; the table shows the medians. Also printed: a bare `Encoder.embed` on one sentence
(the c=1 reference) and, with --soak, a run of that many seconds at 64 clients (statuses, RSS sampled every 5 s, exit
status after SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
SST2 = Path(os.environ.get("BERTKIT_DATA", ROOT.parent / "shared" / "data")) / "sst2" / "dev.tsv"
WRK_SCRIPT = Path(__file__).with_name("wrk_embed.lua")


class Body(BaseModel):
    """The naive endpoint's request: TEI's `inputs`."""

    inputs: str | list[str]


def naive_app(threads: int, precision: str):
    """The way most tutorials serve a model: one forward pass per request in FastAPI's thread pool."""
    from fastapi import FastAPI

    from bertkit import Encoder, set_threads
    from bertkit.encoder.threads import release_openmp_threads

    set_threads(threads)
    encoder = Encoder.from_pretrained(precision=precision, concurrent_batches=1)
    if precision == "int8":
        release_openmp_threads()  # as bertkit serve does (see serve/app.py): the comparison is of batching alone
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


def start(kind: str, threads: int, precision: str, extra: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    if kind == "ray":
        command = [sys.executable, "-m", "bertkit.cli", "serve", "--port", str(port), "--ray", *extra]
    elif kind == "bertkit":
        command = [
            sys.executable,
            "-m",
            "bertkit.cli",
            "serve",
            "--port",
            str(port),
            "--threads",
            str(threads),
            "--precision",
            precision,
            *extra,
        ]
    else:
        command = [
            sys.executable,
            __file__,
            "--naive-server",
            str(port),
            "--threads",
            str(threads),
            "--precisions",
            precision,
        ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            health = httpx.get(url + "/health", timeout=1)
            replicas = health.json().get("replicas") if health.status_code == 200 else None
            if health.status_code == 200 and (replicas is None or replicas["ready"] == replicas["wanted"]):
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{kind} server did not start")


def stop(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(120)


RAY_SETUPS = {  # name: (kind, flags)
    "ray 1×1": ("ray", ["--replicas", "1", "--replica-cpus", "1"]),
    "ray 2×1": ("ray", ["--replicas", "2", "--replica-cpus", "1"]),
    "ray 1×2": ("ray", ["--replicas", "1", "--replica-cpus", "2"]),
    "plain, 2 threads": ("bertkit", []),
}


def ray_tables(args, bodies: Path, levels: list[int]) -> None:
    """`bertkit serve --ray`'s setups under the same wrk load, medians of `--repeats`, and the two ratios."""
    rows = {}
    for name, (kind, flags) in RAY_SETUPS.items():
        process, url = start(kind, 2, "fp32", flags)
        try:
            wrk(url, bodies, 16, 5)  # warm-up
            for c in levels:
                rows[name, c] = median_row([wrk(url, bodies, c, args.seconds) for _ in range(args.repeats)])
                print(name, c, rows[name, c], flush=True)
        finally:
            stop(process)
    print(f"\nCPU: {cpu_name()}; fp32; SST-2 dev sentences; wrk, {args.seconds:g} s a run, median of {args.repeats}")
    print("| setup | c | req/s | p50 ms | p99 ms | statuses |")
    print("|---|---|---|---|---|---|")
    for (name, c), row in rows.items():
        print(f"| {name} | {c} | {row['rps']:.0f} | {row['p50']:.1f} | {row['p99']:.1f} | {row['statuses']} |")
    for c in levels:
        two, one = rows["ray 2×1", c]["rps"], rows["ray 1×1", c]["rps"]
        wide, plain = rows["ray 1×2", c]["rps"], rows["plain, 2 threads", c]["rps"]
        print(f"c={c}: 2 replicas / 1 replica {two / one:.2f}×; 1 replica of 2 CPUs / plain serve {wide / plain:.2f}×")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wrk(url: str, bodies: Path, concurrency: int, seconds: float) -> dict:
    """One wrk run: `concurrency` connections on one wrk thread for `seconds`; the script's RESULT as a dict."""
    command = ["wrk", "-t1", f"-c{concurrency}", f"-d{seconds:g}s", "--timeout", "60s", "-s", str(WRK_SCRIPT), url]
    out = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "BODIES": str(bodies)}, check=True
    ).stdout
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT ")).split(" ", 1)[1])
    result["rps"] = result["statuses"].get("200", 0) / result["seconds"]
    return result


def median_row(runs: list[dict]) -> dict:
    row = {key: statistics.median(run[key] for run in runs) for key in ("rps", "p50", "p95", "p99")}
    row["statuses"] = {}
    for run in runs:
        for code, count in run["statuses"].items():
            row["statuses"][code] = row["statuses"].get(code, 0) + count
    row["socket_errors"] = sum(run["socket_errors"] for run in runs)
    return row


def bare_embed_ms(sentences: list[str], threads: int, precision: str) -> float:
    from bertkit import Encoder, set_threads

    set_threads(threads)
    encoder = Encoder.from_pretrained(precision=precision, concurrent_batches=1)
    for s in sentences[:20]:
        encoder.embed([s], warn=False)
    times = []
    for s in sentences[:300]:
        began = time.perf_counter()
        encoder.embed([s], warn=False)
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def cpu_name() -> str:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return f"{name} ({', '.join(f for f in ('avx2', 'avx512_vnni', 'avx512_bf16', 'amx_bf16') if f in flags)})"


def soak(args, bodies: Path, precision: str) -> None:
    process, url = start("bertkit", args.threads, precision, args.serve_args.split())
    try:
        wrk(url, bodies, 64, 5)
        samples = [rss_mb(process.pid)]
        done = threading.Event()

        def sample():
            while not done.wait(5):
                samples.append(rss_mb(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        result = wrk(url, bodies, 64, args.soak)
        done.set()
        sampler.join()
        samples.append(rss_mb(process.pid))
    finally:
        code = stop(process)
    errors = sum(v for k, v in result["statuses"].items() if k not in ("200", "429")) + result["socket_errors"]
    print(
        f"\nsoak, {precision}, c=64 for {args.soak:.0f} s: {result['rps']:.0f} req/s, p50 {result['p50']:.0f} / "
        f"p99 {result['p99']:.0f} ms, statuses {result['statuses']}, errors other than 429: {errors}; RSS "
        f"{samples[0]:.0f} → {samples[-1]:.0f} MB ({samples[-1] - samples[0]:+.1f} MB, highest "
        f"{max(samples):.0f}); exit status after SIGTERM {code}"
    )
    print("RSS every 5 s (MB): " + " ".join(f"{s:.0f}" for s in samples))


def main() -> None:
    from bertkit.encoder.precision import fast_bf16_cpu

    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--levels", default="1,8,32,128")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--precisions", default="fp32,bf16" if fast_bf16_cpu() else "fp32")
    parser.add_argument("--serve-args", default="", help="extra flags for bertkit serve")
    parser.add_argument("--soak", type=float, default=0, help="seconds of c=64 load on bertkit serve after the tables")
    parser.add_argument("--naive-server", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ray", action="store_true", help="bertkit serve --ray's setups (see the module's notes)")
    args = parser.parse_args()
    if args.naive_server:
        import uvicorn

        uvicorn.run(
            naive_app(args.threads, args.precisions),
            host="127.0.0.1",
            port=args.naive_server,
            log_level="warning",
            access_log=False,
        )
        return
    if shutil.which("wrk") is None:
        sys.exit("benchmarks/serve.py needs the load generator wrk: apt-get install wrk")
    sentences = [line.split("\t")[0] for line in SST2.read_text(encoding="utf-8").splitlines() if line.strip()]
    levels = [int(x) for x in args.levels.split(",")]
    precisions = args.precisions.split(",")
    with tempfile.TemporaryDirectory() as scratch:
        bodies = Path(scratch) / "bodies.jsonl"
        bodies.write_text("".join(json.dumps({"inputs": s}) + "\n" for s in sentences), encoding="utf-8")
        if args.ray:
            ray_tables(
                args, bodies, [int(x) for x in (args.levels if args.levels != "1,8,32,128" else "16,32").split(",")]
            )
            return
        rows = {}
        for precision in precisions:
            for kind in ("bertkit", "naive"):
                process, url = start(
                    kind, args.threads, precision, args.serve_args.split() if kind == "bertkit" else []
                )
                try:
                    wrk(url, bodies, 32, 3)  # warm-up
                    for c in levels:
                        rows[precision, kind, c] = median_row(
                            [wrk(url, bodies, c, args.seconds) for _ in range(args.repeats)]
                        )
                finally:
                    stop(process)
        print(
            f"CPU: {cpu_name()}, {args.threads} torch threads; single SST-2 dev sentences ({len(sentences)}); wrk, "
            f"{args.seconds:g} s per run, median of {args.repeats} runs per row"
        )
        for precision in precisions:
            bare = bare_embed_ms(sentences, args.threads, precision)
            print(f"\n{precision}: bare Encoder.embed on one sentence, p50 {bare:.1f} ms")
            print(
                "| c | bertkit req/s | p50 | p95 | p99 ms | naive req/s | p50 | p95 | p99 ms | × throughput | p99 "
                "ratio |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            for c in levels:
                b, n = rows[precision, "bertkit", c], rows[precision, "naive", c]
                print(
                    f"| {c} | {b['rps']:.0f} | {b['p50']:.1f} | {b['p95']:.1f} | {b['p99']:.1f} | {n['rps']:.0f} | "
                    f"{n['p50']:.1f} | {n['p95']:.1f} | {n['p99']:.1f} | {b['rps'] / max(n['rps'], 1e-9):.2f} | "
                    f"{b['p99'] / n['p99']:.2f} |"
                )
            for c in levels:
                for kind in ("bertkit", "naive"):
                    row = rows[precision, kind, c]
                    if set(row["statuses"]) - {"200"} or row["socket_errors"]:
                        print(f"    {kind} c={c}: statuses {row['statuses']}, socket errors {row['socket_errors']}")
        if args.soak:
            soak(args, bodies, precisions[0])


if __name__ == "__main__":
    main()
