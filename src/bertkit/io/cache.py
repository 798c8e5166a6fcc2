"""Embedding cache keyed by (model fingerprint, feature options, text): a text is embedded once per configuration.

Vectors live in memory (process-wide) and, given a directory, on disk as atomic `.npz` shards written chunk by
chunk, so an interrupted run leaves a valid cache and the next run continues from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .writers import atomic_path

CACHE_FORMAT = 1
DEFAULT_CHUNK = 2048
KEY_BYTES = 20  # SHA-1 digest
DEFAULT_MEMORY_MB = 2048  # $BERTKIT_MEMORY_CACHE_MB overrides: the process-wide in-memory cache never grows past it


class MemoryStore:
    """Process-wide vectors by (configuration, text) key, least recently used first out past `max_bytes`.

    Thread-safe. Disk shards are not affected by eviction; an evicted vector is read again from its shard when a
    cache on that directory is opened, or embedded again.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[tuple[str, bytes], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, config: str, key: bytes) -> np.ndarray | None:
        with self._lock:
            vector = self._items.get((config, key))
            if vector is not None:
                self._items.move_to_end((config, key))
            return vector

    def put(self, config: str, key: bytes, vector: np.ndarray) -> None:
        with self._lock:
            old = self._items.pop((config, key), None)
            if old is not None:
                self.bytes -= old.nbytes
            self._items[(config, key)] = vector
            self.bytes += vector.nbytes
            while self.bytes > self.max_bytes and self._items:
                _, evicted = self._items.popitem(last=False)
                self.bytes -= evicted.nbytes

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0


MEMORY = MemoryStore(int(float(os.environ.get("BERTKIT_MEMORY_CACHE_MB", DEFAULT_MEMORY_MB)) * 2**20))


def default_cache_dir() -> Path:
    """$BERTKIT_CACHE, else $XDG_CACHE_HOME/bertkit/embeddings, else ~/.cache/bertkit/embeddings."""
    if os.environ.get("BERTKIT_CACHE"):
        return Path(os.environ["BERTKIT_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "bertkit" / "embeddings"


def text_key(text: str) -> bytes:
    return hashlib.sha1(text.encode("utf-8")).digest()


def config_key(options: dict) -> str:
    payload = json.dumps({"format": CACHE_FORMAT, **options}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0

    def __str__(self) -> str:
        return f"{self.hits} cached, {self.misses} embedded"


class EmbeddingCache:
    """Vectors for one feature configuration; `directory=None` keeps them in memory only."""

    def __init__(self, options: dict, directory: str | Path | None = None, chunk_size: int = DEFAULT_CHUNK):
        self.key = config_key(options)
        self.options = options
        self.chunk_size = chunk_size
        self.directory = Path(directory) / self.key if directory is not None else None
        self.stats = CacheStats()
        if self.directory is not None:
            self._load_disk()

    def _load_disk(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        meta = self.directory / "options.json"
        if not meta.exists():
            with atomic_path(meta) as temporary:
                temporary.write_text(json.dumps(self.options, indent=2, sort_keys=True, default=str))
        for shard in sorted(self.directory.glob("shard-*.npz")):
            try:
                with np.load(shard) as data:
                    vectors = data["vectors"]
                    if "lengths" in data:  # ragged entries, stored end to end
                        vectors = np.split(vectors, np.cumsum(data["lengths"])[:-1])
                    for key, vector in zip(data["keys"], vectors):
                        # numpy's S20 drops trailing NUL bytes; every key is a 20-byte SHA-1, so pad it back
                        MEMORY.put(self.key, bytes(key).ljust(KEY_BYTES, b"\0"), vector)
            except (OSError, ValueError, KeyError):
                continue  # an unreadable shard only costs re-embedding its texts

    def get_or_compute(self, texts: Sequence[str], compute: Callable[[list[str]], np.ndarray], stack: bool = True):
        """Vectors for `texts` in order; texts not cached are embedded in chunks, each chunk stored at once.

        stack=False returns a list, for entries of different lengths (one vector per word of a sentence).
        """
        keys = [text_key(t) for t in texts]
        found: dict[bytes, np.ndarray] = {}  # held here, so eviction during this call loses nothing
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts):
            if key in found or key in missing:
                continue
            vector = MEMORY.get(self.key, key)
            if vector is None:
                missing[key] = text
            else:
                found[key] = vector
        self.stats.misses += sum(1 for k in keys if k in missing)
        self.stats.hits += len(texts) - sum(1 for k in keys if k in missing)
        pending = list(missing.items())
        for start in range(0, len(pending), self.chunk_size):
            chunk = pending[start : start + self.chunk_size]
            vectors = [np.asarray(v, dtype=np.float32) for v in compute([text for _, text in chunk])]
            for (key, _), vector in zip(chunk, vectors):
                found[key] = vector
                MEMORY.put(self.key, key, vector)
            self._write_shard([key for key, _ in chunk], vectors)
        if not stack:
            return [found[k] for k in keys]
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([found[k] for k in keys])

    def _write_shard(self, keys: list[bytes], vectors: list[np.ndarray]) -> None:
        if self.directory is None:
            return
        arrays = {"keys": np.array(keys, dtype=f"S{KEY_BYTES}")}
        if len({v.shape for v in vectors}) <= 1 and vectors and vectors[0].ndim == 1:
            arrays["vectors"] = np.stack(vectors)
        else:
            arrays["vectors"] = np.concatenate(vectors) if vectors else np.zeros((0,), np.float32)
            arrays["lengths"] = np.array([len(v) for v in vectors], dtype=np.int64)
        name = f"shard-{time.time_ns()}-{os.getpid()}.npz"
        with atomic_path(self.directory / name) as temporary:
            with temporary.open("wb") as handle:
                np.savez(handle, **arrays)


def clear_memory() -> None:
    """Forget every in-memory vector (disk shards stay)."""
    MEMORY.clear()
