"""`bertkit serve` under the largest requests it admits: does `/health` stay quick while every route works flat out?

    python benchmarks/serve_heavy.py [--seconds 60] [--clients 16] [--max-inputs 128] [--json report.json]

One `bertkit serve` process (the packaged model, loopback, a free port, 2 MB a request, `--max-inputs` texts a
request) serving a feature classifier at /predict/sst and a pair run at /rerank. It builds both first (a classifier
on twelve sentences, a one-epoch fine-tune on sixteen pairs: their quality does not matter, their cost does).
`--clients` asyncio clients then send, round the routes, the largest request each route admits (N = --max-inputs):

- /embed, /v1/embeddings, /tokenize, /predict/sst: N texts of ~14,000 characters (truncated to 512 tokens);
- /embed_all: N such texts, at most 40 (every token's vector: 40 × 512 × 384 numbers, under --max-answer-numbers);
- /similarity: a source sentence and N - 1 sentences of that size;
- /rerank and /v1/rerank: a 100,000-character query and N documents of ~14,000 characters;
- /explain: a 2,000-character sentence (the longest its schema admits).

A full queue answers 429 at once (admission control); that client waits as Retry-After says (at most 2 s) and goes
on to the next route. The soak lasts `--seconds`, and longer until every route has done its full work at least
once (a 200), at most `--max-seconds`. Throughout, `/health` is polled every 50 ms on its own connection and
thread. Pass (exit 0) when every `/health` poll answers 200 with a p99 under `--p99-ms` (100), every answer is a 200
or a 429, every route answered 200, and the server log holds no traceback. `tests/test_serve_heavy.py` runs a short
version (--max-inputs 8).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from serve_faults import MAX_BODY, Server

log = logging.getLogger("serve_heavy")

VOCABULARY = (
    "the movie was great and the actors were good but a little slow in the middle of a long story about growing up "
    "in a city with warm funny people who love music food rain night summer dog cat train"
)
WORDS = VOCABULARY.split(" ")
LONG_CHARS = 14_000  # 128 of them stay under the 2 MB body limit, and each is far over 512 tokens
QUERY_CHARS = 100_000


def long_text(seed: int, chars: int = LONG_CHARS) -> str:
    words = [WORDS[(seed * 7 + i * 13) % len(WORDS)] for i in range(chars // 4)]
    return " ".join(words)[:chars]


def requests_by_route(run: str, inputs: int) -> dict[str, dict]:
    """The largest body each route admits with `inputs` texts a request and a 2 MB body."""
    texts = [long_text(i) for i in range(inputs)]
    return {
        "/embed": {"inputs": texts, "truncate": True},
        "/v1/embeddings": {"input": texts, "model": "default"},
        "/embed_all": {"inputs": texts[:40], "truncate": True},
        "/tokenize": {"inputs": texts, "truncate": True},
        "/similarity": {"inputs": {"source_sentence": texts[0], "sentences": texts[1:]}, "truncate": True},
        f"/predict/{run}": {"inputs": texts},
        "/rerank": {"query": long_text(999, QUERY_CHARS), "texts": texts, "truncate": True},
        "/v1/rerank": {"query": long_text(998, QUERY_CHARS), "documents": texts, "model": "pairs"},
        "/explain": {"text": long_text(5, 2000).strip()},
    }


def build_runs(root: Path) -> tuple[Path, Path]:
    """A feature classifier (for /predict) and a pair run (for /rerank) on the packaged model."""
    from sklearn.linear_model import LogisticRegression

    from bertkit import BertVectorizer, TextClassifier
    from bertkit.tasks.finetune import FinetuneArguments, finetune

    texts = ["good film", "great film", "love it", "bad film", "awful plot", "boring mess"] * 2
    labels = ["pos", "pos", "pos", "neg", "neg", "neg"] * 2
    classifier = TextClassifier(BertVectorizer(layers="last"), LogisticRegression(max_iter=1000))
    classifier.fit(texts, labels).save_pretrained(root / "sst")
    rows = [f"a question about {w}\ta passage about {w if i % 2 else WORDS[i]}\t{i % 2}" for i, w in enumerate(WORDS)]
    (root / "pairs.tsv").write_text("\n".join(rows[:16]) + "\n")
    finetune(
        root / "pairs.tsv",
        root / "pairs.tsv",
        output_dir=root / "pairs",
        task="pair",
        args=FinetuneArguments(num_train_epochs=1, batch_size=8),
        progress=False,
    )
    return root / "sst", root / "pairs"


def poll_health(url: str, stop: threading.Event, latencies: list[float], failures: list[str]) -> None:
    """Poll `/health` every 50 ms on a thread of its own: the load's event loop (16 clients' requests and replies,
    each client's SSL context made as it starts) must not delay the poll that measures the server."""
    with httpx.Client(base_url=url, timeout=10) as http:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                response = http.get("/health")
                if response.status_code != 200:
                    failures.append(f"{response.status_code}: {response.text[:100]}")
            except httpx.HTTPError as exc:
                failures.append(type(exc).__name__)
            latencies.append((time.perf_counter() - started) * 1000)
            stop.wait(0.05)


@dataclass
class Load:
    """The requests, and what came back: statuses and seconds by route, and the tour's progress."""

    bodies: dict[str, bytes]
    answers: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    seconds: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def served_every_route(self) -> bool:
        return all(self.answers[route][200] for route in self.bodies)

    async def send(self, http: httpx.AsyncClient, route: str) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            response = await http.post(route, content=self.bodies[route], headers={"Content-Type": "application/json"})
        except httpx.HTTPError as exc:
            self.answers[route][type(exc).__name__] += 1
            return None
        self.answers[route][response.status_code] += 1
        if response.status_code == 200:
            self.seconds[route].append(time.perf_counter() - started)
        return response

    async def client(self, url: str, number: int, stop: asyncio.Event) -> None:
        """Round the routes; a 429 waits as its Retry-After says, at most 2 s."""
        routes = list(self.bodies)
        async with httpx.AsyncClient(base_url=url, timeout=600) as http:
            for turn in range(number, 1 << 30):
                if stop.is_set():
                    return
                response = await self.send(http, routes[turn % len(routes)])
                if response is not None and response.status_code == 429:
                    await asyncio.sleep(min(2.0, float(response.headers.get("Retry-After", 1))))


async def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="bertkit-heavy-") as folder:
        log.info("building a classifier run and a pair run on the packaged model")
        classifier, pairs = build_runs(Path(folder))
        extra = ["--max-body-bytes", "2000000", "--run", f"sst={classifier}", "--run", f"pairs={pairs}"]
        extra += ["--max-inputs", str(args.max_inputs), "--log-level", "warning", "--threads", str(args.threads)]
        server = Server("--max-body-bytes", str(MAX_BODY), *extra, wait=False, cold=True)
        try:
            server.wait_ready()
            bodies = {k: json.dumps(v).encode() for k, v in requests_by_route("sst", args.max_inputs).items()}
            log.info(
                "server ready at %s; %d clients for %.0f s; bodies up to %.2f MB",
                server.url,
                args.clients,
                args.seconds,
                max(map(len, bodies.values())) / 1e6,
            )
            latencies: list[float] = []
            failures: list[str] = []
            load = Load(bodies)
            stop, stop_polling = asyncio.Event(), threading.Event()
            started = time.perf_counter()
            poller = asyncio.create_task(asyncio.to_thread(poll_health, server.url, stop_polling, latencies, failures))
            clients = [asyncio.create_task(load.client(server.url, n, stop)) for n in range(args.clients)]
            while time.perf_counter() - started < args.max_seconds:
                if time.perf_counter() - started >= args.seconds and load.served_every_route():
                    break
                await asyncio.sleep(0.5)
            stop.set()
            stop_polling.set()
            await asyncio.gather(poller, *clients)
            soak_seconds = time.perf_counter() - started
        finally:
            server.kill()
        output = server.output()
    ordered = sorted(latencies)
    report = {
        "clients": args.clients,
        "max_inputs": args.max_inputs,
        "seconds": round(soak_seconds, 1),
        "body_mb": {route: round(len(body) / 1e6, 2) for route, body in bodies.items()},
        "answers": {route: {str(k): v for k, v in sorted(c.items(), key=str)} for route, c in load.answers.items()},
        "median_s": {route: round(statistics.median(s), 2) for route, s in load.seconds.items()},
        "health": {
            "polls": len(ordered),
            "failures": failures[:10],
            "p50_ms": round(statistics.median(ordered), 1) if ordered else None,
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1) if ordered else None,
            "max_ms": round(ordered[-1], 1) if ordered else None,
        },
        "server_log_tracebacks": output.count("Traceback"),
    }
    report["violations"] = violations(report, args.p99_ms, list(bodies))
    if report["violations"]:
        report["server_log_tail"] = output[-4000:]
    return report


def violations(report: dict, p99_ms: float, routes: list[str]) -> list[str]:
    found = []
    health = report["health"]
    if health["failures"] or not health["polls"]:
        found.append(f"/health failed: {health['failures']}")
    elif health["p99_ms"] >= p99_ms:
        found.append(f"/health p99 {health['p99_ms']} ms, over {p99_ms} ms")
    for route in routes:
        statuses = report["answers"].get(route, {})
        if not statuses.get("200"):
            found.append(f"{route} never answered 200: {statuses}")
        odd = {k: v for k, v in statuses.items() if k not in ("200", "429")}
        if odd:
            found.append(f"{route} answered {odd}")
    if report["server_log_tracebacks"]:
        found.append(f"{report['server_log_tracebacks']} tracebacks in the server log")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60, help="how long the clients send, at least")
    parser.add_argument("--max-seconds", type=float, default=600, help="the longest it waits for every route's 200")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--max-inputs", type=int, default=128, help="the server's --max-inputs: texts a request")
    parser.add_argument("--threads", type=int, default=2, help="the server's torch threads")
    parser.add_argument("--p99-ms", type=float, default=100.0, help="the /health p99 that passes")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("httpx", "bertkit", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    report = asyncio.run(run(args))
    health = report["health"]
    print(
        f"{report['clients']} clients, {report['seconds']:.0f} s, {report['max_inputs']} inputs a request; "
        f"bodies (MB): {report['body_mb']}"
    )
    for route, statuses in report["answers"].items():
        print(f"  {route}: {statuses}; median {report['median_s'].get(route, '-')} s for a 200")
    print(
        f"/health: {health['polls']} polls, p50 {health['p50_ms']} ms, p99 {health['p99_ms']} ms, "
        f"max {health['max_ms']} ms, failures {len(health['failures'])}"
    )
    print("PASS" if not report["violations"] else "FAIL:\n  " + "\n  ".join(report["violations"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
