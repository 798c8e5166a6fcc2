"""A sentence-transformers folder read as sentence-transformers reads it: a module bertkit does not compute is refused
in one line (never skipped), and the model's `similarity_fn_name` is the metric every search takes by default."""

import json
import shutil

import numpy as np
import pytest
import torch
from conftest import run_cli
from tiny_models import tiny_bert

from bertkit import Encoder
from bertkit.encoder.models import default_model_dir
from bertkit.errors import ModelLoadError
from bertkit.tasks.search import semantic_search

TEXTS = ["I love Korea", "the movie was great", "EU rejects German call to boycott British lamb .", "a good film"]


def st_modules():
    try:
        from sentence_transformers.sentence_transformer import modules
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers import models as modules
    return modules


@pytest.fixture(scope="module")
def dot_model(tmp_path_factory):
    """A tiny sentence-transformers model (mean pooling, no Normalize) whose config says similarity_fn_name 'dot'."""
    from sentence_transformers import SentenceTransformer

    modules, root = st_modules(), tmp_path_factory.mktemp("dot")
    transformer = modules.Transformer(str(tiny_bert(root / "bert")))
    model = SentenceTransformer(modules=[transformer, modules.Pooling(32, "mean")], similarity_fn_name="dot")
    model.save(str(root / "st"))
    assert json.loads((root / "st" / "config_sentence_transformers.json").read_text())["similarity_fn_name"] == "dot"
    return root / "st", SentenceTransformer(str(root / "st"), device="cpu")


def test_a_module_bertkit_does_not_compute_is_refused_in_one_line(tmp_path):
    """LayerNorm after pooling changes every vector: bertkit used to skip it and embed otherwise than ST, silently."""
    from sentence_transformers import SentenceTransformer

    modules = st_modules()
    transformer = modules.Transformer(str(tiny_bert(tmp_path / "bert")))
    torch.manual_seed(0)
    layers = [transformer, modules.Pooling(32, "mean"), modules.LayerNorm(32)]
    SentenceTransformer(modules=layers, device="cpu").save(str(tmp_path / "st"))
    with pytest.raises(ModelLoadError) as refused:
        Encoder.from_pretrained(str(tmp_path / "st"))
    message = str(refused.value)
    assert "LayerNorm" in message and "SentenceTransformer.encode" in message and "\n" not in message


@pytest.mark.parametrize("kind", ["sentence_transformers.models.WeightedLayerPooling", "Router", "CNN"])
def test_any_unknown_module_is_refused_whatever_its_name_ends_with(tmp_path, kind):
    folder = shutil.copytree(default_model_dir(), tmp_path / "model")
    listed = json.loads((folder / "modules.json").read_text())
    listed.insert(2, {"idx": 2, "name": "2", "path": "2_Extra", "type": kind})
    (folder / "modules.json").write_text(json.dumps(listed))
    with pytest.raises(ModelLoadError, match=f"module {kind.rsplit('.', 1)[-1]!r} \\(2_Extra\\)"):
        Encoder.from_pretrained(str(folder))


def test_an_unknown_similarity_is_refused(tmp_path):
    folder = shutil.copytree(default_model_dir(), tmp_path / "model")
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"similarity_fn_name": "maxsim"}))
    with pytest.raises(ModelLoadError, match="similarity_fn_name='maxsim'"):
        Encoder.from_pretrained(str(folder))


def test_a_dot_model_is_searched_by_dot_product_as_sentence_transformers_does(dot_model):
    folder, reference = dot_model
    encoder = Encoder.from_pretrained(str(folder))
    assert encoder.sentence_config.similarity == "dot" and reference.similarity_fn_name == "dot"
    corpus, queries = encoder.embed(TEXTS), encoder.embed(["I love the movie", "German lamb"])
    np.testing.assert_allclose(corpus, reference.encode(TEXTS), atol=1e-5)
    theirs = reference.similarity(queries, corpus).numpy()  # the model's own similarity: dot products
    np.testing.assert_allclose(theirs, queries @ corpus.T, rtol=1e-5)
    found = semantic_search(queries, corpus, top_k=4, encoder=encoder)
    for hits, row in zip(found, theirs):
        assert [h["corpus_id"] for h in hits] == np.argsort(-row).tolist()
        np.testing.assert_allclose([h["score"] for h in hits], np.sort(row)[::-1], rtol=1e-5)
    cosine = semantic_search(queries, corpus, top_k=4)  # no model given: cosine, as sentence-transformers' util
    assert [h["score"] for h in cosine[0]] != pytest.approx([h["score"] for h in found[0]])


def test_bertkit_search_and_index_take_the_models_dot_product(dot_model, monkeypatch, capsys, tmp_path):
    pytest.importorskip("faiss")
    from bertkit.tasks.index import load_index
    from bertkit.tasks.index_build import build_index

    folder, _ = dot_model
    encoder = Encoder.from_pretrained(str(folder))
    source, vectors = tmp_path / "texts.txt", tmp_path / "v.npz"
    source.write_text("\n".join(TEXTS) + "\n")
    assert run_cli(monkeypatch, capsys, "embed", source, "-o", vectors, "--model", folder)[0] == 0
    code, out, err = run_cli(monkeypatch, capsys, "search", vectors, "I love the movie", "-k", "4")
    assert code == 0 and "exact search (dot)" in err, err
    expected = encoder.embed(TEXTS) @ encoder.embed(["I love the movie"])[0]
    scores = [float(line.split("\t")[3]) for line in out.splitlines()[1:]]
    np.testing.assert_allclose(scores, np.sort(expected)[::-1], atol=1e-4)
    build_index(vectors, tmp_path / "v.index")
    assert load_index(tmp_path / "v.index").metric == "dot" and load_index(vectors).metric == "dot"


def test_tei_similarity_takes_the_models_dot_product(dot_model):
    """The service's /similarity scores as the model's own `similarity` does (dot here, not cosine)."""
    from fastapi.testclient import TestClient

    from bertkit.serve import create_app

    folder, reference = dot_model
    encoder = Encoder.from_pretrained(str(folder))
    with TestClient(create_app(encoder)) as client:
        answer = client.post("/similarity", json={"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}})
    assert answer.status_code == 200, answer.text
    theirs = reference.similarity(reference.encode(TEXTS[:1]), reference.encode(TEXTS[1:])).numpy()[0]
    np.testing.assert_allclose(answer.json(), theirs, rtol=1e-4)
