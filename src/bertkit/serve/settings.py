"""The service's limits and batching knobs, in one place the CLI, the app and the tests share."""

from __future__ import annotations

from dataclasses import dataclass

from ..encoder.defaults import GPU_BATCH_TOKENS, MAX_BATCH_TOKENS, check_fields, option_field
from .security import check_allow_hosts, check_allow_origins


@dataclass(frozen=True)
class ServeSettings:
    """Limits, batching and access options of one server process: `bertkit serve`'s flags are generated from them."""

    max_batch_tokens: int | None = option_field(
        None,
        f"Padded tokens per forward pass (default: {MAX_BATCH_TOKENS} on a CPU; on a GPU {GPU_BATCH_TOKENS}, or less "
        "when free memory is short).",
        low=1,
    )
    max_queue_tokens: int = option_field(65536, "Tokens allowed to wait; beyond it 429.", low=1)
    max_inputs: int = option_field(128, "Texts per request.", low=1)
    max_body_bytes: int = option_field(2_000_000, "Request body limit in bytes.", low=1)
    max_answer_numbers: int = option_field(  # 2**23 floats are ~90 MB of JSON
        1 << 23, "Numbers one answer may hold (token vectors: tokens × width; ~90 MB of JSON); beyond it 413.", low=1
    )
    concurrent_batches: int | None = option_field(
        None,
        "Forward passes in flight, each on its share of the threads (default: one per core, 2 at most; 1: one pass "
        "at a time on every thread).",
        low=1,
    )
    allow_hosts: tuple[str, ...] = option_field(
        (),
        "Also answer Host: NAME (NAME or NAME:PORT; '*' for any, behind a proxy that checks it; repeatable). Always: "
        "the bound address and localhost names.",
        flag="--allow-host",
        metavar="NAME",
    )
    allow_origins: tuple[str, ...] = option_field(
        (),
        "Admit browser requests from this origin, e.g. http://localhost:3000, with CORS answers ('*': any; "
        "repeatable); others get 403.",
        flag="--allow-origin",
        metavar="ORIGIN",
    )
    map_texts: bool = option_field(
        False,
        "The explainer's map shows training sentences (off: points and labels only).",
        flag="--map-texts/--no-map-texts",
    )
    api_key: str | None = None  # when set, every endpoint but /health and the page needs `Authorization: Bearer <key>`

    def __post_init__(self) -> None:
        """Refuse limits below 1 and malformed `--allow-host` / `--allow-origin` values (kept lower-cased)."""
        check_fields(self)
        object.__setattr__(self, "allow_hosts", check_allow_hosts(self.allow_hosts))
        object.__setattr__(self, "allow_origins", check_allow_origins(self.allow_origins))
