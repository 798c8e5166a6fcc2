"""Embedding cache keyed by (model fingerprint, feature options, text): a text is embedded once per configuration.

Two tiers, each with a size limit that holds as measured: a process-wide LRU in memory and, given a directory, one
SQLite database (no pickle, unlike diskcache) from which the least recently used vectors are evicted, and logged.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cachetools
import numpy as np

from ..encoder.defaults import cache_root
from ..errors import InputError
from ..records import FORMAT_VERSION, check_record, new_record

logger = logging.getLogger(__name__)

DEFAULT_CHUNK = 2048
DEFAULT_MEMORY_MB = 2048  # $BERTKIT_MEMORY_CACHE_MB overrides
DEFAULT_DISK_MB = 10240  # $BERTKIT_DISK_CACHE_MB overrides
DATABASE = "embeddings.sqlite3"
ENTRY_OVERHEAD = 512  # bytes an in-memory entry costs besides its vector (array object, key, LRU bookkeeping)
ROW_OVERHEAD = 160  # bytes a database row costs besides its vector (key and configuration, twice with the index)
EVICT_TO = 0.9  # eviction goes down to this share of the disk limit, so it runs once per tenth, not per chunk
PAGE_SIZE = 65536  # SQLite's largest page: least space lost around vectors of a few KB
SQL_BATCH = 500  # keys per `IN (...)` query (SQLite's variable limit is 999 in old builds)


def entry_bytes(vector: np.ndarray) -> int:
    """Return what one in-memory entry costs: its vector's bytes plus the bookkeeping around it."""
    return vector.nbytes + ENTRY_OVERHEAD


class MemoryStore:
    """Process-wide, thread-safe vectors by (configuration, text) key, least recently used out past `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self._lru: cachetools.LRUCache = cachetools.LRUCache(maxsize=max_bytes, getsizeof=entry_bytes)
        self._lock = threading.Lock()

    @property
    def max_bytes(self) -> int:
        """The most bytes held, entry overhead included."""
        return int(self._lru.maxsize)

    @property
    def bytes(self) -> int:
        """Bytes held now, entry overhead included."""
        return int(self._lru.currsize)

    def get(self, config: str, key: bytes) -> np.ndarray | None:
        """Return the vector stored for (`config`, `key`), or None."""
        with self._lock:
            return self._lru.get((config, key))

    def put(self, config: str, key: bytes, vector: np.ndarray) -> None:
        """Store a private float32 copy of `vector`; one larger than `max_bytes` is not stored."""
        if not (vector.dtype == np.float32 and vector.flags.c_contiguous and vector.flags.owndata):
            vector = np.array(vector, dtype=np.float32, order="C")  # a private copy: a view would pin its base
        if entry_bytes(vector) > self.max_bytes:
            return
        with self._lock:
            self._lru[(config, key)] = vector

    def __len__(self) -> int:
        return len(self._lru)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._lru.clear()


MEMORY = MemoryStore(int(float(os.environ.get("BERTKIT_MEMORY_CACHE_MB", DEFAULT_MEMORY_MB)) * 2**20))


def default_cache_dir() -> Path:
    """Return the disk cache of `bertkit` commands: `embeddings/` under `cache_root()`."""
    return cache_root() / "embeddings"


def default_disk_bytes() -> int:
    """Return the disk limit of a cache directory: $BERTKIT_DISK_CACHE_MB, else `DEFAULT_DISK_MB` (10 GiB)."""
    return int(float(os.environ.get("BERTKIT_DISK_CACHE_MB", DEFAULT_DISK_MB)) * 2**20)


def text_key(text: str) -> bytes:
    """Return the cache key of a text: the SHA-1 of its UTF-8 bytes."""
    return hashlib.sha1(text.encode("utf-8")).digest()


def config_key(options: dict) -> str:
    """Return the cache key of a feature configuration: a short hash of `options` and the format version."""
    payload = json.dumps({"format": FORMAT_VERSION, **options}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


_SCHEMA = (  # with the one bertkit record, in table `record`
    "CREATE TABLE record (bertkit TEXT NOT NULL)",
    "CREATE TABLE configs (config TEXT PRIMARY KEY, options TEXT NOT NULL)",
    "CREATE TABLE vectors (id INTEGER PRIMARY KEY, config TEXT NOT NULL, key BLOB NOT NULL, rows INTEGER, "
    "dim INTEGER NOT NULL, data BLOB NOT NULL, UNIQUE (config, key))",
    "CREATE TABLE totals (id INTEGER PRIMARY KEY CHECK (id = 0), rows INTEGER NOT NULL)",
    "INSERT INTO totals VALUES (0, 0)",
    "CREATE TRIGGER count_in AFTER INSERT ON vectors BEGIN UPDATE totals SET rows = rows + 1; END",
    "CREATE TRIGGER count_out AFTER DELETE ON vectors BEGIN UPDATE totals SET rows = rows - 1; END",
)


class DiskStore:
    """Vectors of every configuration in one SQLite file whose pages in use never pass `max_bytes`.

    The table is a queue in least-recently-used order (new vectors and hits in its older half go to the end, eviction
    deletes from the front), so eviction frees whole pages. A connection per operation makes it safe across threads
    and processes.
    """

    def __init__(self, directory: str | Path, max_bytes: int | None = None) -> None:
        self.directory = Path(directory)
        self.path = self.directory / DATABASE
        self.max_bytes = default_disk_bytes() if max_bytes is None else int(max_bytes)
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # a new database's (an existing one keeps its own)
            db.execute("BEGIN IMMEDIATE")  # one process makes a new database; the others read its record
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                for statement in _SCHEMA:
                    db.execute(statement)
                db.execute("INSERT INTO record VALUES (?)", (json.dumps(new_record("embedding cache")),))
            found = db.execute("SELECT bertkit FROM record").fetchone() if not tables or "record" in tables else None
            db.execute("COMMIT")
        try:
            check_record(json.loads(found[0]) if found else None, "embedding cache", self.path)
        except InputError as exc:
            raise InputError(f"{exc} It is only a cache: delete it, or choose another cache directory.") from None

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            with closing(sqlite3.connect(self.path, timeout=120, isolation_level=None)) as db:
                yield db
        except sqlite3.OperationalError as exc:
            raise _os_error(exc, self.path) from None
        except sqlite3.DatabaseError as exc:  # not a database, or a damaged one
            raise InputError(
                f"{self.path}: the embedding cache is damaged ({exc}); delete the file (it is only a "
                "cache) or choose another cache directory."
            ) from None

    @property
    def bytes(self) -> int:
        """Bytes of the database's pages in use (what the limit applies to)."""
        with self._connect() as db:
            return _used_bytes(db)

    def register(self, config: str, options: dict) -> None:
        """Record what a configuration key stands for (for people reading the database)."""
        text = json.dumps(options, sort_keys=True, default=str)
        with self._connect() as db:
            if db.execute("SELECT 1 FROM configs WHERE config = ?", (config,)).fetchone() is None:
                db.execute("INSERT OR IGNORE INTO configs VALUES (?, ?)", (config, text))

    def get_many(self, config: str, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """Return the stored vectors among `keys` (private copies), marked as just used."""
        found: dict[bytes, np.ndarray] = {}
        with self._connect() as db:
            for batch, marks in _batches(list(keys)):
                query = f"SELECT key, rows, dim, data FROM vectors WHERE config = ? AND key IN ({marks})"
                for key, rows, dim, data in db.execute(query, (config, *batch)):
                    shape = (dim,) if rows is None else (rows, dim)
                    found[bytes(key)] = np.frombuffer(data, dtype=np.float32).reshape(shape).copy()
            _requeue(db, config, list(found))
        return found

    def touch(self, config: str, keys: Sequence[bytes]) -> None:
        """Mark vectors as used now (a hit served from memory keeps its disk copy from eviction too)."""
        if keys:
            with self._connect() as db:
                _requeue(db, config, list(keys))

    def put_many(self, config: str, items: Sequence[tuple[bytes, np.ndarray]]) -> None:
        """Store vectors in one transaction (all or none), evicting the least recently used to stay in the limit."""
        rows = [_row(config, key, vector) for key, vector in items]
        incoming = sum(len(row[4]) for row in rows) * 5 // 4 + len(rows) * ROW_OVERHEAD  # with page overhead
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            if _used_bytes(db) + incoming > self.max_bytes:  # make room first: the file does not grow past the limit
                self._evict(db, int(self.max_bytes * EVICT_TO) - incoming)
            db.executemany("INSERT OR IGNORE INTO vectors (config, key, rows, dim, data) VALUES (?, ?, ?, ?, ?)", rows)
            self._evict(db, self.max_bytes)  # in case the estimate fell short
            db.execute("COMMIT")

    def _evict(self, db: sqlite3.Connection, target: int) -> None:
        """Delete from the front of the queue (least recently used first) until the pages in use fit `target`."""
        before = used = _used_bytes(db)
        per_config: Counter = Counter()
        while used > target:
            count = db.execute("SELECT rows FROM totals").fetchone()[0]
            if not count:
                break
            victims = min(count, max(1, -(-(used - max(target, 0)) * count // used)))  # at the average row cost
            last = db.execute("SELECT id FROM vectors ORDER BY id LIMIT 1 OFFSET ?", (victims - 1,)).fetchone()[0]
            query = "SELECT config, COUNT(*) FROM vectors WHERE id <= ? GROUP BY config"
            per_config.update(dict(db.execute(query, (last,))))
            db.execute("DELETE FROM vectors WHERE id <= ?", (last,))
            used = _used_bytes(db)
        if per_config:
            logger.info(
                "embedding cache %s (limit %s): evicted the %d least recently used vectors, %s (%s); they "
                "are embedded again when next asked for.",
                self.path,
                _size(self.max_bytes),
                sum(per_config.values()),
                _size(before - used),
                ", ".join(f"{count} of configuration {config}" for config, count in per_config.most_common()),
            )


def _used_bytes(db: sqlite3.Connection) -> int:
    pages = db.execute("PRAGMA page_count").fetchone()[0] - db.execute("PRAGMA freelist_count").fetchone()[0]
    return pages * db.execute("PRAGMA page_size").fetchone()[0]


def _requeue(db: sqlite3.Connection, config: str, keys: list[bytes]) -> None:
    """Move those of `keys` in the older half of the queue to its end; a cache not writable now still serves."""
    try:
        if keys and _old_rows(db, config, keys):
            db.execute("BEGIN IMMEDIATE")
            old = _old_rows(db, config, keys)  # again, inside the transaction: another process may have moved them
            high = db.execute("SELECT MAX(id) FROM vectors").fetchone()[0]
            moves = [(high + offset, row_id) for offset, row_id in enumerate(old, start=1)]
            db.executemany("UPDATE vectors SET id = ? WHERE id = ?", moves)
            db.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        db.rollback()
        logger.debug("embedding cache: recency not recorded (%s)", exc)


def _old_rows(db: sqlite3.Connection, config: str, keys: list[bytes]) -> list[int]:
    low, high = db.execute("SELECT MIN(id), MAX(id) FROM vectors").fetchone()
    if high is None:
        return []
    found = []
    for batch, marks in _batches(keys):
        query = f"SELECT id FROM vectors WHERE config = ? AND key IN ({marks}) AND id <= ?"
        found += [row_id for (row_id,) in db.execute(query, (config, *batch, (low + high) // 2))]
    return sorted(found)


def _row(config: str, key: bytes, vector: np.ndarray) -> tuple:
    data = np.ascontiguousarray(vector, dtype=np.float32)
    return config, key, None if data.ndim == 1 else data.shape[0], data.shape[-1], data.tobytes()


def _batches(keys: list[bytes]) -> Iterator[tuple[list[bytes], str]]:
    """Yield the keys `SQL_BATCH` at a time, each batch with its `?` placeholders."""
    for start in range(0, len(keys), SQL_BATCH):
        batch = keys[start : start + SQL_BATCH]
        yield batch, ",".join("?" * len(batch))


def _size(count: int) -> str:
    return f"{count / 2**20:.1f} MiB"


def _os_error(exc: sqlite3.OperationalError, path: Path) -> Exception:
    """SQLite's 'disk is full' / 'readonly' / 'unable to open' as the OSError the CLI reports in one line."""
    message = str(exc).lower()
    for words, code in (("full", errno.ENOSPC), ("readonly", errno.EROFS), ("unable to open", errno.EACCES)):
        if words in message:
            return OSError(code, os.strerror(code), str(path))
    return exc


@dataclass
class CacheStats:
    """How many texts a cache found (hits) and how many it had embedded (misses)."""

    hits: int = 0
    misses: int = 0

    def __str__(self) -> str:
        return f"{self.hits} cached, {self.misses} embedded"


class EmbeddingCache:
    """Vectors for one feature configuration; `directory=None` keeps them in memory only.

    Parameters
    ----------
    options : dict
        Everything besides the text that determines a vector (model fingerprint, layers, pooling, ...).
    directory : str or Path, optional
        A cache directory (memory + disk, survives restarts); None keeps vectors in memory only.
    chunk_size : int
        Texts embedded and stored per step: an interrupted call keeps every finished chunk.
    max_disk_bytes : int, optional
        Size limit of the directory's database; default $BERTKIT_DISK_CACHE_MB, else 10 GiB.
    """

    def __init__(
        self,
        options: dict,
        directory: str | Path | None = None,
        chunk_size: int = DEFAULT_CHUNK,
        max_disk_bytes: int | None = None,
    ) -> None:
        self.key = config_key(options)
        self.options = options
        self.chunk_size = chunk_size
        self.directory = Path(directory) if directory is not None else None
        self.disk = DiskStore(directory, max_disk_bytes) if directory is not None else None
        self.stats = CacheStats()
        if self.disk is not None:
            self.disk.register(self.key, options)

    def get_or_compute(
        self, texts: Sequence[str], compute: Callable[[list[str]], np.ndarray | list[np.ndarray]], stack: bool = True
    ) -> Any:  # an (n, dim) array; with stack=False a list of arrays
        """Vectors for `texts` in order; texts not cached are embedded in chunks, each chunk stored at once.

        stack=False returns a list, for entries of different lengths (one vector per word of a sentence).
        """
        keys = [text_key(t) for t in texts]
        found, missing = self._lookup(keys, texts)  # `found` holds them, so eviction during this call loses nothing
        misses = sum(key in missing for key in keys)
        self.stats.misses += misses
        self.stats.hits += len(keys) - misses
        pending = list(missing.items())
        for start in range(0, len(pending), self.chunk_size):
            chunk = pending[start : start + self.chunk_size]
            vectors = compute([text for _, text in chunk])
            for (key, _), vector in zip(chunk, vectors):
                found[key] = np.array(vector, dtype=np.float32, copy=True)  # a row of its own, not a view
                MEMORY.put(self.key, key, found[key])
            if self.disk is not None:
                self.disk.put_many(self.key, [(key, found[key]) for key, _ in chunk])
        if not stack:
            return [found[k] for k in keys]
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([found[k] for k in keys])

    def _lookup(self, keys: list[bytes], texts: Sequence[str]) -> tuple[dict[bytes, np.ndarray], dict[bytes, str]]:
        """(vectors found in memory or on disk, {key: text} of the rest), each distinct key once."""
        found: dict[bytes, np.ndarray] = {}
        missing: dict[bytes, str] = {}
        for key, text in dict(zip(keys, texts)).items():
            vector = MEMORY.get(self.key, key)
            if vector is None:
                missing[key] = text
            else:
                found[key] = vector
        if self.disk is not None:
            self.disk.touch(self.key, list(found))
            for key, vector in self.disk.get_many(self.key, list(missing)).items():
                found[key] = vector
                MEMORY.put(self.key, key, vector)
                del missing[key]
        return found, missing
