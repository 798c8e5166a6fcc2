"""BertVectorizer is a real scikit-learn transformer, and the cache means a text is embedded once per configuration."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.utils import estimator_checks as checks

from bertkit import BertVectorizer, InputError
from bertkit.io.cache import MEMORY, EmbeddingCache
from bertkit.io.readers import read_labelled, sample_path


@pytest.fixture(scope="module")
def sample():
    data = read_labelled(sample_path("reviews.tsv"), "text", "label")
    return data.texts, data.labels


@pytest.mark.parametrize(
    "check",
    [
        checks.check_no_attributes_set_in_init,
        checks.check_get_params_invariance,
        checks.check_set_params,
        checks.check_parameters_default_constructible,
        checks.check_estimator_cloneable,
        checks.check_estimator_repr,
        checks.check_do_not_raise_errors_in_init_or_set_params,
    ],
    ids=lambda check: check.__name__,
)
def test_sklearn_estimator_checks(check):
    check("BertVectorizer", BertVectorizer(layers="last4:sum"))


def test_fit_returns_self_and_transform_is_float32(encoder, sample):
    texts = sample[0][:6]
    vectorizer = BertVectorizer(layers="last4:sum", pooling="mean", cache=None)
    assert vectorizer.fit(texts) is vectorizer
    features = vectorizer.transform(texts)
    assert features.dtype == np.float32 and features.shape == (6, 384)
    np.testing.assert_allclose(features, encoder.embed(texts, layers="last4:sum", pooling="mean"), atol=1e-6)
    assert vectorizer.get_feature_names_out()[:2].tolist() == ["bert0", "bert1"]
    assert np.array_equal(vectorizer.fit_transform(texts), features)
    twin = clone(vectorizer)
    assert twin.get_params() == vectorizer.get_params() and not hasattr(twin, "encoder_")
    twin.set_params(layers="last", pooling="cls+mean")
    np.testing.assert_allclose(
        twin.fit(texts).transform(texts), encoder.embed(texts, layers="last", pooling="cls+mean"), atol=1e-6
    )


def test_bad_input(sample):
    vectorizer = BertVectorizer().fit(sample[0][:2])
    np.testing.assert_array_equal(vectorizer.transform("just a string"), vectorizer.transform(["just a string"]))
    with pytest.raises(InputError, match=r"X\[1\] is missing"):
        vectorizer.transform(["ok", None])
    with pytest.raises(InputError, match="pooling='none'"):
        BertVectorizer(pooling="none").fit(["x"])


def count_embedded(monkeypatch, vectorizer_class=BertVectorizer):
    seen = []
    original = vectorizer_class._embed

    def counting(self, texts):
        seen.extend(texts)
        return original(self, texts)

    monkeypatch.setattr(vectorizer_class, "_embed", counting)
    return seen


def test_pipeline_and_grid_search_embed_each_text_once(monkeypatch, sample):
    MEMORY.clear()
    texts, labels = sample
    seen = count_embedded(monkeypatch)
    pipe = make_pipeline(BertVectorizer(layers="second_to_last", pooling="mean"), LogisticRegression(max_iter=1000))
    search = GridSearchCV(pipe, {"logisticregression__C": [0.01, 0.1, 1, 10]}, cv=3).fit(texts, labels)
    assert sorted(seen) == sorted(set(texts))  # 4 Cs × 3 folds + refit, yet each text embedded once
    assert search.score(texts, labels) > 0.9


def test_without_cache_every_call_embeds(monkeypatch, sample):
    seen = count_embedded(monkeypatch)
    vectorizer = BertVectorizer(layers="second_to_last", cache=None).fit(sample[0][:5])
    vectorizer.transform(sample[0][:5])
    vectorizer.transform(sample[0][:5])
    assert len(seen) == 10


def test_disk_cache_survives_a_new_process_and_keys_on_options(monkeypatch, sample, tmp_path):
    texts = sample[0][:12]
    MEMORY.clear()
    first = BertVectorizer(layers="-3", cache=tmp_path).fit(texts)
    expected = first.transform(texts)
    assert first.cache_.stats.misses == 12
    MEMORY.clear()  # a new process: only the disk is left
    seen = count_embedded(monkeypatch)
    again = BertVectorizer(layers="-3", cache=tmp_path).fit(texts)
    np.testing.assert_array_equal(again.transform(texts), expected)
    assert seen == [] and again.cache_.stats.hits == 12
    other = BertVectorizer(layers="-3", pooling="max", cache=tmp_path).fit(texts)
    other.transform(texts[:2])
    assert len(seen) == 2 and other.cache_.key != again.cache_.key
    assert BertVectorizer(layers="-3", max_length=64, cache=tmp_path).fit(texts).cache_.key != again.cache_.key


def test_interrupted_caching_keeps_finished_chunks(tmp_path):
    MEMORY.clear()
    texts = [f"text {i}" for i in range(10)]
    calls = []

    def flaky(chunk):
        calls.append(list(chunk))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return np.array([[float(t.split()[1])] for t in chunk], dtype=np.float32)

    cache = EmbeddingCache({"test": 1}, tmp_path, chunk_size=4)
    with pytest.raises(KeyboardInterrupt):
        cache.get_or_compute(texts, flaky)
    assert stored_keys(tmp_path, cache.key) == 8  # two finished chunks of 4, committed; the third left nothing
    MEMORY.clear()
    calls.clear()
    resumed = EmbeddingCache({"test": 1}, tmp_path, chunk_size=4)
    vectors = resumed.get_or_compute(texts, flaky)
    assert calls == [texts[8:]]  # only the unfinished chunk is embedded again
    assert vectors[:, 0].tolist() == list(range(10))


def stored_keys(directory, config: str) -> int:
    import sqlite3

    from bertkit.io.cache import DATABASE

    with sqlite3.connect(directory / DATABASE) as db:
        return db.execute("SELECT COUNT(*) FROM vectors WHERE config = ?", (config,)).fetchone()[0]


def test_disk_cache_keeps_keys_that_end_in_a_zero_byte(tmp_path):
    """numpy's fixed-width bytes drop trailing NULs: a SHA-1 ending in 0x00 must still be found after a reload."""
    from bertkit.io.cache import text_key

    texts = [t for t in (f"text {i}" for i in range(5000)) if text_key(t).endswith(b"\0")][:3] + ["plain text"]
    assert len(texts) == 4
    MEMORY.clear()
    EmbeddingCache({"test": "nul"}, tmp_path).get_or_compute(texts, lambda chunk: np.ones((len(chunk), 2), np.float32))
    MEMORY.clear()
    reloaded = EmbeddingCache({"test": "nul"}, tmp_path)
    reloaded.get_or_compute(texts, lambda chunk: pytest.fail(f"re-embedded {chunk}"))
    assert reloaded.stats.hits == 4


def test_ragged_entries_round_trip_through_disk(tmp_path):
    MEMORY.clear()
    words = {"a b": np.ones((2, 3), np.float32), "c": np.full((1, 3), 2, np.float32)}
    EmbeddingCache({"test": "ragged"}, tmp_path).get_or_compute(
        list(words), lambda keys: [words[k] for k in keys], stack=False
    )
    MEMORY.clear()
    got = EmbeddingCache({"test": "ragged"}, tmp_path).get_or_compute(list(words), pytest.fail, stack=False)
    assert all(np.array_equal(g, words[k]) for g, k in zip(got, words))


def test_fingerprint_ignores_the_tokenizers_truncation_state():
    from bertkit import Encoder

    before = Encoder.from_pretrained()
    expected = before.fingerprint
    after = Encoder.from_pretrained()
    after.tokenizer(["a sentence that is long enough"], truncation=True, max_length=4)
    assert after.fingerprint == expected


@pytest.mark.parametrize("output_type", ["float32", "ubinary"])
def test_no_texts_give_an_empty_matrix_of_the_full_width(tmp_path, output_type):
    for cache in ("memory", tmp_path / "cache", None):
        vectorizer = BertVectorizer(layers="last4:sum", output_type=output_type, cache=cache).fit(["a film"])
        one = vectorizer.transform(["a film"])
        empty = vectorizer.transform([])
        assert empty.shape == (0, vectorizer.n_features_out_) == (0, one.shape[1])
        assert empty.dtype == one.dtype
