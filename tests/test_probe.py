"""Layer probe: the layer set, one forward pass per batch, the learned mix, outputs, and task/file mismatches."""

import json

import numpy as np
import pytest
import torch
from test_cli import run
from test_finetune import conll_file, sentiment_file

from bertkit.errors import InputError
from bertkit.tasks.layer_choices import layer_choices, select
from bertkit.tasks.probe import probe_text, probe_token
from bertkit.tasks.scalar_mix import ScalarMixClassifier


def test_layer_choices_cover_every_state_and_the_papers_combinations():
    names = [c.name for c in layer_choices(6)]
    assert names == [
        "h0 (embeddings)",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5 (second-to-last)",
        "h6 (last)",
        "sum of last 4",
        "concat of last 4",
        "mean of all 7",
        "learned mix of all 7",
    ]
    blocks = np.arange(2 * 7 * 3, dtype=np.float32).reshape(2, 7, 3)
    choices = {c.name: c for c in layer_choices(6)}
    assert np.array_equal(select(blocks, choices["h0 (embeddings)"]), blocks[:, 0])
    assert np.array_equal(
        select(blocks, choices["sum of last 4"]), blocks[:, 3] + blocks[:, 4] + blocks[:, 5] + blocks[:, 6]
    )
    assert np.array_equal(
        select(blocks, choices["concat of last 4"]), np.concatenate([blocks[:, i] for i in (3, 4, 5, 6)], 1)
    )
    assert np.allclose(select(blocks, choices["mean of all 7"]), blocks.mean(1))


def test_probe_slices_equal_direct_embeddings():
    """The probe's per-layer vectors are exactly what Encoder.embed gives for that layer spec (default model)."""
    from bertkit.tasks.vectorizer import BertVectorizer

    texts = ["I love Korea", "the movie was great , good film", "EU rejects German call"]
    vectorizer = BertVectorizer(layers="all:concat", pooling="cls+mean+max", cache=None).fit([])
    encoder = vectorizer.encoder_
    # what the probe computes once and slices: each pooling of every hidden state, side by side
    width = encoder.hidden_size
    stacked = vectorizer.transform(texts).reshape(len(texts), 3, encoder.num_layers + 1, width)
    blocks = {pooling: stacked[:, k] for k, pooling in enumerate(("cls", "mean", "max"))}
    choices = {c.name: c for c in layer_choices(encoder.num_layers)}
    for pooling in ("cls", "mean", "max"):
        assert np.allclose(
            select(blocks[pooling], choices["h1"]), encoder.embed(texts, layers=1, pooling=pooling), atol=1e-6
        )
    for pooling in ("cls", "mean"):  # linear poolings commute with combining layers
        assert np.allclose(
            select(blocks[pooling], choices["sum of last 4"]),
            encoder.embed(texts, layers="last4:sum", pooling=pooling),
            atol=1e-5,
        )
        assert np.allclose(
            select(blocks[pooling], choices["h5 (second-to-last)"]),
            encoder.embed(texts, layers="second_to_last", pooling=pooling),
            atol=1e-6,
        )
    with torch.no_grad():  # BERT's pooler over the last layer's [CLS] vectors: what pooling="pooler" gives
        pooled = encoder.model.pooler(torch.from_numpy(blocks["cls"][:, -1].copy())[:, None, :]).numpy()
    assert np.allclose(pooled, encoder.embed(texts, pooling="pooler"), atol=1e-6)


@pytest.fixture
def forwards(monkeypatch):
    """Rows of each model pass, counted by torch's public forward hook (on the torch engine: OpenVINO runs none)."""
    from transformers import PreTrainedModel

    from bertkit.tasks import vectorizer

    monkeypatch.setenv("BERTKIT_ENGINE", "torch")
    vectorizer._load_shared.cache_clear()  # an encoder shared from an earlier test may run on OpenVINO
    calls: list[int] = []

    def count(module, args, output):
        if isinstance(module, PreTrainedModel):
            calls.append(len(output.last_hidden_state))

    handle = torch.nn.modules.module.register_module_forward_hook(count)
    yield calls
    handle.remove()
    vectorizer._load_shared.cache_clear()


@pytest.mark.slow
def test_text_probe_runs_one_forward_per_batch_and_is_reproducible(tiny_dirs, tmp_path, forwards):
    train = sentiment_file(tmp_path / "train.tsv", n=80)
    dev = sentiment_file(tmp_path / "dev.tsv", n=40, seed=1)
    calls = forwards
    options = dict(model=str(tiny_dirs["bert_cased"]), cache=None, cv=3)
    result = probe_text(train, dev, **options)
    # the vectorizer checks its options without running the model; 80 + 40 texts in passes of at most 32: each once
    assert sum(calls) == 120 and max(calls) <= 32
    rows = {(r.pooling, r.choice): r for r in result.rows}
    assert len(result.rows) == 3 * 7 + 1  # cls / mean / max × 7 layer choices (2-layer model), plus the pooler
    assert rows[("mean", "concat of last 3")].dim == 3 * 32 and rows[("pooler", "pooler(h2 [CLS])")].dim == 32
    mix = rows[("mean", "learned mix of all 3")]
    assert len(mix.layer_weights) == 3 and min(mix.layer_weights) >= 0
    assert max(mix.layer_weights) - min(mix.layer_weights) > 0.01  # trained: moved away from the uniform start
    assert mix.score >= 0.9 and rows[("mean", "mean of all 3")].score >= 0.9  # fixed sentiment words: an easy task
    again = probe_text(train, dev, **options)
    assert [(r.choice, r.score, r.C) for r in again.rows] == [(r.choice, r.score, r.C) for r in result.rows]


def test_token_probe_one_pass_and_entity_scores(tiny_dirs, tmp_path, monkeypatch, caplog, forwards):
    import logging

    from bertkit.encoder import progress

    train = conll_file(tmp_path / "train.txt", n=60)
    dev = conll_file(tmp_path / "dev.txt", n=30, seed=1)
    calls = forwards
    monkeypatch.setattr(progress, "terminal", lambda: False)
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    with caplog.at_level(logging.INFO, logger="bertkit"):
        result = probe_token(train, dev, model=str(tiny_dirs["bert_cased"]), cache=None, limit=50, progress=True)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embed: ")]
    assert any("50/50 " in line for line in said) and any("30/30 " in line for line in said)  # the one reporter
    assert sum(calls) == 80  # 50 training sentences (--limit) + 30 dev sentences, each embedded once
    assert [r.choice for r in result.rows][-1] == "learned mix of all 3" and result.metric == "entity_f1"
    assert all(0 <= r.score <= 1 and 0 <= r.secondary <= 1 for r in result.rows)
    assert max(r.score for r in result.rows) > 0.5  # entity words are fixed vocabulary: easy for a linear tagger
    assert result.facts["train_rows"] == 50


def test_learned_mix_finds_the_informative_layer():
    rng = np.random.default_rng(0)
    n, layers, dim = 600, 4, 8
    codes = rng.integers(0, 2, n)
    blocks = rng.normal(size=(n, layers, dim)).astype(np.float32)
    blocks[:, 2, 0] += 3.0 * (2 * codes - 1)  # only layer 2 carries the label
    train, test = slice(0, 400), slice(400, n)
    mix = ScalarMixClassifier(C=1.0).fit(blocks[train], codes[train])
    # the model is softmax(w) · layers → linear: recompute its weights and decisions by hand in numpy
    raw = mix.mix_logits_.detach().numpy().astype(np.float64)
    by_hand = np.exp(raw - raw.max()) / np.exp(raw - raw.max()).sum()
    np.testing.assert_allclose(mix.layer_weights_, by_hand, rtol=1e-5, atol=1e-7)
    mixed = np.einsum("l,nld->nd", by_hand, blocks[test].astype(np.float64))
    scores = mixed @ mix.weight_.detach().numpy() + mix.bias_.detach().numpy()
    assert mix.predict(blocks[test]).tolist() == scores.argmax(1).tolist()
    assert mix.layer_weights_.argmax() == 2 and mix.layer_weights_[2] > 0.5
    from sklearn.linear_model import LogisticRegression

    singles = [
        np.mean(LogisticRegression().fit(blocks[train, k], codes[train]).predict(blocks[test, k]) == codes[test])
        for k in range(layers)
    ]
    assert np.mean(mix.predict(blocks[test]) == codes[test]) >= min(singles)
    assert np.mean(mix.predict(blocks[test]) == codes[test]) >= max(singles) - 0.02


@pytest.mark.slow
def test_cli_probe_writes_table_and_files(tiny_dirs, tmp_path, monkeypatch, capsys):
    train = sentiment_file(tmp_path / "train.tsv", n=60)
    dev = sentiment_file(tmp_path / "dev.tsv", n=30, seed=1)
    code, out, err = run(
        monkeypatch,
        capsys,
        "probe",
        train,
        "--dev",
        dev,
        "--task",
        "text",
        "--poolings",
        "mean,cls",
        "-o",
        tmp_path / "probe",
        "--model",
        tiny_dirs["bert_cased"],
        "--cache-dir",
        tmp_path / "cache",
    )
    assert code == 0, err
    assert out.splitlines()[0].split()[:4] == ["pooling", "layers", "dim", "accuracy"]
    files = sorted(p.name for p in (tmp_path / "probe").iterdir())
    assert files == ["probe.csv", "probe.json", "probe.md", "probe.png"]
    record = json.loads((tmp_path / "probe" / "probe.json").read_text())
    assert len(record["rows"]) == 2 * 7 and record["facts"]["train_rows"] == 60
    assert (tmp_path / "probe" / "probe.png").read_bytes()[:4] == b"\x89PNG"
    assert "| mean | h0 (embeddings) |" in (tmp_path / "probe" / "probe.md").read_text()

    code, _, err = run(
        monkeypatch,
        capsys,
        "probe",
        train,
        "--dev",
        dev,
        "--task",
        "text",
        "--poolings",
        "mean",
        "-o",
        tmp_path / "probe",
        "--overwrite",  # the first probe's output is there: replaced when asked
        "--model",
        tiny_dirs["bert_cased"],
        "--cache-dir",
        tmp_path / "cache",
    )
    assert code == 0 and "0 embedded" in err, err  # the second probe reuses the cached hidden states
    assert len(json.loads((tmp_path / "probe" / "probe.json").read_text())["rows"]) == 7


@pytest.mark.parametrize(
    "task, make, message",
    [
        ("token", lambda p: sentiment_file(p / "x.tsv"), "looks like sentence/label data"),
        ("text", lambda p: conll_file(p / "x.txt"), "use --task token"),
    ],
)
def test_task_file_mismatch_is_explained(tiny_dirs, tmp_path, monkeypatch, capsys, task, make, message):
    path = make(tmp_path)
    code, _, err = run(
        monkeypatch,
        capsys,
        "probe",
        path,
        "--dev",
        path,
        "--task",
        task,
        "-o",
        tmp_path / "out",
        "--model",
        tiny_dirs["bert_cased"],
    )
    assert code == 2 and message in err and not (tmp_path / "out").exists()


def test_unknown_pooling_is_refused(tiny_dirs, tmp_path):
    train = sentiment_file(tmp_path / "train.tsv", n=20)
    with pytest.raises(InputError, match="choose from cls, mean, max, pooler"):
        probe_text(train, train, model=str(tiny_dirs["bert_cased"]), poolings=["avg"])
