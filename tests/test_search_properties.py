"""Properties of search for generated inputs (hypothesis): vector files and scores.

Files: any truncation or bit flip of a vectors file that bertkit wrote (.npz, .parquet; float32, int8, binary) reads
as one InputError naming the file, or as the same rows (a zip's CRC catches every changed byte of an .npz, a page
checksum every changed byte of a Parquet data page: bertkit writes them and checks them on reading), and
`bertkit search` on it answers or says one line, never a traceback. Scores: for any metric, shapes and types,
`similarity` equals scikit-learn's pairwise functions and `semantic_search` the plain definitions (cosine, dot,
minus the Euclidean / L1 distance, minus the Hamming distance, integer products of int8 buckets), whatever the
chunk sizes, in memory bounded by the chunks.
"""

import tracemalloc

import numpy as np
import pytest
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from bertkit.encoder.compact import compact, int8_ranges
from bertkit.errors import InputError
from bertkit.tasks.search import METRICS, semantic_search, similarity

PROFILE = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TEXTS = ["a gripping, funny film", "dull and slow", "the cast is superb", "I want my two hours back", "moving"]
FILES = [(suffix, output) for suffix in (".npz", ".parquet") for output in ("float32", "int8", "binary")]


@pytest.fixture(scope="module")
def written(tmp_path_factory, encoder):
    """Vectors files as `bertkit embed` writes them: {(suffix, output type): (bytes, vectors, ids, record)}."""
    from bertkit.io.stream import embed_file
    from bertkit.io.vectors import read_vectors

    folder = tmp_path_factory.mktemp("vectors")
    source = folder / "texts.txt"
    source.write_text("\n".join(TEXTS) + "\n")
    files = {}
    for suffix, output in FILES:
        target = folder / f"v_{output}{suffix}"
        embed_file(encoder, source, target, output_type=output, normalize_embeddings=True)
        files[suffix, output] = (target.read_bytes(), *read_vectors(target))
    return files


def damaged(original: bytes, data) -> bytes:
    """`original` cut short, or with one to three bits flipped anywhere."""
    if data.draw(st.booleans(), label="cut"):
        return original[: data.draw(st.integers(0, len(original) - 1), label="length")]
    changed = bytearray(original)
    for _ in range(data.draw(st.integers(1, 3), label="flips")):
        changed[data.draw(st.integers(0, len(original) - 1), label="byte")] ^= 1 << data.draw(st.integers(0, 7))
    return bytes(changed)


@PROFILE
@given(data=st.data(), which=st.sampled_from(FILES))
def test_a_damaged_vectors_file_reads_as_one_input_error_or_the_same_rows(written, tmp_path, data, which):
    from bertkit.io.vectors import read_vectors

    original, vectors, ids, meta = written[which]
    path = tmp_path / f"damaged{which[0]}"
    path.write_bytes(damaged(original, data))
    try:
        found, found_ids, found_meta = read_vectors(path)
    except InputError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc), exc
        return
    # every byte of every .npz member is under the zip's CRC, every Parquet data page under its page checksum
    np.testing.assert_array_equal(found, vectors)
    np.testing.assert_array_equal(found_ids, ids)
    assert found.dtype == vectors.dtype and found_meta == meta


@settings(PROFILE, max_examples=15)
@given(data=st.data(), which=st.sampled_from(FILES))
def test_search_on_a_damaged_vectors_file_answers_or_says_one_line(
    written, encoder, tmp_path, monkeypatch, capsys, data, which
):
    from bertkit.encoder.encode import Encoder

    monkeypatch.setattr(Encoder, "from_pretrained", classmethod(lambda cls, *a, **k: encoder))  # one model load
    path = tmp_path / f"damaged{which[0]}"
    path.write_bytes(damaged(written[which][0], data))
    code, out, err = run_cli(monkeypatch, capsys, "search", path, "a funny film", "-k", "2")
    if code == 0:
        assert out.startswith("query\trank\tid\tscore")
    else:
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err


SHAPES = st.tuples(st.integers(1, 7), st.integers(0, 40), st.integers(1, 24))  # queries, corpus rows, dim
FLOATS = st.sampled_from([np.float16, np.float32, np.float64])


def arrays(dtype, shape, low=-4.0, high=4.0):
    """Vectors whose numbers are 0 or at least 2^-9 in size: lengths below float32's epsilon are where scikit-learn's
    normalize (a zero vector) and sentence-transformers' (x / 1e-12) part ways, and neither is wrong."""
    if np.dtype(dtype).kind == "f":
        width, least = np.dtype(dtype).itemsize * 8, float(np.dtype(dtype).type(1 / 512))  # 2^-9: exact in float16
        sizes = st.one_of(st.just(0.0), st.floats(least, high, width=width), st.floats(low, -least, width=width))
        return hnp.arrays(dtype, shape, elements=sizes)
    return hnp.arrays(dtype, shape)


@PROFILE
@given(data=st.data(), shape=SHAPES, metric=st.sampled_from(METRICS), dtype=FLOATS)
def test_similarity_equals_scikit_learn(data, shape, metric, dtype):
    from sklearn.metrics import pairwise

    n, m, dim = shape
    a, b = data.draw(arrays(dtype, (n, dim))), data.draw(arrays(dtype, (max(m, 1), dim)))
    a64, b64 = a.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
    expected = {
        "cosine": lambda: pairwise.cosine_similarity(a64, b64),
        "dot": lambda: a64 @ b64.T,
        "euclidean": lambda: -pairwise.euclidean_distances(a64, b64),
        "manhattan": lambda: -pairwise.manhattan_distances(a64, b64),
    }[metric]()
    np.testing.assert_allclose(similarity(a, b, metric), expected, rtol=1e-4, atol=1e-3)


def plain_scores(queries: np.ndarray, corpus: np.ndarray, metric: str) -> np.ndarray:
    """The definitions, in float64, one pair at a time (cosine as sentence-transformers normalizes: x / max(|x|,
    1e-12))."""
    queries, corpus = queries.astype(np.float64), corpus.astype(np.float64)
    scores = np.empty((len(queries), len(corpus)))
    for i, q in enumerate(queries):
        for j, c in enumerate(corpus):
            if metric == "cosine":
                scores[i, j] = (q / max(np.linalg.norm(q), 1e-12)) @ (c / max(np.linalg.norm(c), 1e-12))
            elif metric == "dot":
                scores[i, j] = q @ c
            elif metric == "euclidean":
                scores[i, j] = -np.linalg.norm(q - c)
            else:
                scores[i, j] = -np.abs(q - c).sum()
    return scores


def assert_top_k(found: list[list[dict]], expected: np.ndarray, top_k: int, atol: float) -> None:
    """Each query's hits are the best `top_k` of `expected` (ties in any order), best first, with their scores."""
    for hits, row in zip(found, expected):
        assert len(hits) == min(top_k, len(row))
        scores = [hit["score"] for hit in hits]
        assert scores == sorted(scores, reverse=True)
        np.testing.assert_allclose(scores, np.sort(row)[::-1][: len(hits)], atol=atol, rtol=1e-5)
        np.testing.assert_allclose(scores, row[[hit["corpus_id"] for hit in hits]], atol=atol, rtol=1e-5)
        assert len({hit["corpus_id"] for hit in hits}) == len(hits)


CHUNKS = st.tuples(st.integers(1, 8), st.integers(1, 50))


@PROFILE
@given(data=st.data(), shape=SHAPES, metric=st.sampled_from(METRICS), dtype=FLOATS, k=st.integers(1, 12))
def test_float_search_equals_the_definitions_in_any_chunks(data, shape, metric, dtype, k):
    n, m, dim = shape
    queries, corpus = data.draw(arrays(dtype, (n, dim))), data.draw(arrays(dtype, (m, dim)))
    chunks = data.draw(CHUNKS)
    found = semantic_search(queries, corpus, k, metric, query_chunk_size=chunks[0], corpus_chunk_size=chunks[1])
    expected = plain_scores(queries.astype(np.float32), corpus.astype(np.float32), metric)
    assert_top_k(found, expected, k, atol=2e-3 if metric != "dot" else 1e-2)


@PROFILE
@given(data=st.data(), shape=SHAPES, metric=st.sampled_from(METRICS), k=st.integers(1, 12), unsigned=st.booleans())
def test_int8_search_scores_the_buckets_exactly(data, shape, metric, k, unsigned):
    """Queries already in int8 buckets: scores from integer products equal the definitions on the bucket numbers."""
    n, m, dim = shape
    queries = data.draw(hnp.arrays(np.int8, (n, dim)))
    corpus = data.draw(hnp.arrays(np.int8, (m, dim)))
    stored = (corpus.view(np.uint8) ^ 0x80) if unsigned else corpus  # uint8 = int8 + 128
    chunks = data.draw(CHUNKS)
    precision = "uint8" if unsigned else "int8"  # compact queries: the type is said (the widths cannot tell)
    found = semantic_search(
        queries, stored, k, metric, query_chunk_size=chunks[0], corpus_chunk_size=chunks[1], corpus_precision=precision
    )
    assert_top_k(found, plain_scores(queries, corpus, metric), k, atol=1e-3)


@pytest.mark.parametrize("kernel", ["faiss", "numpy"])
@PROFILE
@given(data=st.data(), shape=SHAPES, k=st.integers(1, 12), signed=st.booleans())
def test_binary_search_without_rescoring_scores_minus_the_hamming_distance(monkeypatch, kernel, data, shape, k, signed):
    """By faiss's popcount kernel where it is installed, by numpy's without it: the same distances."""
    import bertkit.tasks.engine as search

    if kernel == "faiss":
        pytest.importorskip("faiss")
    else:
        monkeypatch.setattr(search, "require_faiss", lambda optional=False: None)
    n, m, dim = shape
    queries = data.draw(arrays(np.float32, (n, dim)))
    corpus = data.draw(arrays(np.float32, (m, dim)))
    stored = compact(corpus, "binary" if signed else "ubinary")
    chunks = data.draw(CHUNKS)
    precision = "binary" if signed else "ubinary"  # told, not guessed: one number packs into one byte
    found = semantic_search(
        queries,
        stored,
        k,
        rescore_multiplier=0,
        query_chunk_size=chunks[0],
        corpus_chunk_size=chunks[1],
        corpus_precision=precision,
    )
    hamming = (queries[:, None, :] > 0) != (corpus[None, :, :] > 0)
    assert_top_k(found, -hamming.sum(-1).astype(np.float64), k, atol=0)


@PROFILE
@given(data=st.data(), shape=SHAPES, metric=st.sampled_from(METRICS), k=st.integers(1, 6), multiplier=st.integers(1, 5))
def test_rescored_scores_are_the_metric_against_the_candidates_made_float(data, shape, metric, k, multiplier):
    """int8 with ranges and binary: every hit's score is `metric` between the float query and the stored vector made
    float again (bucket lower edges, ±1 bits), and the hits are the best of the candidates by those scores."""
    from bertkit.encoder.compact import dequantize, unpack_binary

    n, m, dim = shape
    queries, corpus = data.draw(arrays(np.float32, (n, dim))), data.draw(arrays(np.float32, (max(m, 2), dim)))
    ranges = int8_ranges(corpus)
    for output in ("int8", "binary"):
        stored = compact(corpus, output, ranges if output == "int8" else None)[:m]  # m may be 0: nothing to rescore
        found = semantic_search(
            queries, stored, k, metric, rescore_multiplier=multiplier, ranges=ranges, corpus_precision=output
        )
        floats = dequantize(stored, "int8", ranges) if output == "int8" else unpack_binary(stored, dim)
        expected = plain_scores(queries, floats.reshape(len(stored), dim), metric)
        for hits, row in zip(found, expected):
            assert len(hits) == min(k, len(row))
            np.testing.assert_allclose([h["score"] for h in hits], row[[h["corpus_id"] for h in hits]], atol=2e-3)


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("output", ["float32", "int8", "binary"])
def test_search_memory_is_bounded_by_the_chunks(metric, output):
    """40,000 corpus rows searched 2,000 at a time: the peak stays near what the chunks need, far below one
    (queries × corpus) score matrix or a float64 copy of the corpus."""
    rng = np.random.default_rng(0)
    corpus = rng.normal(size=(40_000, 64)).astype(np.float32)
    queries = rng.normal(size=(50, 64)).astype(np.float32)
    ranges = int8_ranges(corpus)
    stored = compact(corpus, output, ranges if output == "int8" else None)
    semantic_search(queries[:1], stored[:10], 1, metric, ranges=ranges)  # imports (scikit-learn, torch) come first
    tracemalloc.start()
    try:
        semantic_search(queries, stored, 10, metric, corpus_chunk_size=2_000, ranges=ranges)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    whole = 50 * 40_000 * 8  # one float64 score matrix of all queries × all rows: 16 MB
    assert peak < whole / 2, peak
