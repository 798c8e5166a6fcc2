"""Prometheus metrics of one server (its own registry): requests, latency, batch sizes, queue depth, tokens/s."""

from __future__ import annotations

from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TOKEN_BUCKETS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536)


class Metrics:
    """Every metric the service exports; a fresh registry per app so several apps can live in one process."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        counter, gauge, histogram = (partial(kind, registry=self.registry) for kind in (Counter, Gauge, Histogram))
        self.requests = counter("bertkit_requests", "HTTP requests by endpoint and status", ["endpoint", "status"])
        latency = "Request latency (receipt to response start)"
        self.latency = histogram("bertkit_request_seconds", latency, ["endpoint"], buckets=LATENCY_BUCKETS)
        # a batch is one turn of the queue: one library call, which its runner splits into token-budget passes
        self.batch_size = histogram("bertkit_batch_size", "Inputs per model call (queue turn)", buckets=SIZE_BUCKETS)
        tokens = "Tokens per model call, as admitted (estimated from characters)"
        self.batch_tokens = histogram("bertkit_batch_tokens", tokens, buckets=TOKEN_BUCKETS)
        forward = "Time of one model call (its forward passes, pooling and tokenizing)"
        self.forward_seconds = histogram("bertkit_forward_seconds", forward, buckets=LATENCY_BUCKETS)
        self.tokens = counter("bertkit_tokens", "Tokens through the model (embeddings: the texts' own; QA: windows')")
        self.tokens_per_second = gauge("bertkit_tokens_per_second", "Tokens per second of the latest model call")
        self.queue_requests = gauge("bertkit_queue_requests", "Requests waiting for the model")
        self.queue_tokens = gauge("bertkit_queue_tokens", "Tokens waiting for the model")
        self.rejected = counter("bertkit_rejected", "Requests refused with 429 because the queue was full")
        self.dropped = counter("bertkit_dropped", "Requests dropped before the forward pass: the client had gone")
        self.failed_batches = counter("bertkit_failed_batches", "Model calls that raised (their requests got 500)")
        self.started = gauge("bertkit_start_time_seconds", "When this server started (Unix time)")
        self.started.set_to_current_time()

    def observe_batch(self, rows: int, tokens: int, seconds: float, tokens_per_second: float) -> None:
        """Record one model call: its inputs, admitted tokens, seconds and the tokens per second."""
        self.batch_size.observe(rows)
        self.batch_tokens.observe(tokens)
        self.forward_seconds.observe(seconds)
        self.tokens_per_second.set(tokens_per_second)

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        """Count one request by endpoint and status, and record its latency."""
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def exposition(self) -> bytes:
        """Return the metrics in Prometheus's text format (what /metrics answers)."""
        return generate_latest(self.registry)
