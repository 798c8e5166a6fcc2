"""Retrieval-style embeddings: prompts, dimensions, compact output types, similarity and search, truncation direction,
each equal to sentence-transformers on the same model and vectors, and on the command line."""

import json
import shutil

import numpy as np
import pytest
import torch
from conftest import run_cli

from bertkit import Encoder, InputError
from bertkit.encoder.compact import compact, int8_ranges, unpack_binary
from bertkit.encoder.models import default_model_dir
from bertkit.tasks.search import semantic_search, similarity

TEXTS = [
    "how old are you?",
    "I am six years old.",
    "EU rejects German call to boycott British lamb .",
    "a visually stunning rumination on love",
    "the movie was a dull, lifeless mess",
    "Korea is a country in East Asia",
]


@pytest.fixture(scope="module")
def prompted(tmp_path_factory):
    """The packaged model with named prompts, as E5/BGE-style models declare them."""
    folder = shutil.copytree(default_model_dir(), tmp_path_factory.mktemp("prompted") / "model")
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    config.update(prompts={"query": "query: ", "passage": "passage: "}, default_prompt_name=None)
    (folder / "config_sentence_transformers.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def st_model(prompted):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(prompted), device="cpu")


@pytest.mark.parametrize("include_prompt", [True, False])
def test_prompts_equal_sentence_transformers(prompted, st_model, include_prompt, tmp_path):
    folder = prompted
    if not include_prompt:  # the Pooling module's own setting, as a model can ship it
        folder = shutil.copytree(prompted, tmp_path / "no-prompt-pooling")
        pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
        (folder / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "include_prompt": False}))
        from sentence_transformers import SentenceTransformer

        reference = SentenceTransformer(str(folder), device="cpu")
    else:
        reference = st_model
    encoder = Encoder.from_pretrained(str(folder))
    assert encoder.info()["prompts"] == {"query": "query: ", "passage": "passage: "}
    for kwargs in ({"prompt_name": "query"}, {"prompt": "passage: "}):
        ours = encoder.embed(TEXTS, normalize_embeddings=True, **kwargs)
        theirs = reference.encode(TEXTS, **kwargs)
        np.testing.assert_allclose(ours, theirs, atol=2e-5)
    assert not np.allclose(encoder.embed(TEXTS[:1], prompt_name="query"), encoder.embed(TEXTS[:1]), atol=1e-3)
    with pytest.raises(InputError, match="prompt_name='document'.*passage, query"):
        encoder.embed(TEXTS, prompt_name="document")


def test_a_default_prompt_applies_when_none_is_named(prompted, tmp_path):
    folder = shutil.copytree(prompted, tmp_path / "default")
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    (folder / "config_sentence_transformers.json").write_text(json.dumps({**config, "default_prompt_name": "query"}))
    encoder = Encoder.from_pretrained(str(folder))
    np.testing.assert_allclose(encoder.embed(TEXTS), encoder.embed(TEXTS, prompt="query: "), atol=1e-6)
    _, report = encoder.embed_with_report(TEXTS[:1])
    assert report.prompt == "query: "


def test_dimensions_are_matryoshka_truncation_then_normalization(encoder, st_model):
    ours = encoder.embed(TEXTS, truncate_dim=128, normalize_embeddings=True)
    theirs = st_model.encode(TEXTS, truncate_dim=128)  # the packaged model normalizes; truncation comes after it
    full = encoder.embed(TEXTS)[:, :128]
    np.testing.assert_allclose(ours, full / np.linalg.norm(full, axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(ours, theirs / np.linalg.norm(theirs, axis=1, keepdims=True), atol=2e-5)
    assert encoder.embed(TEXTS, truncate_dim=64).shape == (len(TEXTS), 64)
    with pytest.raises(InputError, match="truncate_dim=500: these vectors have 384 numbers"):
        encoder.embed(TEXTS, truncate_dim=500)
    with pytest.raises(InputError, match="truncate_dim applies to sentence vectors"):
        encoder.embed_tokens(TEXTS, truncate_dim=16)


@pytest.mark.parametrize("output", ["int8", "uint8", "binary", "ubinary"])
def test_compact_types_equal_sentence_transformers_quantization(output):
    from sentence_transformers.util import quantize_embeddings

    rng = np.random.default_rng(0)
    vectors, calibration = rng.normal(size=(20, 64)).astype(np.float32), rng.normal(size=(200, 64)).astype(np.float32)
    theirs = quantize_embeddings(vectors, precision=output, calibration_embeddings=calibration)
    ours = compact(vectors, output, int8_ranges(calibration) if output in ("int8", "uint8") else None)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)
    if output.endswith("binary"):
        assert ours.shape == (20, 8) and np.array_equal(unpack_binary(ours, 64) > 0, vectors > 0)


def test_compact_vectors_from_embed_share_the_calibrations_mapping(encoder):
    int8 = encoder.embed(TEXTS, output_type="int8")
    assert int8.dtype == np.int8 and int8.shape == (len(TEXTS), 384)
    again = encoder.embed(TEXTS[:1], output_type="int8")  # another call, the same buckets
    np.testing.assert_array_equal(again, int8[:1])
    assert encoder.embed(TEXTS, output_type="float16").dtype == np.float16
    assert encoder.embed(TEXTS, output_type="binary").shape == (len(TEXTS), 48)
    own = int8_ranges(encoder.embed(TEXTS))
    np.testing.assert_array_equal(
        encoder.embed(TEXTS, output_type="uint8", ranges=own), compact(encoder.embed(TEXTS), "uint8", own)
    )
    with pytest.raises(InputError, match="output_type='bits'"):
        encoder.embed(TEXTS, output_type="bits")


@pytest.mark.parametrize(
    "metric, name",
    [("cosine", "cos_sim"), ("dot", "dot_score"), ("euclidean", "euclidean_sim"), ("manhattan", "manhattan_sim")],
)
def test_similarity_equals_sentence_transformers(metric, name):
    from sentence_transformers import util

    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(5, 16)).astype(np.float32), rng.normal(size=(7, 16)).astype(np.float32)
    np.testing.assert_allclose(similarity(a, b, metric), getattr(util, name)(a, b).numpy(), atol=1e-4)


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_semantic_search_equals_sentence_transformers_in_small_chunks(metric):
    from sentence_transformers import util

    rng = np.random.default_rng(2)
    queries, corpus = rng.normal(size=(23, 32)).astype(np.float32), rng.normal(size=(1003, 32)).astype(np.float32)
    function = util.cos_sim if metric == "cosine" else util.dot_score
    theirs = util.semantic_search(torch.from_numpy(queries), torch.from_numpy(corpus), top_k=7, score_function=function)
    ours = semantic_search(queries, corpus, top_k=7, metric=metric, query_chunk_size=5, corpus_chunk_size=100)
    assert [[h["corpus_id"] for h in q] for q in ours] == [[h["corpus_id"] for h in q] for q in theirs]
    for mine, other in zip(ours, theirs):
        np.testing.assert_allclose([h["score"] for h in mine], [h["score"] for h in other], atol=1e-4)


def test_binary_search_finds_what_float_search_finds(encoder):
    from bertkit.io.readers import read_labelled, sample_path

    corpus = read_labelled(sample_path("reviews.tsv"), "text", "label").texts
    vectors = encoder.embed(corpus, normalize_embeddings=True)
    queries = vectors[:10] + 0.01 * np.random.default_rng(3).normal(size=(10, 384)).astype(np.float32)
    exact = [[h["corpus_id"] for h in q] for q in semantic_search(queries, vectors, top_k=5)]
    binary = semantic_search(queries, compact(vectors, "binary"), top_k=5, rescore_multiplier=4)
    recall = np.mean([len(set(e) & {h["corpus_id"] for h in b}) / 5 for e, b in zip(exact, binary)])
    assert recall >= 0.8, recall
    assert [q[0]["corpus_id"] for q in binary] == list(range(10))  # each query's own review comes first
    packed_queries, packed = compact(queries, "binary"), compact(vectors, "binary")  # 48 bytes each: int8 look-alikes
    with pytest.raises(InputError, match="buckets or packed bits alike; say which with corpus_precision='int8' or"):
        semantic_search(packed_queries, packed, top_k=5)
    hamming = semantic_search(packed_queries, packed, top_k=5, corpus_precision="binary")
    bits = np.unpackbits(packed.view(np.uint8), axis=1)
    for query_bits, hits in zip(np.unpackbits(packed_queries.view(np.uint8), axis=1), hamming):
        distances = (bits != query_bits).sum(axis=1)
        assert [h["score"] for h in hits] == sorted(-distances, reverse=True)[:5]


def test_truncation_direction_left_keeps_the_end(encoder):
    from transformers import AutoModel, AutoTokenizer

    long_text = "the beginning is here " + "and then more words " * 40 + "the very end"
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir(), truncation_side="left")
    model = AutoModel.from_pretrained(default_model_dir()).eval()
    with torch.no_grad():
        expected = model(**tokenizer(long_text, truncation=True, max_length=32, return_tensors="pt"))
    found = encoder.embed([long_text], max_length=32, truncation_direction="left", pooling="cls")
    np.testing.assert_allclose(found[0], expected.last_hidden_state[0, 0].numpy(), atol=1e-5)
    tokens = encoder.embed_tokens([long_text], max_length=32, truncation_direction="left")[0].tokens
    assert tokens[-4:] == ["the", "very", "end", "[SEP]"] and tokens[0] == "[CLS]"
    with pytest.raises(InputError, match="truncation_direction='middle'"):
        encoder.embed([long_text], truncation_direction="middle")


def test_the_vectorizer_takes_prompts_and_dimensions_and_keys_its_cache_on_them(prompted):
    from bertkit import BertVectorizer

    plain = BertVectorizer(model=str(prompted), layers="last").fit([])
    queried = BertVectorizer(model=str(prompted), layers="last", prompt_name="query", truncate_dim=96).fit([])
    assert queried.n_features_out_ == 96 and queried.transform(TEXTS).shape == (len(TEXTS), 96)
    assert queried.feature_options()["prompt"] == "query: " and plain.feature_options()["prompt"] == ""
    assert queried.feature_options()["truncate_dim"] == 96 and plain.feature_options()["truncate_dim"] is None
    direct = queried.encoder_.embed(TEXTS, layers="last", prompt_name="query", truncate_dim=96)
    np.testing.assert_allclose(queried.transform(TEXTS), direct, atol=1e-6)


def test_embed_writes_compact_vectors_with_their_options_and_search_reads_them(monkeypatch, capsys, tmp_path):
    from bertkit.io.vectors import read_vectors

    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(TEXTS) + "\n")
    for output_type in ("float32", "int8", "binary"):
        target = tmp_path / f"{output_type}.npz"
        code, _, err = run_cli(
            monkeypatch,
            capsys,
            "embed",
            source,
            "-o",
            target,
            "--output-type",
            output_type,
            "--normalize",
            "--truncate-dim",
            "256",
        )
        assert code == 0, err
        vectors, ids, meta = read_vectors(target)
        assert meta["output"] == output_type and meta["truncate_dim"] == 256 and meta["normalize_embeddings"] is True
        assert vectors.dtype == {"float32": np.float32, "int8": np.int8, "binary": np.int8}[output_type]
        assert ids.tolist() == list(range(len(TEXTS)))
        assert (meta["ranges"] is not None) == (output_type == "int8")
        code, out, err = run_cli(monkeypatch, capsys, "search", target, "how old is he?", "--top-k", "2")
        assert code == 0, err
        rows = [line.split("\t") for line in out.splitlines()[1:]]
        assert rows[0][:3] == ["how old is he?", "1", "0"], rows
    parquet = tmp_path / "v.parquet"
    assert run_cli(monkeypatch, capsys, "embed", source, "-o", parquet, "--output-type", "uint8")[0] == 0
    vectors, _, meta = read_vectors(parquet)
    assert vectors.dtype == np.uint8 and len(meta["ranges"]) == 2
    code, _, err = run_cli(monkeypatch, capsys, "embed", source, "-o", tmp_path / "v.npy", "--output-type", "int8")
    assert code == 2 and "write .npz or .parquet" in err
    code, _, err = run_cli(monkeypatch, capsys, "embed", source, "-o", tmp_path / "p.npz", "--prompt-name", "query")
    assert code == 2 and "error: --prompt-name query: this model's prompts are none" in err


def test_search_takes_the_npy_the_docs_show_first_as_the_options_given_make_it(monkeypatch, capsys, tmp_path, encoder):
    """A bare .npy records nothing: its rows are numbered, its vectors taken as --model and the options given make
    them, and the hits and scores are those of the same vectors in a .npz (which records its options)."""
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(TEXTS) + "\n")
    found = {}
    for suffix, options in ((".npy", ()), (".npz", ()), ("-concat.npy", ("--layers", "last4:concat"))):
        assert run_cli(monkeypatch, capsys, "embed", source, "-o", tmp_path / f"v{suffix}", *options)[0] == 0
        code, out, err = run_cli(monkeypatch, capsys, "search", tmp_path / f"v{suffix}", "how old is he?", *options)
        assert code == 0, err
        found[suffix] = [line.split("\t")[:4] for line in out.splitlines()[1:]]
    assert found[".npy"] == found[".npz"] and found[".npy"][0][:3] == ["how old is he?", "1", "0"]
    assert found["-concat.npy"][0][:3] == ["how old is he?", "1", "0"]
    code, _, err = run_cli(monkeypatch, capsys, "search", tmp_path / "v.npy", "how old is he?")
    assert "records no model or options: taken as made by the packaged model with layers last and pooling mean" in err
    expected = (
        encoder.embed(["how old is he?"], normalize_embeddings=True) @ encoder.embed(TEXTS, normalize_embeddings=True).T
    )
    assert float(found[".npy"][0][3]) == pytest.approx(float(expected.max()), abs=1e-4)

    code, _, err = run_cli(monkeypatch, capsys, "search", tmp_path / "v-concat.npy", "how old is he?")  # options missed
    assert (
        code == 2 and "holds 1536-number vectors; the packaged model with layers last and pooling mean gives 384" in err
    )
    code, _, err = run_cli(monkeypatch, capsys, "search", tmp_path / "v.npz", "how old?", "--layers", "all:mean")
    assert code == 2 and "records the model and options its vectors were made with" in err and "--layers is" in err
    np.save(tmp_path / "ids.npy", np.arange(6))
    code, _, err = run_cli(monkeypatch, capsys, "search", tmp_path / "ids.npy", "how old?")
    assert code == 2 and "holds an array of shape (6,)" in err


@pytest.fixture(scope="module")
def vectors_file(tmp_path_factory, encoder):
    """A float32 .npz and .parquet of TEXTS as `bertkit embed` writes them."""
    from bertkit.io.stream import embed_file

    folder = tmp_path_factory.mktemp("files")
    (folder / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    for suffix in (".npz", ".parquet"):
        embed_file(encoder, folder / "texts.txt", folder / f"v{suffix}", normalize_embeddings=True)
    return {suffix: folder / f"v{suffix}" for suffix in (".npz", ".parquet")}


def one_line_error(monkeypatch, capsys, path) -> str:
    code, _, err = run_cli(monkeypatch, capsys, "search", path, "how old is he?")
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_search_refuses_vectors_of_another_size_in_one_line():
    queries, corpus = np.ones((2, 384), np.float32), np.ones((5, 256), np.float32)
    for metric in ("cosine", "dot", "euclidean", "manhattan"):
        with pytest.raises(InputError, match="384 numbers and the corpus vectors 256"):
            semantic_search(queries, corpus, metric=metric)
    with pytest.raises(InputError, match="384 numbers and the corpus vectors 40"):
        semantic_search(queries, np.ones((5, 40), np.int8))
    with pytest.raises(InputError, match="binary corpus vectors of 40 bytes"):
        semantic_search(queries, np.ones((5, 40), np.int8), corpus_precision="binary")
    with pytest.raises(InputError, match="int8 or uint8 arrays"):
        semantic_search(queries, np.ones((5, 384), np.float32), corpus_precision="int8")


def test_bertkit_search_on_vectors_unlike_their_record_is_one_line(vectors_file, monkeypatch, capsys, tmp_path):
    """Issue 31: vectors of another size than the file's own record (and so than the query) ended in a numpy
    traceback on the cosine path."""
    from bertkit.io.vectors import read_vectors

    vectors, ids, meta = read_vectors(vectors_file[".npz"])
    narrow = tmp_path / "narrow.npz"
    np.savez(narrow, vectors=vectors[:, :100], ids=ids, meta=np.array(json.dumps(meta)))
    line = one_line_error(monkeypatch, capsys, narrow)
    assert str(narrow) in line and "384-number vectors, it holds 100" in line and "embed the texts again" in line


@pytest.mark.parametrize("damage", ["truncated .npz", "truncated .parquet", ".npz without vectors"])
def test_bertkit_search_on_a_damaged_vectors_file_is_one_line(vectors_file, monkeypatch, capsys, tmp_path, damage):
    """Issue 31: these ended in BadZipFile / ArrowInvalid / KeyError tracebacks."""
    suffix = ".parquet" if "parquet" in damage else ".npz"
    target = tmp_path / f"damaged{suffix}"
    data = vectors_file[suffix].read_bytes()
    if damage.startswith("truncated"):
        target.write_bytes(data[: len(data) * 2 // 3])
    else:
        with np.load(vectors_file[".npz"]) as archive:
            np.savez(target, ids=archive["ids"], meta=archive["meta"])
    line = one_line_error(monkeypatch, capsys, target)
    assert str(target) in line and "bertkit embed" in line
    assert ("no vectors entry" in line) == (damage == ".npz without vectors")


@pytest.mark.parametrize("output", ["int8", "binary"])
def test_bertkit_search_says_which_rescoring_and_ranges_it_used(monkeypatch, capsys, tmp_path, output):
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(TEXTS) + "\n")
    target = tmp_path / f"{output}.npz"
    assert run_cli(monkeypatch, capsys, "embed", source, "-o", target, "--output-type", output, "--normalize")[0] == 0
    code, out, err = run_cli(monkeypatch, capsys, "search", target, "how old is he?", "-k", "2")
    assert code == 0 and out.splitlines()[1].split("\t")[:3] == ["how old is he?", "1", "0"], (out, err)
    if output == "int8":
        assert "int8 ranges from the packaged calibration sentences, top 8 rescored" in err
        assert "(rescore multiplier 4)" in err
    else:
        assert "binary candidates by Hamming distance, top 8 rescored with the float query" in err
    code, _, err = run_cli(monkeypatch, capsys, "search", target, "how old?", "--rescore-multiplier", "0")
    assert code == 0 and "no rescoring" in err


def test_compact_searches_cost_their_bytes_and_score_as_defined(encoder):
    """int8 buckets by integer products and bits by popcount give the definitions' scores on real vectors."""
    from bertkit.encoder.compact import hamming_distances, integer_dots

    vectors = encoder.embed(TEXTS, normalize_embeddings=True)
    buckets = compact(vectors, "int8", int8_ranges(vectors))
    np.testing.assert_array_equal(integer_dots(buckets, buckets), buckets.astype(np.int64) @ buckets.T.astype(np.int64))
    bits = compact(vectors, "binary")
    expected = ((vectors[:, None, :] > 0) != (vectors[None, :, :] > 0)).sum(-1)
    np.testing.assert_array_equal(hamming_distances(bits, bits), expected)
    hits = semantic_search(vectors, bits, top_k=len(TEXTS), rescore_multiplier=0)
    for row, found in zip(expected, hits):
        assert sorted(h["score"] for h in found) == sorted(-row)
    asked = vectors * 100  # float queries, no ranges: compared with the bucket numbers as numbers, in float
    for metric in ("cosine", "manhattan"):
        found = semantic_search(asked, buckets, top_k=3, metric=metric)
        scores = similarity(asked, buckets.astype(np.float32), metric)
        for row, hits in zip(scores, found):
            np.testing.assert_allclose([h["score"] for h in hits], np.sort(row)[::-1][:3], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "model, flags, prompt",
    [("default", ("--prompt", "passage: "), "passage: "), ("prompted", ("--prompt-name", "passage"), "passage: ")],
)
def test_bertkit_search_and_the_service_embed_the_query_with_the_vectors_prompt(
    model, flags, prompt, encoder, prompted, monkeypatch, capsys, tmp_path
):
    """Issue 61 (5): the command line and POST /search both put the recorded prompt before the query."""
    from fastapi.testclient import TestClient

    from bertkit.serve import create_app
    from bertkit.tasks.index import load_index

    source, target = tmp_path / "corpus.txt", tmp_path / "v.npz"
    source.write_text("\n".join(TEXTS) + "\n")
    model_flags = () if model == "default" else ("--model", prompted)
    assert run_cli(monkeypatch, capsys, "embed", source, "-o", target, *model_flags, *flags)[0] == 0
    query = "how old is he?"
    code, out, err = run_cli(monkeypatch, capsys, "search", target, query, "--top-k", len(TEXTS))
    assert code == 0, err
    printed = {int(row.split("\t")[2]): float(row.split("\t")[3]) for row in out.splitlines()[1:]}

    model_encoder = encoder if model == "default" else Encoder.from_pretrained(prompted)
    corpus = model_encoder.embed(TEXTS, prompt=prompt)  # the plain computation: the prompt on both sides, cosine
    wanted = similarity(model_encoder.embed([query], prompt=prompt), corpus)[0]
    unprompted = similarity(model_encoder.embed([query]), corpus)[0]
    assert np.abs(wanted - unprompted).max() > 1e-3  # the prompt matters to these scores
    np.testing.assert_allclose([printed[i] for i in range(len(TEXTS))], wanted, atol=1e-4)

    with TestClient(create_app(model_encoder, indexes={"v": load_index(target)})) as client:
        answer = client.post("/search", json={"query": query, "top_k": len(TEXTS)})
    assert answer.status_code == 200, answer.text
    served = {hit["corpus_id"]: hit["score"] for hit in answer.json()}
    np.testing.assert_allclose([served[i] for i in range(len(TEXTS))], wanted, atol=1e-4)


def test_vectors_read_in_windows_are_searched_with_queries_cut(encoder, monkeypatch, capsys, tmp_path):
    """A stride recorded with long_text='window' is the corpus's: a query is cut, so the query's options drop it."""
    source, target = tmp_path / "corpus.txt", tmp_path / "v.npz"
    source.write_text("\n".join(TEXTS) + "\n")
    windows = ("--long-text", "window", "--stride", "16")
    assert run_cli(monkeypatch, capsys, "embed", source, "-o", target, *windows)[0] == 0
    code, out, err = run_cli(monkeypatch, capsys, "search", target, TEXTS[3], "--top-k", len(TEXTS))
    assert code == 0, err
    printed = {int(row.split("\t")[2]): float(row.split("\t")[3]) for row in out.splitlines()[1:]}
    wanted = similarity(encoder.embed([TEXTS[3]]), encoder.embed(TEXTS, long_text="window", stride=16))[0]
    np.testing.assert_allclose([printed[i] for i in range(len(TEXTS))], wanted, atol=1e-4)


@pytest.mark.parametrize("output", ["int8", "uint8"])
def test_compact_ranges_calibrate_on_cut_sentences_while_the_callers_long_text_holds(encoder, output):
    """Issue 61 (6): long_text='error' refuses the caller's long texts, not bertkit's own calibration sentences."""
    from bertkit.encoder.int8 import packaged_texts

    calibration = packaged_texts()
    assert max(len(ids) for ids in encoder.tokenizer(calibration)["input_ids"]) > 8  # some are cut at 8 tokens
    texts = ["short text", "how old are you?"]
    got = encoder.embed(texts, output_type=output, long_text="error", max_length=8)
    ranges = int8_ranges(encoder.embed(calibration, max_length=8, long_text="truncate", warn=False))
    np.testing.assert_array_equal(got, compact(encoder.embed(texts, max_length=8), output, ranges))
    with pytest.raises(InputError, match="long_text"):
        encoder.embed([TEXTS[2]], output_type=output, long_text="error", max_length=8)
