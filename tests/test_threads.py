"""Safe under threads, bounded in memory: one Encoder shared by 8 threads, LRU-bounded caches."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from bertkit import BertVectorizer
from bertkit.io import cache as cache_module
from bertkit.io.cache import EmbeddingCache, MemoryStore, entry_bytes
from bertkit.io.readers import read_labelled, sample_path
from bertkit.tasks import vectorizer as vectorizer_module

OPTIONS = [("last", "mean"), ("last4:sum", "cls"), ("-2", "max"), ("all:mean", "cls+mean")]


@pytest.mark.slow
def test_eight_threads_on_one_encoder_match_serial_calls(encoder):
    texts = read_labelled(sample_path("reviews.tsv"), "text", "label").texts
    jobs = [(texts[i * 10 : (i + 1) * 10] * 4, *OPTIONS[i % len(OPTIONS)]) for i in range(8)]  # 40 texts: 2 batches
    pairs = (["how old are you?"] * 3, ["I am six.", "Six.", "I am " + "very " * 600 + "old."])
    threads_before = torch.get_num_threads()
    serial = [encoder.embed(t, layers=layers, pooling=pooling) for t, layers, pooling in jobs]
    serial_pairs = encoder.embed(pairs[0], text_pair=pairs[1], pooling="cls", warn=False)

    barrier = threading.Barrier(9)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(index):
        try:
            barrier.wait()
            if index == 8:  # sentence pairs truncate through the tokenizer's own (stateful) truncation
                results[index] = encoder.embed(pairs[0], text_pair=pairs[1], pooling="cls", warn=False)
                return
            texts_, layers, pooling = jobs[index]
            results[index] = encoder.embed(texts_, layers=layers, pooling=pooling)
        except BaseException as exc:  # noqa: BLE001 - the test reports every error below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(9)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    for index in range(8):
        np.testing.assert_allclose(results[index], serial[index], atol=1e-5)
    np.testing.assert_allclose(results[8], serial_pairs, atol=1e-5)
    assert torch.get_num_threads() == threads_before


def test_memory_store_evicts_least_recently_used_past_its_cap():
    vectors = {name: np.full(100, i, dtype=np.float32) for i, name in enumerate([b"a", b"b", b"c", b"d"])}
    one = entry_bytes(vectors[b"a"])
    store = MemoryStore(max_bytes=3 * one)  # three 100-float vectors
    for name in (b"a", b"b", b"c"):
        store.put("cfg", name, vectors[name])
    np.testing.assert_array_equal(store.get("cfg", b"a"), vectors[b"a"])  # "a" is now the most recent
    store.put("cfg", b"d", vectors[b"d"])
    assert store.get("cfg", b"b") is None  # least recently used went
    assert [store.get("cfg", n) is not None for n in (b"a", b"c", b"d")] == [True, True, True]
    assert store.bytes == 3 * one and len(store) == 3
    store.put("cfg", b"d", vectors[b"d"])  # replacing counts once
    assert store.bytes == 3 * one
    store.put("other", b"x", np.zeros(1000, np.float32))  # bigger than the cap: kept out entirely
    assert store.bytes <= store.max_bytes


def test_embedding_cache_stays_correct_when_its_memory_is_too_small(monkeypatch):
    monkeypatch.setattr(cache_module, "MEMORY", MemoryStore(max_bytes=2 * entry_bytes(np.zeros(4, np.float32))))
    calls: list[list[str]] = []

    def compute(texts):
        calls.append(list(texts))
        return [np.full(4, len(t), dtype=np.float32) for t in texts]

    store = EmbeddingCache({"test": 1})
    texts = ["a", "bb", "ccc", "bb", "dddd"]
    vectors = store.get_or_compute(texts, compute)
    assert vectors[:, 0].tolist() == [1, 2, 3, 2, 4]  # every row right although most were evicted meanwhile
    assert calls == [["a", "bb", "ccc", "dddd"]] and len(cache_module.MEMORY) == 2
    assert store.get_or_compute(["dddd"], compute)[0, 0] == 4 and len(calls) == 1  # the most recent is still cached


def test_shared_encoders_are_bounded(monkeypatch):
    loaded: list[str] = []

    def fake_load(model, precision="fp32", device="cpu"):
        loaded.append(model)
        return object()

    monkeypatch.setattr(vectorizer_module.Encoder, "from_pretrained", staticmethod(fake_load))
    names = [f"bounded-{i}" for i in range(1, 7)]  # not folders: names no other test loads
    for name in names:
        vectorizer_module.shared_encoder(name)
    assert vectorizer_module.MAX_SHARED_ENCODERS == 4 and loaded == names
    vectorizer_module.shared_encoder("bounded-6")  # recent: reused
    vectorizer_module.shared_encoder("bounded-1")  # evicted (the least recent of more than four): loaded again
    assert loaded == [*names, "bounded-1"]


def test_truncation_warning_names_the_limit_the_caller_asked_for(encoder, caplog):
    encoder.embed(["short", "a long text " * 20], max_length=16)
    assert "1 of 2 texts were longer than 16 tokens" in caplog.text and "512" not in caplog.text


def test_vectorizer_clones_share_one_encoder():
    first = BertVectorizer(layers="last").fit([])
    second = BertVectorizer(layers="last4:sum").fit([])
    assert first.encoder_ is second.encoder_


def test_a_thread_that_sets_its_own_count_keeps_it_when_the_process_count_changes():
    """The serve workers' layout: each worker sets its share before any torch op, then the dispatcher sets the total.

    Torch initialises a thread's count from the process-wide value at that thread's first parallel op; before
    `set_threads` triggered that first, the worker's own 1 was silently replaced by the later process-wide 2.
    """
    from bertkit.encoder.threads import set_threads

    before = torch.get_num_threads()
    ready, go, seen = threading.Event(), threading.Event(), []

    def worker():
        set_threads(1)
        ready.set()
        go.wait()
        seen.append(torch.get_num_threads())

    thread = threading.Thread(target=worker)
    thread.start()
    ready.wait()
    try:
        set_threads(2)
        go.set()
        thread.join()
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_release_openmp_threads_frees_the_callers_team_and_torch_keeps_working():
    import os
    import time

    from bertkit.encoder.threads import release_openmp_threads

    def tasks() -> int:
        return len(os.listdir("/proc/self/task"))

    if not os.path.isdir("/proc/self/task"):
        pytest.skip("counting threads needs /proc (Linux)")
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        release_openmp_threads()  # teams that earlier tests left (torch's, scikit-learn's) go first
        time.sleep(0.2)
        x = torch.randn(2_000_000)
        expected = x.exp()  # a parallel op: this thread now owns a team of 2
        before = tasks()
        assert release_openmp_threads() is True
        deadline = time.time() + 5
        while tasks() > before - 1 and time.time() < deadline:
            time.sleep(0.01)
        assert tasks() == before - 1  # the team's worker thread is gone
        assert torch.equal(x.exp(), expected)  # and the next parallel op makes a new one
        assert tasks() == before
    finally:
        torch.set_num_threads(saved)
