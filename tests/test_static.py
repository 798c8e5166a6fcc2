"""Static models (`bertkit distill --static`, model2vec): the table bertkit writes loads in model2vec and
sentence-transformers, and bertkit's vectors of it equal theirs; its options, its refusals, and every face an encoder
has (features + logistic regression, the service, search) run it."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from conftest import run_cli
from servers import Server

from bertkit import BertVectorizer, Encoder, InputError, distill

pytest.importorskip("model2vec", reason="static models need the extra: pip install 'bertkit[static]'")

TEXTS = ["a visually stunning rumination on love", "the plot is a mess", "I love Korea", "an enchanting , funny film"]
UNKNOWN = "😀"  # a character the uncased WordPiece vocabulary does not have: [UNK]


@pytest.fixture(scope="module")
def static(tmp_path_factory):
    """The packaged model distilled to a static table of 64 dimensions (model2vec, every token of its vocabulary)."""
    output = tmp_path_factory.mktemp("static") / "minilm-static-64"
    return distill(output_dir=output, static=True, dims=64), output


def test_static_vectors_equal_model2vec_and_sentence_transformers(static):
    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer

    report, output = static
    assert (report.layers, report.of) == (0, 6) and "29525 tokens × 64" in report.reason
    record = json.loads((output / "bertkit.json").read_text())
    assert record["method"] == "static" and record["dims"] == 64
    encoder = Encoder.from_pretrained(str(output))
    assert (encoder.num_layers, encoder.hidden_size, encoder.engine, encoder.precision) == (0, 64, "torch", "fp32")
    texts = [*TEXTS, f"{UNKNOWN} great", "great", f"{UNKNOWN} {UNKNOWN}"]
    ours = encoder.embed(texts)
    # model2vec in fp32 is the same arithmetic: equal; its own (fp16 table, fp16 mean) and sentence-transformers'
    # (fp16 table) within half precision
    exact = StaticModel.from_pretrained(str(output), quantize_to="float32").encode(texts)
    np.testing.assert_allclose(ours, exact, atol=1e-6, rtol=0)
    np.testing.assert_allclose(ours, StaticModel.from_pretrained(str(output)).encode(texts), atol=1e-3, rtol=0)
    # sentence-transformers' StaticEmbedding averages the [UNK] row in where model2vec drops it: equal without one
    theirs = SentenceTransformer(str(output), device="cpu").encode(texts)
    np.testing.assert_allclose(ours[:4], theirs[:4], atol=1e-3, rtol=0)
    assert theirs[6].any() and np.abs(ours[4] - theirs[4]).max() > 1e-3
    np.testing.assert_allclose(ours[4], ours[5], atol=1e-6)  # an unknown token counts for nothing, as in model2vec
    assert not ours[6].any() and np.allclose(np.linalg.norm(ours[:6], axis=1), 1, atol=1e-6)  # normalized, as saved
    # batch composition and the batch size change nothing
    np.testing.assert_allclose(encoder.embed(texts[::-1], batch_size=2)[::-1], ours, atol=1e-7, rtol=0)


def test_static_options_mean_what_they_mean_and_the_others_are_refused_in_one_line(static):
    from model2vec import StaticModel

    _, output = static
    encoder = Encoder.from_pretrained(str(output), precision="auto")  # auto: fp32, a table has nothing faster
    exact = StaticModel.from_pretrained(str(output), quantize_to="float32")
    raw = exact.encode(TEXTS, normalize=False)
    np.testing.assert_allclose(encoder.embed(TEXTS, normalize_embeddings=False), raw, atol=1e-6, rtol=0)
    first = raw[:, :16] / np.linalg.norm(raw[:, :16], axis=1, keepdims=True)  # bertkit: truncated, then normalized
    np.testing.assert_allclose(encoder.embed(TEXTS, truncate_dim=16), first, atol=1e-6, rtol=0)
    prompted = exact.encode([f"query: {text}" for text in TEXTS])
    np.testing.assert_allclose(encoder.embed(TEXTS, prompt="query: "), prompted, atol=1e-6, rtol=0)
    assert encoder.embed(TEXTS, output_type="ubinary").shape == (4, 8)
    refused = {
        "layers='-2': a static model has no layers": dict(layers="-2"),
        "pooling='cls': a static model's vectors are the mean of its rows": dict(pooling="cls"),
    }
    for message, options in refused.items():
        with pytest.raises(InputError, match=message):
            encoder.embed(TEXTS, **options)
    with pytest.raises(InputError, match="precision='int8': a static model is a table lookup"):
        Encoder.from_pretrained(str(output), precision="int8")
    with pytest.raises(InputError, match="engine='openvino': a static model is a table lookup"):
        Encoder.from_pretrained(str(output), engine="openvino")
    with pytest.raises(InputError, match="is a static model: it has no layers to cut or distil"):
        distill(str(output), output.parent / "cut", layers=1)
    assert not (output.parent / "cut").exists()


def test_static_features_train_a_classifier_as_scikit_learn_does_on_model2vecs_vectors(static):
    from model2vec import StaticModel
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from bertkit.io.readers import read_labelled, sample_path

    _, output = static
    data = read_labelled(sample_path("reviews.tsv"))
    ours = make_pipeline(BertVectorizer(model=str(output)), LogisticRegression(max_iter=1000)).fit(
        data.texts, data.labels
    )
    vectors = StaticModel.from_pretrained(str(output), quantize_to="float32").encode(data.texts)
    theirs = LogisticRegression(max_iter=1000).fit(vectors, data.labels)
    np.testing.assert_array_equal(ours.predict(data.texts), theirs.predict(vectors))


@pytest.mark.slow
def test_static_models_serve_and_search(static, tmp_path, monkeypatch, capsys):
    _, output = static
    encoder = Encoder.from_pretrained(str(output))
    server = Server("--model", str(output))
    try:
        answer = httpx.post(f"{server.url}/embed", json={"inputs": TEXTS}, timeout=60).json()
        np.testing.assert_allclose(np.array(answer), encoder.embed(TEXTS), atol=1e-6, rtol=0)
    finally:
        server.stop()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    vectors = tmp_path / "corpus.npz"
    code, _, err = run_cli(monkeypatch, capsys, "embed", corpus, "-o", vectors, "--model", output)
    assert code == 0, err
    code, out, err = run_cli(monkeypatch, capsys, "search", vectors, "funny film", "-k", "1")
    assert code == 0, err
    assert "an enchanting , funny film" in out or "\t3\t" in out


def test_distill_static_bad_input_is_one_line_and_writes_nothing(static, tmp_path, monkeypatch, capsys):
    _, output = static
    target = tmp_path / "out"
    cases = {
        ("--static", "--texts", str(output / "tokenizer.json")): "--texts: --static distils from MODEL's vocabulary",
        ("--static", "-l", "3"): "-l 3: a static model keeps no layers",
        ("--dims", "64"): "--dims 64: the width of a static model's table; add --static",
        ("--static", "--dims", "1000"): "--dims 1000: give 2 to the teacher's width, 384",
        (str(output), "--static"): "is a static model: it has no layers to cut or distil",
    }
    for args, message in cases.items():
        code, _, err = run_cli(monkeypatch, capsys, "distill", *args, "-o", target)
        assert code != 0 and message in err, (args, err)
        assert len(err.strip().splitlines()) == 1, err
        assert not target.exists()
    code, _, err = run_cli(monkeypatch, capsys, "distill", "--static", "-o", output)
    assert code != 0 and "--overwrite" in err
