"""Sentence pairs, scores and label sets: fine-tuned, saved as plain transformers models that sentence-transformers'
CrossEncoder scores the same, ranked as CrossEncoder ranks, predicted and reranked from the command line."""

import json
import random

import numpy as np
import pytest
import tiny_models
import torch
from conftest import run_cli
from test_finetune import FILLER, tiny_args

from bertkit.errors import InputError
from bertkit.tasks.finetune import finetune
from bertkit.tasks.load import load_run
from bertkit.tasks.report import THRESHOLDS

COLOURS = ["red", "blue", "green"]


def pair_file(path, n=96, seed=0, scores=False):
    """Pairs of texts each naming a colour. Classes: 'same' when both name red, else 'different'. Scores: half a
    point for each text that names red, with a little noise, so that they read as numbers with decimals."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        a, b = (rng.choice(COLOURS) for _ in range(2))
        if i % 2:
            a = b = "red"
        first = " ".join(rng.sample(FILLER, 3) + [a])
        second = " ".join([b] + rng.sample(FILLER, 3))
        if scores:
            label = f"{0.5 * (a == 'red') + 0.5 * (b == 'red') + rng.uniform(-0.05, 0.05):.3f}"
        else:
            label = "same" if a == b == "red" else "different"
        lines.append(f"{first}\t{second}\t{label}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def tagged_file(path, n=96, seed=0):
    """Texts with several labels: each colour named in the text is one of its labels (',' separated; none: empty)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        colours = sorted(rng.sample(COLOURS, rng.randint(0, 2)))
        words = rng.sample(FILLER, 3) + colours
        rng.shuffle(words)
        lines.append(f"{' '.join(words)}\t{','.join(colours)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def coloured(tmp_path_factory):
    """A tiny BERT whose vocabulary has the colours as words of their own (the shared tiny models read them [UNK])."""
    return str(tiny_models.tiny_bert(tmp_path_factory.mktemp("coloured") / "bert", extra_words=tuple(COLOURS)))


@pytest.fixture(scope="module")
def pair_run(coloured, tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    train, dev = pair_file(root / "train.tsv"), pair_file(root / "dev.tsv", n=32, seed=1)
    model = finetune(
        train,
        dev,
        task="pair",
        output_dir=root / "run",
        model=coloured,
        args=tiny_args(num_train_epochs=8, early_stopping_patience=8, max_length=24),
    )
    return model, root


@pytest.fixture(scope="module")
def score_run(coloured, tmp_path_factory):
    root = tmp_path_factory.mktemp("scores")
    train, dev = pair_file(root / "train.tsv", scores=True), pair_file(root / "dev.tsv", n=32, seed=1, scores=True)
    model = finetune(
        train,
        dev,
        task="pair",
        output_dir=root / "run",
        model=coloured,
        args=tiny_args(num_train_epochs=8, early_stopping_patience=8, max_length=24),
    )
    return model, root


def test_a_pair_classifier_learns_and_plain_transformers_loads_it(pair_run):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model, root = pair_run
    record = json.loads((root / "run" / "bertkit.json").read_text())
    assert record["task"] == "pair" and record["problem"] == "single_label_classification"
    assert record["labels"] == ["different", "same"] and record["metrics"]["accuracy"] >= 0.8, record["training"]
    unseen = [line.split("\t") for line in pair_file(root / "unseen.tsv", n=12, seed=2).read_text().splitlines()]
    pairs = [(a, b) for a, b, _ in unseen]
    plain = AutoModelForSequenceClassification.from_pretrained(root / "run").eval()
    tokenizer = AutoTokenizer.from_pretrained(root / "run")
    with torch.no_grad():
        logits = plain(**tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True, return_tensors="pt"))
    np.testing.assert_allclose(model.predict_proba(pairs), logits.logits.softmax(-1).numpy(), atol=1e-5)
    assert model.predict(pairs).tolist() == [label for _, _, label in unseen]  # pairs it never saw, of the same task
    loaded = load_run(root / "run")
    assert loaded.takes_pairs and loaded.predict(pairs[:2]).tolist() == [label for _, _, label in unseen[:2]]


def test_crossencoder_loads_the_run_and_scores_the_same(pair_run, score_run):
    from sentence_transformers import CrossEncoder

    pairs = [("the movie red", "red is big"), ("a film blue", "green the film"), ("green", "green")]
    for tuned, root in (pair_run, score_run):
        cross = CrossEncoder(str(root / "run"), device="cpu")
        if tuned.problem == "regression":
            np.testing.assert_allclose(cross.predict(pairs), tuned.predict(pairs), atol=1e-5)
            documents = ["red is big", "green the film", "blue", "red red"]
            ranked = cross.rank("the movie red", documents)
            assert [(r["corpus_id"], round(float(r["score"]), 4)) for r in ranked] == [
                (i, round(s, 4)) for i, s in tuned.rank("the movie red", documents)
            ]
        else:
            np.testing.assert_allclose(cross.predict(pairs, apply_softmax=True), tuned.predict_proba(pairs), atol=1e-5)


def test_a_score_run_is_a_regressor_and_says_so(score_run, caplog):
    tuned, root = score_run
    record = json.loads((root / "run" / "bertkit.json").read_text())
    assert record["problem"] == "regression" and record["labels"] == ["score"]
    assert record["metrics"]["spearman"] >= 0.6, record["training"]
    assert set(record["metrics"]) >= {"pearson", "spearman", "mse", "mae"}
    scores = tuned.predict([("red", "red one"), ("blue", "blue one")])
    assert scores.dtype == np.float32 and scores[0] > scores[1]
    with pytest.raises(InputError, match="regressor"):
        tuned.predict_proba([("red", "red")])


def test_rank_sorts_by_score_and_keeps_the_top_k(score_run):
    tuned, _ = score_run
    documents = ["blue thing", "red thing", "green", "a red red film"]
    ranked = tuned.rank("my red film", documents)
    scores = tuned.predict([("my red film", d) for d in documents])
    assert [i for i, _ in ranked] == sorted(range(4), key=lambda i: -scores[i])
    assert [s for _, s in ranked] == pytest.approx(sorted(scores.tolist(), reverse=True), abs=1e-6)
    assert tuned.rank("my red film", documents, top_k=2) == ranked[:2]


def test_inputs_must_match_what_the_model_was_tuned_on(pair_run, tiny_dirs, tmp_path):
    tuned = load_run(pair_run[1] / "run")
    with pytest.raises(InputError, match="fine-tuned on text pairs"):
        tuned.predict(["just one text"])
    with pytest.raises(InputError, match="not a mix"):
        tuned.predict([("a", "b"), "c"])
    from test_finetune import sentiment_file

    text = finetune(
        sentiment_file(tmp_path / "t.tsv", n=24),
        output_dir=tmp_path / "t",
        model=str(tiny_dirs["bert_cased"]),
        args=tiny_args(num_train_epochs=1),
        dev_share=0.25,
    )
    with pytest.raises(InputError, match="fine-tuned on single texts"):
        load_run(tmp_path / "t").predict([("a", "b")])
    with pytest.raises(InputError, match="ranking needs a pair model"):
        load_run(tmp_path / "t").rank("query", ["a", "b"])
    assert text.takes_pairs is False


def test_multi_label_learns_label_sets_with_a_threshold_from_dev(coloured, tmp_path):
    train, dev = tagged_file(tmp_path / "train.tsv"), tagged_file(tmp_path / "dev.tsv", n=32, seed=1)
    tuned = finetune(
        train,
        dev,
        output_dir=tmp_path / "run",
        model=coloured,
        args=tiny_args(num_train_epochs=25, early_stopping_patience=25, multi_label=True),
    )
    record = json.loads((tmp_path / "run" / "bertkit.json").read_text())
    assert record["problem"] == "multi_label_classification"
    assert sorted(record["labels"]) == sorted(COLOURS)
    metrics = record["metrics"]
    assert 0.05 <= metrics["threshold"] <= 0.95 and metrics["micro_f1"] >= 0.8, record["training"]
    assert set(metrics["per_label"]) == set(COLOURS)
    loaded = load_run(tmp_path / "run")
    assert loaded.threshold == metrics["threshold"]
    found = loaded.predict(["the red movie a blue", "the movie is big"])
    assert found[0] == ["blue", "red"] and found[1] == []
    loaded.threshold = 0.0  # 0.0 is a threshold like any other (every probability is >= 0), not "unset"
    assert sorted(loaded.predict(["the movie is big"])[0]) == sorted(COLOURS)
    probabilities = loaded.predict_proba(["the green film"])
    assert probabilities.shape == (1, 3) and probabilities.min() >= 0 and probabilities.max() <= 1
    assert tuned.classes_.tolist() == loaded.classes_.tolist()


def test_a_multi_label_run_that_learned_nothing_says_so(coloured, tmp_path, caplog):
    """The baseline is a model that gives every text the same labels (each label's training share, at the threshold
    best on dev, as the run is scored); a run no better is saved with the warning the other tasks give (before: the
    baseline was 'no label' at micro-F1 0, which any constant answer beat)."""
    from sklearn.metrics import f1_score
    from sklearn.preprocessing import MultiLabelBinarizer

    train, dev = tagged_file(tmp_path / "train.tsv"), tagged_file(tmp_path / "dev.tsv", n=32, seed=1)
    args = tiny_args(num_train_epochs=1, learning_rate=1e-9, multi_label=True)
    with caplog.at_level("WARNING"):
        finetune(train, dev, output_dir=tmp_path / "run", model=coloured, args=args)
    record = json.loads((tmp_path / "run" / "bertkit.json").read_text())
    rows = [line.split("\t")[1] for line in train.read_text().splitlines()]
    binarize = MultiLabelBinarizer(classes=sorted(COLOURS))
    shares = binarize.fit_transform([r.split(",") if r else [] for r in rows]).mean(axis=0)
    gold = binarize.transform(
        [(line.split("\t")[1].split(",") if line.split("\t")[1] else []) for line in dev.read_text().splitlines()]
    )
    best = max(
        f1_score(gold, np.tile(shares, (len(gold), 1)) >= t, average="micro", zero_division=0) for t in THRESHOLDS
    )
    assert record["baseline"]["score"] == pytest.approx(best) and best > 0
    assert record["baseline"]["learned"] is False
    assert any("learned nothing useful" in r.getMessage() for r in caplog.records), caplog.text


def test_conflicting_heads_are_refused(tiny_dirs, tmp_path):
    with pytest.raises(InputError, match="exclude each other"):
        finetune(
            pair_file(tmp_path / "p.tsv"),
            output_dir=tmp_path / "r",
            task="pair",
            model=str(tiny_dirs["bert_cased"]),
            args=tiny_args(regression=True, multi_label=True),
        )
    with pytest.raises(InputError, match="line 3: the label 'x' is not a number"):
        path = tmp_path / "bad.tsv"
        path.write_text("a\tb\t0.5\nc\td\t0.7\ne\tf\tx\n" * 4)
        finetune(
            path,
            output_dir=tmp_path / "r2",
            task="pair",
            model=str(tiny_dirs["bert_cased"]),
            args=tiny_args(regression=True),
        )
    assert not (tmp_path / "r").exists() and not (tmp_path / "r2").exists()


def test_predict_and_rerank_from_the_command_line(pair_run, score_run, monkeypatch, capsys, tmp_path):
    _, root = pair_run
    code, out, err = run_cli(monkeypatch, capsys, "predict", root / "run", "the movie red", "--pair", "red is big")
    assert code == 0, err
    assert out.splitlines()[0] == "label\tprobability\ttext\tpair" and out.splitlines()[1].startswith("same\t")
    code, _, err = run_cli(monkeypatch, capsys, "predict", root / "run", "only one text")
    assert code == 2 and "give one text and its pair with --pair" in err
    code, out, err = run_cli(monkeypatch, capsys, "predict", root / "run", root / "dev.tsv")
    assert code == 0 and len(out.splitlines()) == 33 and "labelling 32 pairs" in err
    code, out, _ = run_cli(monkeypatch, capsys, "evaluate", root / "run", root / "dev.tsv")
    assert code == 0 and out.startswith("accuracy")

    tuned, score_root = score_run
    documents = tmp_path / "docs.txt"
    documents.write_text("blue thing\nred thing\ngreen\na red red film\n")
    code, out, err = run_cli(
        monkeypatch, capsys, "rerank", score_root / "run", documents, "--query", "my red film", "--top-k", "3"
    )
    assert code == 0 and "ranked 4 documents for 'my red film' (top 3)" in err, err  # -q is --query, not quiet
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows[0] == ["rank", "line", "score", "document"] and len(rows) == 4
    expected = tuned.rank("my red film", documents.read_text().splitlines(), top_k=3)
    assert [int(r[1]) - 1 for r in rows[1:]] == [i for i, _ in expected]  # file lines are 1-based
    code, out, _ = run_cli(monkeypatch, capsys, "evaluate", score_root / "run", score_root / "dev.tsv")
    assert code == 0 and out.startswith("spearman")
    code, _, err = run_cli(
        monkeypatch, capsys, "predict", score_root / "run", "x", "--pair", "y", "--aggregation", "first"
    )
    assert code == 2 and "--aggregation is for taggers" in err


@pytest.mark.parametrize("aggregation", ["none", "simple", "first", "average", "max"])
def test_ner_aggregation_is_the_token_classification_pipelines(tiny_dirs, tmp_path_factory, aggregation):
    from test_finetune import conll_file
    from transformers import pipeline

    root = tmp_path_factory.mktemp(f"ner-{aggregation}")
    tagger = finetune(
        conll_file(root / "train.txt", n=60),
        conll_file(root / "dev.txt", n=16, seed=1),
        task="token",
        output_dir=root / "ner",
        model=str(tiny_dirs["bert_cased"]),
        args=tiny_args(num_train_epochs=3),
    )
    texts = ["EU rejects German call to boycott British lamb.", "I love New York and Korea", "nothing"]
    reference = pipeline("token-classification", model=str(root / "ner"), aggregation_strategy=aggregation)(texts)
    found = tagger.predict(texts, aggregation=aggregation)
    for expected, entities in zip(reference, found):
        assert [(e.get("entity_group", e.get("entity")), e["start"], e["end"]) for e in expected] == [
            (e.type, e.char_start, e.char_end) for e in entities
        ]
        assert [round(float(e["score"]), 4) for e in expected] == pytest.approx([e.score for e in entities], abs=2e-4)
