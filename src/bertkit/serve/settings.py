"""The service's limits and batching knobs, in one place the CLI, the app and the tests share."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from .security import check_allow_hosts, check_allow_origins


@dataclass(frozen=True)
class ServeSettings:
    """Limits and batching options of one server process (the CLI flags of `bertkit serve`)."""

    # padded tokens (rows × longest row) per pass, like TEI's flag (None: the encoder's budget, 2048 on a CPU)
    max_batch_tokens: int | None = None
    max_queue_tokens: int = 65536  # tokens waiting for the model; more → 429 at once
    max_inputs: int = 128  # texts per request
    max_body_bytes: int = 2_000_000  # request body limit
    # numbers one answer may hold (token vectors: tokens × width); 2**23 floats are ~90 MB of JSON
    max_answer_numbers: int = 1 << 23
    # passes in flight at once, each on its share of the threads (None: the encoder's)
    concurrent_batches: int | None = None
    api_key: str | None = None  # when set, every endpoint but /health and the page needs `Authorization: Bearer <key>`
    allow_hosts: tuple[str, ...] = ()  # Host names answered besides this server's address and localhost ('*': any)
    allow_origins: tuple[str, ...] = ()  # web origins admitted cross-origin, with CORS answers ('*': any)
    map_texts: bool = False  # the explainer's map shows a run's training sentences (off: points and labels only)

    def __post_init__(self) -> None:
        """Refuse non-positive limits and malformed `--allow-host` / `--allow-origin` values (kept lower-cased)."""
        limits = ("max_batch_tokens", "max_queue_tokens", "max_inputs", "max_body_bytes", "max_answer_numbers")
        for name in (*limits, "concurrent_batches"):
            value = getattr(self, name)
            unset = value is None and name in ("max_batch_tokens", "concurrent_batches")
            if not unset and (not isinstance(value, int) or value < 1):
                raise InputError(f"--{name.replace('_', '-')}={value!r}: give a positive whole number.")
        object.__setattr__(self, "allow_hosts", check_allow_hosts(self.allow_hosts))
        object.__setattr__(self, "allow_origins", check_allow_origins(self.allow_origins))
