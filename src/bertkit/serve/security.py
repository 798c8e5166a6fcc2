"""The API key: read from an environment variable or a file, checked in constant time on every request."""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from ..errors import InputError

EXEMPT_PATHS = frozenset({"/health"})


def load_api_key(env_name: str | None = None, key_file: str | Path | None = None) -> str | None:
    """The key named by `--api-key-env` or stored in `--api-key-file` (stripped); None when neither is given."""
    if env_name and key_file:
        raise InputError("give --api-key-env or --api-key-file, not both.")
    if env_name:
        key = os.environ.get(env_name, "").strip()
        if not key:
            raise InputError(f"--api-key-env {env_name}: that environment variable is unset or empty; export the key first.")
        return key
    if key_file:
        key = Path(key_file).read_text(encoding="utf-8").strip()
        if not key:
            raise InputError(f"--api-key-file {key_file}: the file is empty; write the key into it.")
        return key
    return None


def authorized(header: bytes | None, key: bytes) -> bool:
    """True when `header` is exactly `Bearer <key>`; the comparison takes the same time wherever they differ."""
    scheme, _, given = (header or b"").partition(b" ")
    return hmac.compare_digest(given.strip(), key) and scheme.lower() == b"bearer"
