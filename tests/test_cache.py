"""The embedding cache's limits hold as measured: memory by the bytes actually retained (tracemalloc), disk by the
database's size on disk; opening a disk cache reads nothing; vectors equal what the computation gave."""

from __future__ import annotations

import logging
import tracemalloc

import numpy as np
import pytest

from bertkit.io import cache as cache_module
from bertkit.io.cache import DATABASE, EmbeddingCache, MemoryStore, text_key

DIM = 64  # 256 bytes a vector: many entries for little memory


def vectors_for(texts: list[str]) -> np.ndarray:
    """A fresh (n, DIM) matrix per call, like Encoder.embed: each row is a view into it. Row i is its text's hash."""
    return np.stack([np.frombuffer(text_key(t) * 13, dtype=np.float32)[:DIM] for t in texts])


@pytest.fixture
def memory(monkeypatch):
    """A 1 MiB process-wide memory store for the test, instead of the real one."""
    store = MemoryStore(1 << 20)
    monkeypatch.setattr(cache_module, "MEMORY", store)
    return store


def test_memory_bound_holds_as_measured_while_streaming_far_more_than_the_cap(memory):
    cache = EmbeddingCache({"test": "memory bound"}, chunk_size=256)
    hot: list[str] = []  # the first text of every chunk stays in use: each one used to pin its whole chunk
    # what the cache and this test allocate, not another thread's (a Ray client left in the same test process)
    ours = [tracemalloc.Filter(True, where, all_frames=True) for where in ("*/bertkit/io/cache.py", __file__)]
    tracemalloc.start(16)
    try:
        before = tracemalloc.take_snapshot().filter_traces(ours)
        for step in range(160):  # 160 chunks × 256 rows × 256 bytes = 10 MiB of vectors through a 1 MiB cache
            texts = [f"chunk {step} row {i}" for i in range(256)]
            got = cache.get_or_compute(texts + hot, vectors_for)
            hot.append(texts[0])
        del got
        after = tracemalloc.take_snapshot().filter_traces(ours)
        retained = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert memory.bytes <= memory.max_bytes
    assert retained <= memory.max_bytes * 1.1, f"{retained / 2**20:.1f} MiB retained by a 1 MiB cache"
    np.testing.assert_array_equal(cache.get_or_compute(hot, pytest.fail), vectors_for(hot))  # the hot rows stayed


def test_opening_a_disk_cache_loads_nothing_and_finds_vectors_when_asked(memory, tmp_path):
    texts = [f"text {i}" for i in range(3000)]
    EmbeddingCache({"test": "lazy"}, tmp_path).get_or_compute(texts, vectors_for)
    memory.clear()  # a new process: only the disk is left
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        reopened = EmbeddingCache({"test": "lazy"}, tmp_path)
        opened_with = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(memory) == 0 and opened_with < 100_000  # 3000 vectors are 770 KB: none were read
    asked = texts[10:15]
    np.testing.assert_array_equal(reopened.get_or_compute(asked, pytest.fail), vectors_for(asked))
    assert reopened.stats.hits == 5 and len(memory) == 5


def test_disk_cache_stays_within_its_limit_keeps_what_is_used_and_logs_evictions(memory, tmp_path, caplog):
    limit = 2 << 20
    cache = EmbeddingCache({"test": "disk limit"}, tmp_path, chunk_size=1024, max_disk_bytes=limit)
    database = tmp_path / DATABASE
    hot: list[str] = []
    sizes = []
    with caplog.at_level(logging.INFO, logger="bertkit.io.cache"):
        for step in range(60):  # 60 × 1024 rows × 256 bytes = 15 MiB of vectors through a 2 MiB disk cache
            texts = [f"chunk {step} row {i}" for i in range(1024)]
            cache.get_or_compute(texts + hot, vectors_for)
            hot.append(texts[0])
            sizes.append(database.stat().st_size)
    assert max(sizes) <= limit and cache.disk.bytes <= limit, f"largest file {max(sizes)} bytes, limit {limit}"
    evictions = [r.getMessage() for r in caplog.records if "evicted" in r.getMessage()]
    assert evictions and "least recently used" in evictions[0] and "of configuration " + cache.key in evictions[0]

    memory.clear()
    np.testing.assert_array_equal(cache.get_or_compute(hot, pytest.fail), vectors_for(hot))  # used: kept on disk
    first = ["chunk 0 row 5", "chunk 1 row 9"]  # long evicted: embedded again, to the same vectors
    recomputed = []
    again = cache.get_or_compute(first, lambda texts: recomputed.extend(texts) or vectors_for(texts))
    assert recomputed == first
    np.testing.assert_array_equal(again, vectors_for(first))


def test_default_disk_limit_is_documented_and_settable(monkeypatch, tmp_path):
    assert cache_module.default_disk_bytes() == 10 * 2**30
    monkeypatch.setenv("BERTKIT_DISK_CACHE_MB", "5")
    assert EmbeddingCache({"test": "env"}, tmp_path).disk.max_bytes == 5 * 2**20
    assert EmbeddingCache({"test": "env"}, tmp_path, max_disk_bytes=1234).disk.max_bytes == 1234


def test_the_database_carries_the_bertkit_record_and_another_is_refused(memory, tmp_path):
    import json
    import sqlite3

    from bertkit.errors import InputError
    from bertkit.records import record_kind

    EmbeddingCache({"test": "record"}, tmp_path)
    with sqlite3.connect(tmp_path / DATABASE) as db:
        assert record_kind(json.loads(db.execute("SELECT bertkit FROM record").fetchone()[0])) == "embedding cache"
    EmbeddingCache({"test": "record"}, tmp_path)  # opened again: its own record is read back
    older = tmp_path / "older"
    older.mkdir()
    with sqlite3.connect(older / DATABASE) as db:  # a cache of bertkit 0.2: tables, no record
        db.execute("CREATE TABLE vectors (id INTEGER PRIMARY KEY)")
    with pytest.raises(InputError, match="no bertkit record.*only a cache: delete it"):
        EmbeddingCache({"test": "record"}, older)


def test_memory_entries_are_private_copies(memory):
    chunk = vectors_for(["a", "b"])
    memory.put("config", b"k" * 20, chunk[1])
    stored = memory.get("config", b"k" * 20)
    assert stored.base is None and stored.flags.owndata  # not a view that keeps `chunk` alive
    np.testing.assert_array_equal(stored, chunk[1])


def test_a_damaged_cache_file_is_one_clear_error(tmp_path):
    from bertkit.errors import InputError

    (tmp_path / DATABASE).write_bytes(b"not a database, " * 100)
    with pytest.raises(InputError, match="the embedding cache is damaged .* delete the file"):
        EmbeddingCache({"test": "damaged"}, tmp_path)
