"""The service's limits and batching knobs, in one place the CLI, the app and the tests share."""

from __future__ import annotations

from dataclasses import dataclass

from ..encoder.defaults import GPU_BATCH_TOKENS, MAX_BATCH_TOKENS, option_field
from ..errors import InputError
from .security import check_allow_hosts, check_allow_origins


@dataclass(frozen=True)
class ServeSettings:
    """Limits and batching options of one server process; the limits are `bertkit serve`'s flags (generated)."""

    max_batch_tokens: int | None = option_field(
        None,
        f"Padded tokens per forward pass (default: {MAX_BATCH_TOKENS} on a CPU; on a GPU {GPU_BATCH_TOKENS}, or less "
        "when free memory is short).",
    )
    max_queue_tokens: int = option_field(65536, "Tokens allowed to wait; beyond it 429.")
    max_inputs: int = option_field(128, "Texts per request.")
    max_body_bytes: int = option_field(2_000_000, "Request body limit in bytes.")
    max_answer_numbers: int = option_field(  # 2**23 floats are ~90 MB of JSON
        1 << 23, "Numbers one answer may hold (token vectors: tokens × width; ~90 MB of JSON); beyond it 413."
    )
    concurrent_batches: int | None = option_field(
        None,
        "Forward passes in flight, each on its share of the threads (default: one per core, 2 at most; 1: one pass "
        "at a time on every thread).",
    )
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
                raise InputError(f"{name}={value!r}: give a positive whole number.")
        object.__setattr__(self, "allow_hosts", check_allow_hosts(self.allow_hosts))
        object.__setattr__(self, "allow_origins", check_allow_origins(self.allow_origins))
