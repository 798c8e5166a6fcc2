"""`bertkit serve` under faults: a bounded soak at c clients, some of them misbehaving, against a real server.

    python benchmarks/serve_faults.py [--seconds 120] [--warmup 30] [--clients 64] [--json report.json]

One `bertkit serve` process (the packaged model, loopback, a free port, --max-body-bytes 65536) and `--clients`
asyncio clients, each drawing a kind per request:

- good (60%): `/embed` (or `/v1/embeddings`, one in five) with 1-3 texts of a pool, none of them in flight in
  another request; each vector must equal the library's vector of that text, computed once up front (<= 1e-5;
  unit length under /v1) -- a vector of another text is counted as `crossed`;
- disconnect (10%): a full request with 8 long texts, then the socket is closed after 0-100 ms, unread;
- slow (10%): slowloris-style -- headers and body in small pieces with delays; a third complete their request
  (and must get the right vectors), the others leave with half a header or half a body;
- oversized (10%): a body over --max-body-bytes, with Content-Length or chunked (413, JSON);
- malformed (10%): broken or non-JSON bodies, wrong types, a wrong Content-Type, deep nesting (400/415/422, JSON).

Throughout, `/health` is polled every 0.25 s (every answer must be 200) and `/metrics` and the server's VmRSS
(/proc/PID/status) every second. After `--warmup` seconds of the same mix and a rest of REST_S the RSS is taken as
the start; the soak runs `--seconds` more, and the end is taken after the same rest. At rest, because under load the
C heap holds freed pieces of every tensor shape seen so far; an idle server hands them back (serve/batcher.py), so a
growth at rest is memory the server still holds. Then the queue must have drained to zero, and SIGTERM, sent while
a last burst of good requests is in flight, must let them finish and exit 0.

Pass (exit 0) when: no 5xx; no wrong or crossed vector; every refusal the expected status with a JSON error; the
queue within --max-queue-tokens and empty after the load; every health poll answered; RSS growth at rest < 50 MB;
no traceback in the server log; exit status 0 after SIGTERM. `tests/test_serve_faults.py` runs a 45 s version.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from servers import Server  # noqa: E402  (the suite's one server helper: the child dies with this process)

log = logging.getLogger("serve_faults")

MAX_BODY = 65536
MAX_QUEUE_TOKENS = 65536  # the server's default (--max-queue-tokens)
RSS_LIMIT_MB = 50.0
REST_S = 2.5  # seconds without load before RSS is read: the server trims its heap after 1 s idle
TOLERANCE = 1e-5
KINDS = {"good": 0.6, "disconnect": 0.1, "slow": 0.1, "oversized": 0.1, "malformed": 0.1}
VOCABULARY = (
    "the movie was great and the actors were good but a little slow in the middle of a long story about "
    "growing up in Korea with warm funny people who love music food rain city night summer dog cat train "
    "bertkit embeds every sentence from any layer with any pooling"
)
WORDS = VOCABULARY.split()
MALFORMED = [  # (path, content type, body, statuses the server must answer)
    ("/embed", "application/json", b'{"inputs": ["a"', {400}),
    ("/embed", "application/json", b"\xff\xfe not json \x00", {400}),
    ("/embed", "application/json", b"", {400}),
    ("/embed", "application/json", b'{"inputs": 5}', {422}),
    ("/embed", "application/json", b'{"inputs": [], "pooling": "mean"}', {422}),
    ("/embed", "application/json", b'{"inputs": "a", "layers": "last99:sum"}', {422}),
    ("/embed", "application/json", b'{"inputs": "a", "extra": 1}', {422}),
    ("/embed", "text/plain", b'{"inputs": "a"}', {415}),
    ("/embed", "application/x-www-form-urlencoded", b"inputs=a", {415}),
    ("/embed", "application/json", b"[" * 5000 + b"]" * 5000, {400, 422}),
    ("/tokenize", "application/json", b'{"inputs": "a\\ud800"}', {400}),
    ("/v1/embeddings", "application/json", b'{"input": "a", "model": "default"', {400}),
    ("/v1/embeddings", "application/json", b'{"input": [[1, 2]], "model": "default"}', {422}),
    ("/v1/embeddings", "application/json", b'{"input": "a", "model": "gpt-4"}', {404}),
    ("/predict/none", "application/json", b'{"inputs": "a"}', {404}),
]


# ---- the server ---------------------------------------------------------------------------------------------------
def rss_mb(pid: int) -> float:
    """The process's resident set size (VmRSS) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


# ---- texts and their vectors ----------------------------------------------------------------------------------------
class TextPool:
    """Unique texts with their library vectors; `take` hands out texts that no request in flight holds."""

    def __init__(self, size: int, seed: int = 0):
        rng = random.Random(seed)
        self.texts = [
            f"request {i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 40))) for i in range(size)
        ]
        self.busy: set[int] = set()
        self.next = 0
        self.vectors = np.zeros((0, 0), dtype=np.float32)
        self.unit = self.vectors

    def embed(self, threads: int) -> float:
        """The reference vectors: `Encoder.embed` of each text (the packaged model), once; returns seconds."""
        from bertkit import Encoder, set_threads

        started = time.perf_counter()
        set_threads(threads)
        encoder = Encoder.from_pretrained()
        self.vectors = np.asarray(encoder.embed(self.texts, warn=False), dtype=np.float32)
        self.unit = self.vectors / np.linalg.norm(self.vectors, axis=1, keepdims=True)
        return time.perf_counter() - started

    def take(self, count: int) -> list[int]:
        chosen: list[int] = []
        while len(chosen) < count:
            index = self.next % len(self.texts)
            self.next += 1
            if index not in self.busy and index not in chosen:
                chosen.append(index)
        self.busy.update(chosen)
        return chosen

    def release(self, indices: list[int]) -> None:
        self.busy.difference_update(indices)

    def check(self, indices: list[int], got: np.ndarray, unit: bool = False) -> str:
        """'ok', 'crossed' (the vectors of other texts of the pool) or 'mismatch'."""
        reference = self.unit if unit else self.vectors
        if got.shape != (len(indices), reference.shape[1]):
            return "mismatch"
        if np.abs(got - reference[indices]).max() <= TOLERANCE:
            return "ok"
        for row in got:
            if np.abs(reference - row).max(axis=1).min() <= TOLERANCE:
                return "crossed"
        return "mismatch"


# ---- raw HTTP over asyncio streams ---------------------------------------------------------------------------------
def head(
    path: str, host: str, length: int | None, content_type: str = "application/json", chunked: bool = False
) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Type: {content_type}", "Connection: close"]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of one answer (Content-Length or until the peer closes)."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionResetError("closed before an answer")
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body = await reader.read()
    return status, headers, body


def error_shape_ok(path: str, body: bytes) -> bool:
    """The service's JSON error: OpenAI's shape under /v1/, else {error, error_type}."""
    try:
        payload = json.loads(body)
    except ValueError:
        return False
    if path.startswith("/v1/"):
        return (
            isinstance(payload, dict)
            and set(payload) == {"error"}
            and isinstance(payload["error"], dict)
            and set(payload["error"]) == {"message", "type", "param", "code"}
        )
    return isinstance(payload, dict) and set(payload) == {"error", "error_type"}


# ---- the load ------------------------------------------------------------------------------------------------------
@dataclass
class Soak:
    """Counters of one run: outcomes by client kind, health latencies, RSS and queue samples."""

    url: str
    pool: TextPool
    pid: int
    clients: int
    outcomes: Counter = field(default_factory=Counter)  # (kind, outcome) -> count
    statuses: Counter = field(default_factory=Counter)  # status -> count, every answer read
    health_ms: list[float] = field(default_factory=list)
    health_failures: list[str] = field(default_factory=list)
    rss: list[tuple[float, float]] = field(default_factory=list)  # (seconds since start, MB)
    queue_requests: list[float] = field(default_factory=list)
    queue_tokens: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.host = self.url.removeprefix("http://")
        self.port = int(self.host.rsplit(":", 1)[1])
        self.started = time.perf_counter()

    def count(self, kind: str, outcome: str, status: int | None = None) -> None:
        self.outcomes[kind, outcome] += 1
        if status is not None:
            self.statuses[status] += 1
        if outcome not in ("ok", "sent", "abandoned", "refused", "reset", "429") and len(self.notes) < 20:
            self.notes.append(f"{kind}: {outcome}")

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    # -- clients --
    async def good(self, client: httpx.AsyncClient, rng: random.Random) -> None:
        indices = self.pool.take(rng.choice((1, 1, 2, 3)))
        texts = [self.pool.texts[i] for i in indices]
        openai = rng.random() < 0.2
        try:
            if openai:
                response = await client.post("/v1/embeddings", json={"input": texts, "model": "default"})
            else:
                response = await client.post("/embed", json={"inputs": texts})
        except httpx.HTTPError as exc:
            self.pool.release(indices)
            self.count("good", f"error:{type(exc).__name__}")
            return
        self.pool.release(indices)
        if response.status_code == 429:
            self.count("good", "429", 429)
            return
        if response.status_code != 200:
            self.count("good", f"status:{response.status_code}", response.status_code)
            return
        payload = response.json()
        rows = [d["embedding"] for d in payload["data"]] if openai else payload
        self.count("good", self.pool.check(indices, np.asarray(rows, dtype=np.float32), unit=openai), 200)

    async def disconnect(self, rng: random.Random) -> None:
        texts = [" ".join(rng.choice(WORDS) for _ in range(100)) for _ in range(8)]
        body = json.dumps({"inputs": texts}).encode()
        _, writer = await self.connect()
        try:
            writer.write(head("/embed", self.host, len(body)) + body)
            await writer.drain()
            await asyncio.sleep(rng.uniform(0, 0.1))
        finally:
            writer.close()
        self.count("disconnect", "sent")

    async def slow(self, rng: random.Random) -> None:
        """Headers and body a few bytes at a time; a third finish (right vectors), the others leave midway."""
        indices = self.pool.take(1)
        body = json.dumps({"inputs": [self.pool.texts[indices[0]]]}).encode()
        request = head("/embed", self.host, len(body)) + body
        ending = rng.choice(("complete", "half-header", "half-body"))
        stop = {
            "complete": len(request),
            "half-header": request.index(b"\r\n\r\n") // 2,
            "half-body": len(request) - len(body) // 2,
        }[ending]
        cuts = sorted(rng.sample(range(1, stop), min(8, stop - 1))) + [stop]
        reader, writer = await self.connect()
        try:
            sent = 0
            for cut in cuts:
                writer.write(request[sent:cut])
                await writer.drain()
                sent = cut
                await asyncio.sleep(rng.uniform(0.05, 0.4))
            if ending != "complete":
                self.count("slow", "abandoned")
                return
            status, _, answer = await asyncio.wait_for(read_response(reader), 60)
            if status != 200:
                self.count("slow", f"status:{status}", status)
                return
            self.count("slow", self.pool.check(indices, np.asarray(json.loads(answer), dtype=np.float32)), 200)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            self.count("slow", f"error:{type(exc).__name__}")
        finally:
            self.pool.release(indices)
            writer.close()

    async def oversized(self, rng: random.Random) -> None:
        path = rng.choice(("/embed", "/embed", "/v1/embeddings"))
        key = "input" if path.startswith("/v1/") else "inputs"
        body = json.dumps({key: ["x" * 1000] * (MAX_BODY // 1000 + rng.randint(1, 60)), "model": "default"}).encode()
        chunked = rng.random() < 0.5
        reader, writer = await self.connect()
        try:
            if chunked:
                writer.write(head(path, self.host, None, chunked=True))
                for start in range(0, len(body), 8192):
                    piece = body[start : start + 8192]
                    writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                writer.write(b"0\r\n\r\n")
            else:
                writer.write(head(path, self.host, len(body)) + body)
            try:
                await writer.drain()
            except OSError:  # the server answered and closed before the whole body was taken: read the answer
                pass
            status, _, answer = await asyncio.wait_for(read_response(reader), 60)
            ok = status == 413 and error_shape_ok(path, answer)
            self.count("oversized", "refused" if ok else f"status:{status}", status)
        except (ConnectionResetError, BrokenPipeError):
            # the server answered 413 and closed without reading the rest of the body; the client's unsent bytes
            # then reset the connection, which may discard the answer before it is read (TCP, not the service)
            self.count("oversized", "reset")
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            self.count("oversized", f"error:{type(exc).__name__}")
        finally:
            writer.close()

    async def malformed(self, client: httpx.AsyncClient, rng: random.Random) -> None:
        path, content_type, body, expected = rng.choice(MALFORMED)
        try:
            response = await client.post(path, content=body, headers={"Content-Type": content_type})
        except httpx.HTTPError as exc:
            self.count("malformed", f"error:{type(exc).__name__}")
            return
        ok = response.status_code in expected and error_shape_ok(path, response.content)
        self.count("malformed", "refused" if ok else f"status:{response.status_code}:{path}", response.status_code)

    async def client(self, number: int, until: float, http: httpx.AsyncClient) -> None:
        rng = random.Random(number)
        kinds, weights = zip(*KINDS.items())
        while time.perf_counter() < until:
            kind = rng.choices(kinds, weights)[0]
            try:
                if kind == "good":
                    await self.good(http, rng)
                elif kind == "malformed":
                    await self.malformed(http, rng)
                else:
                    await getattr(self, kind)(rng)
            except Exception as exc:  # noqa: BLE001  (a harness: count what went wrong, keep the load going)
                self.count(kind, f"error:{type(exc).__name__}")

    # -- monitors --
    async def poll_health(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=5) as http:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    response = await http.get("/health")
                    if response.status_code != 200:
                        self.health_failures.append(f"{response.status_code}: {response.text[:100]}")
                except httpx.HTTPError as exc:
                    self.health_failures.append(type(exc).__name__)
                self.health_ms.append((time.perf_counter() - started) * 1000)
                await asyncio.sleep(0.25)

    async def metrics(self, http: httpx.AsyncClient) -> tuple[float, float]:
        text = (await http.get("/metrics")).text
        values = {}
        for line in text.splitlines():
            if line.startswith(("bertkit_queue_requests ", "bertkit_queue_tokens ")):
                name, value = line.split()
                values[name] = float(value)
        return values["bertkit_queue_requests"], values["bertkit_queue_tokens"]

    async def poll_resources(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as http:
            while not stop.is_set():
                self.rss.append((time.perf_counter() - self.started, rss_mb(self.pid)))
                try:
                    requests, tokens = await self.metrics(http)
                    self.queue_requests.append(requests)
                    self.queue_tokens.append(tokens)
                except (httpx.HTTPError, KeyError) as exc:
                    self.notes.append(f"metrics: {type(exc).__name__}")
                await asyncio.sleep(1)

    async def load(self, seconds: float) -> None:
        until = time.perf_counter() + seconds
        limits = httpx.Limits(max_connections=self.clients * 2, max_keepalive_connections=self.clients * 2)
        async with httpx.AsyncClient(base_url=self.url, timeout=60, limits=limits) as http:
            await asyncio.gather(*(self.client(n, until, http) for n in range(self.clients)))


async def run(args: argparse.Namespace) -> dict:
    """Start the server, run warm-up and soak under the monitors, then SIGTERM; the report as a dict."""
    pool = TextPool(args.texts)
    reference_seconds = pool.embed(args.threads)
    log.info("reference vectors of %d texts in %.1f s; starting the server", len(pool.texts), reference_seconds)
    extra = ["--log-level", "warning"] + (["--threads", str(args.threads)] if args.threads else [])
    server = Server("--max-body-bytes", str(MAX_BODY), *extra, wait=False, cold=True)
    try:
        server.wait_ready()
        log.info(
            "server ready at %s (pid %d); %.0f s warm-up, then %.0f s soak at %d clients",
            server.url,
            server.process.pid,
            args.warmup,
            args.seconds,
            args.clients,
        )
        soak = Soak(server.url, pool, server.process.pid, args.clients)
        stop = asyncio.Event()
        monitors = [asyncio.create_task(soak.poll_health(stop)), asyncio.create_task(soak.poll_resources(stop))]
        await soak.load(args.warmup)
        warm = dict(soak.outcomes)
        await asyncio.sleep(REST_S)
        rss_start = rss_mb(server.process.pid)
        soak_started = time.perf_counter()
        await soak.load(args.seconds)
        soak_seconds = time.perf_counter() - soak_started
        rss_peak = max(mb for t, mb in soak.rss if t >= soak_started - soak.started) if soak.rss else 0.0
        await asyncio.sleep(REST_S)  # and dropped requests leave the queue when the dispatcher next looks
        rss_end = rss_mb(server.process.pid)
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            queue_after = await soak.metrics(http)
            dropped = float(
                next(
                    line.split()[-1]
                    for line in (await http.get("/metrics")).text.splitlines()
                    if line.startswith("bertkit_dropped_total ")
                )
            )
        stop.set()
        await asyncio.gather(*monitors)
        log.info("load done: %d requests; SIGTERM during a last burst", sum(soak.outcomes.values()))
        shutdown = await sigterm_during_burst(soak, server)
    finally:
        server.kill()
    output = server.output()
    health = sorted(soak.health_ms)
    report = {
        "clients": args.clients,
        "warmup_s": args.warmup,
        "soak_s": round(soak_seconds, 1),
        "reference_s": round(reference_seconds, 1),
        "texts": len(pool.texts),
        "requests": sum(soak.outcomes.values()),
        "warmup_requests": sum(warm.values()),
        "outcomes": {f"{kind}/{outcome}": n for (kind, outcome), n in sorted(soak.outcomes.items())},
        "statuses": {str(k): v for k, v in sorted(soak.statuses.items())},
        "rss_mb": {
            "start": round(rss_start, 1),
            "end": round(rss_end, 1),
            "peak": round(rss_peak, 1),
            "growth": round(rss_end - rss_start, 1),
            "samples": [round(mb) for _, mb in soak.rss[:: max(1, len(soak.rss) // 40)]],
        },
        "queue": {
            "max_requests": max(soak.queue_requests, default=0),
            "max_tokens": max(soak.queue_tokens, default=0),
            "after": {"requests": queue_after[0], "tokens": queue_after[1]},
            "dropped_total": dropped,
        },
        "health": {
            "polls": len(health),
            "failures": soak.health_failures[:10],
            "p50_ms": round(statistics.median(health), 1) if health else None,
            "p99_ms": round(health[min(len(health) - 1, int(len(health) * 0.99))], 1) if health else None,
            "max_ms": round(health[-1], 1) if health else None,
        },
        "shutdown": shutdown,
        "server_log_tracebacks": output.count("Traceback"),
        "notes": soak.notes,
    }
    report["violations"] = violations(report)
    if report["violations"]:
        report["server_log"] = str(server.keep_log())
        report["server_log_tail"] = output[-4000:]
    return report


async def sigterm_during_burst(soak: Soak, server: Server, burst: int = 16) -> dict:
    """SIGTERM while `burst` good requests (4 texts each) are in flight: they must finish; the exit status 0."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:

        async def one() -> tuple[int, str]:
            indices = soak.pool.take(4)
            try:
                response = await http.post("/embed", json={"inputs": [soak.pool.texts[i] for i in indices]})
            except httpx.HTTPError as exc:
                return 0, type(exc).__name__
            finally:
                soak.pool.release(indices)
            if response.status_code != 200:
                return response.status_code, "status"
            return 200, soak.pool.check(indices, np.asarray(response.json(), dtype=np.float32))

        tasks = [asyncio.create_task(one()) for _ in range(burst)]
        await asyncio.sleep(0.3)
        signalled = time.perf_counter()
        server.process.send_signal(signal.SIGTERM)
        results = await asyncio.gather(*tasks)
    try:
        code = await asyncio.to_thread(server.process.wait, 60)
    except subprocess.TimeoutExpired:
        code = None
    return {
        "exit_status": code,
        "seconds": round(time.perf_counter() - signalled, 1),
        "burst": dict(Counter(f"{status}/{outcome}" for status, outcome in results)),
    }


def violations(report: dict) -> list[str]:
    """What broke a promise; empty when the run passed."""
    found = []
    errors = {
        key: n
        for key, n in report["outcomes"].items()
        if not key.endswith(("/ok", "/sent", "/abandoned", "/refused", "/reset", "/429"))
    }
    if errors:
        found.append(f"unexpected outcomes: {errors}")
    server_errors = {code: n for code, n in report["statuses"].items() if int(code) >= 500}
    if server_errors:
        found.append(f"5xx answers: {server_errors}")
    if report["rss_mb"]["growth"] >= RSS_LIMIT_MB:
        found.append(f"RSS grew {report['rss_mb']['growth']} MB (limit {RSS_LIMIT_MB})")
    queue = report["queue"]
    if queue["max_tokens"] > MAX_QUEUE_TOKENS:
        found.append(f"queue held {queue['max_tokens']} tokens, over --max-queue-tokens {MAX_QUEUE_TOKENS}")
    if queue["after"]["requests"] or queue["after"]["tokens"]:
        found.append(f"the queue did not drain after the load: {queue['after']}")
    if report["health"]["failures"] or not report["health"]["polls"]:
        found.append(f"/health failed: {report['health']['failures']}")
    if report["server_log_tracebacks"]:
        found.append(f"{report['server_log_tracebacks']} tracebacks in the server log")
    shutdown = report["shutdown"]
    if shutdown["exit_status"] != 0:
        found.append(f"exit status {shutdown['exit_status']} after SIGTERM")
    if set(shutdown["burst"]) != {"200/ok"}:
        found.append(f"requests in flight at SIGTERM: {shutdown['burst']}")
    return found


def print_report(report: dict) -> None:
    print(
        f"soak: {report['clients']} clients, {report['warmup_s']} s warm-up + {report['soak_s']} s; "
        f"{report['requests']} requests ({report['warmup_requests']} in warm-up)"
    )
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in report["outcomes"].items()))
    print("statuses: " + ", ".join(f"{k}: {v}" for k, v in report["statuses"].items()))
    rss = report["rss_mb"]
    print(f"RSS after warm-up {rss['start']} MB, end {rss['end']} MB (growth {rss['growth']:+} MB, peak {rss['peak']})")
    queue = report["queue"]
    print(
        f"queue: at most {queue['max_requests']:.0f} requests / {queue['max_tokens']:.0f} tokens; after the load "
        f"{queue['after']}; dropped (client gone) {queue['dropped_total']:.0f}"
    )
    health = report["health"]
    print(
        f"/health: {health['polls']} polls, p50 {health['p50_ms']} ms, p99 {health['p99_ms']} ms, "
        f"max {health['max_ms']} ms, failures {len(health['failures'])}"
    )
    shutdown = report["shutdown"]
    print(f"SIGTERM: exit {shutdown['exit_status']} in {shutdown['seconds']} s; burst {shutdown['burst']}")
    print("PASS" if not report["violations"] else "FAIL:\n  " + "\n  ".join(report["violations"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=120, help="soak length after the warm-up")
    parser.add_argument("--warmup", type=float, default=30, help="seconds of the same mix before RSS is taken")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--texts", type=int, default=2048, help="unique texts (their vectors are computed first)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the server and the reference")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("asyncio").setLevel(logging.ERROR)  # "socket.send() raised": oversized clients cut off
    report = asyncio.run(run(args))
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
