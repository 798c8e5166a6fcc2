"""A sentence-transformers folder read as sentence-transformers reads it: a module bertkit does not compute is refused
in one line (never skipped), and the model's `similarity_fn_name` is the metric every search takes by default."""

import json
import shutil

import pytest
import torch
from tiny_models import tiny_bert

from bertkit import Encoder
from bertkit.encoder.models import default_model_dir
from bertkit.errors import ModelLoadError

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


def test_the_models_similarity_is_read(dot_model):
    assert Encoder.from_pretrained(str(dot_model[0])).sentence_config.similarity == dot_model[1].similarity_fn_name
