"""One rule per thing: single strings, the held-out split, label checks, saved runs across versions, precision
records, long texts in fine-tuned classifiers, fitted attributes, and a library that leaves global state alone."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tiny_models
import torch
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from transformers import AutoModelForSequenceClassification

from bertkit import BertVectorizer, FineTunedClassifier, InputError, TextClassifier, finetune, load_run
from bertkit.encoder.precision import fast_bf16_cpu
from bertkit.io.readers import read_labelled, sample_path
from bertkit.tasks.finetune import FinetuneArguments
from bertkit.tasks.labels import check_known_labels, split_holdout
from bertkit.tasks.scalar_mix import ScalarMixClassifier


@pytest.fixture(scope="module")
def sample():
    data = read_labelled(sample_path("reviews.tsv"), "text", "label")
    return data.texts, data.labels


@pytest.fixture(scope="module")
def feature_run(sample, tmp_path_factory):
    texts, labels = sample
    classifier = TextClassifier(BertVectorizer(layers="last"), LogisticRegression(C=1.0, max_iter=3000)).fit(
        texts, labels
    )
    return classifier, classifier.save_pretrained(tmp_path_factory.mktemp("runs") / "features")


@pytest.fixture(scope="module")
def finetuned_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ft")
    model_dir = tiny_models.tiny_bert(root / "enc", cased=True)
    rows = [("a good film", "pos"), ("a bad film", "neg"), ("great fun", "pos"), ("awful and dull", "neg")] * 8
    (root / "train.tsv").write_text("".join(f"{t}\t{y}\n" for t, y in rows))
    model = finetune(
        root / "train.tsv",
        root / "train.tsv",
        output_dir=root / "run",
        model=str(model_dir),
        args=FinetuneArguments(num_train_epochs=1, batch_size=8, max_length=16),
    )
    return model, root / "run"


def test_one_string_is_one_text_everywhere(feature_run, finetuned_run):
    classifier, _ = feature_run
    model, _ = finetuned_run
    for estimator in (classifier, model):
        np.testing.assert_array_equal(estimator.predict_proba("a fine film"), estimator.predict_proba(["a fine film"]))
        assert estimator.predict("a fine film").tolist() == estimator.predict(["a fine film"]).tolist()
        assert estimator.predict_proba("a fine film").shape == (1, 2)
    np.testing.assert_array_equal(
        classifier.vectorizer_.transform("a fine film"), classifier.vectorizer_.transform(["a fine film"])
    )
    with pytest.raises(InputError, match="not one string"):
        TextClassifier().fit("a text", ["a"])


def test_text_classifier_holds_a_vectorizer_and_takes_its_precision(sample):
    vectorizer = BertVectorizer(layers="last", pooling="cls")
    classifier = TextClassifier(vectorizer, LogisticRegression(C=1.0, max_iter=3000))
    assert classifier.get_params()["vectorizer__pooling"] == "cls"  # reachable by GridSearchCV
    assert clone(classifier).vectorizer.get_params() == vectorizer.get_params()
    classifier.fit(*sample)
    assert classifier.vectorizer_ is not vectorizer and not hasattr(vectorizer, "encoder_")  # fit clones it
    assert classifier.vectorizer_.n_features_out_ == 384
    if fast_bf16_cpu():
        bf16 = TextClassifier(
            BertVectorizer(layers="last", pooling="cls", precision="bf16"), LogisticRegression(C=1.0, max_iter=3000)
        ).fit(*sample)
        assert bf16.vectorizer_.encoder_.precision == "bf16"


def test_runs_record_precision_and_warn_when_used_at_another(feature_run, finetuned_run, caplog):
    _, saved = feature_run
    assert json.loads((saved / "bertkit.json").read_text())["features"]["precision"] == "fp32"
    _, run = finetuned_run
    assert json.loads((run / "bertkit.json").read_text())["precision"] == "fp32"
    if not fast_bf16_cpu():
        pytest.skip("this CPU has no native bf16 (AMX / AVX512-BF16), the only other precision to load at")
    texts = ["a good film", "a dull film"]
    for directory in (saved, run):
        caplog.clear()
        loaded = load_run(directory, precision="bf16")
        assert "used at bf16" in caplog.text
        # really at bf16, and still the same model: probabilities within bf16's rounding of the fp32 ones
        assert (loaded.vectorizer_.encoder_ if directory == saved else loaded).precision == "bf16"
        np.testing.assert_allclose(loaded.predict_proba(texts), load_run(directory).predict_proba(texts), atol=0.05)
    caplog.clear()
    load_run(saved)  # its own precision: no warning
    assert caplog.records == []


def test_runs_refuse_a_bad_batch_size_or_precision_in_one_line_before_warning(feature_run, finetuned_run, caplog):
    model, run = finetuned_run
    for bad in (0, -1, True, 1.5, "8"):  # the one runner's check, as Encoder.embed has it
        with pytest.raises(InputError, match=f"batch_size={bad!r}: give a positive batch size"):
            model.predict(["a good film"], batch_size=bad)
    for directory in (feature_run[1], run):
        caplog.clear()
        with pytest.raises(InputError, match="precision='fp16' runs on a GPU"):
            load_run(directory, precision="fp16")
        assert caplog.records == [], directory  # no "used at fp16" warning for a precision that is refused


def test_finetuned_classifier_follows_long_text(finetuned_run, caplog):
    _, run = finetuned_run
    long_text = "a good film " * 40  # 120 words, far over max_length=16
    with pytest.raises(InputError, match=r"texts\[1\] has \d+ tokens, more than this model's maximum of 16"):
        FineTunedClassifier.from_pretrained(run, long_text="error").predict_proba(["short", long_text])
    truncated = FineTunedClassifier.from_pretrained(run).predict_proba(["short", long_text])
    assert "1 of 2 texts were longer than 16 tokens and were truncated" in caplog.text
    windowed_model = FineTunedClassifier.from_pretrained(run, long_text="window")
    windowed = windowed_model.predict_proba(["short", long_text])
    np.testing.assert_allclose(windowed[0], truncated[0], atol=1e-6)  # short texts are untouched
    # the windowed probability is the mean over windows, each scored as its own text
    tokenizer = windowed_model.tokenizer
    tokens = tokenizer(long_text)["input_ids"]
    # the fast tokenizer's overflow windows, a quarter (14 // 4 = 3 tokens) shared between neighbours
    windows = tokenizer(long_text, truncation=True, max_length=16, stride=3, return_overflowing_tokens=True)[
        "input_ids"
    ]
    assert len(windows) > 1 and all(len(w) <= 16 for w in windows)
    assert [t for w in windows[:1] for t in w[1:-1]] + [t for w in windows[1:] for t in w[4:-1]] == tokens[1:-1]
    plain = AutoModelForSequenceClassification.from_pretrained(run).eval()  # each window scored by plain transformers
    with torch.no_grad():
        each = [torch.softmax(plain(input_ids=torch.tensor([w])).logits[0], -1).numpy() for w in windows]
    np.testing.assert_allclose(windowed[1], np.mean(each, axis=0), atol=1e-5)


def test_a_long_text_policy_a_run_cannot_follow_is_refused(finetuned_run, tmp_path):
    from transformers import AutoModelForQuestionAnswering, AutoModelForTokenClassification, AutoTokenizer

    from bertkit import FineTunedQA, FineTunedTagger

    assert finetuned_run[0].long_text == "truncate"  # a classifier's default
    encoder_dir = tiny_models.tiny_bert(tmp_path / "enc")
    tokenizer = AutoTokenizer.from_pretrained(encoder_dir)
    pairs_model = FineTunedClassifier(
        AutoModelForSequenceClassification.from_pretrained(encoder_dir), tokenizer, 16, long_text="window"
    )
    with pytest.raises(InputError, match="long_text='window' reads one long text in windows; pairs are cut"):
        pairs_model.predict([("a query", "a long document " * 20)])  # it truncated them, saying so in a log line
    heads = {FineTunedTagger: AutoModelForTokenClassification, FineTunedQA: AutoModelForQuestionAnswering}
    for head, auto in heads.items():
        network = auto.from_pretrained(encoder_dir)
        assert head(network, tokenizer, 16).long_text == "window"  # every token read, as it always was
        for policy in ("truncate", "error"):  # accepted and ignored before
            with pytest.raises(InputError, match=f"long_text='{policy}': {head.__name__} takes 'window'"):
                head(network, tokenizer, 16, long_text=policy)


def test_one_held_out_split_for_every_trainer():
    texts = [f"t{i}" for i in range(20)]
    labels = ["a"] * 10 + ["b"] * 10
    train, dev, train_labels, dev_labels = split_holdout(texts, labels, 0.25, seed=0)
    assert sorted(train + dev) == sorted(texts) and len(dev) == 5
    assert abs(dev_labels.count("a") - dev_labels.count("b")) <= 1  # stratified
    assert split_holdout(texts, labels, 0.25, seed=0) == (train, dev, train_labels, dev_labels)  # seeded
    with pytest.raises(InputError, match=r"class \['c'\] has a single example"):
        split_holdout(texts + ["x"], labels + ["c"], 0.25, seed=0)
    with pytest.raises(InputError, match="one class only"):
        split_holdout(texts, ["a"] * 20, 0.25, seed=0)
    tags = [["O", "B-PER"]] * 20
    assert len(split_holdout(texts, tags, 0.1, seed=0, stratify=False)[1]) == 2


def test_unknown_dev_labels_are_named_with_both_files():
    with pytest.raises(
        InputError, match=r"dev\.tsv: labels \['maybe'\] never occur in train\.tsv \(known: \['no', 'yes'\]\)"
    ):
        check_known_labels("dev.tsv", ["yes", "maybe"], ["yes", "no", "yes"], "train.tsv")
    check_known_labels("dev.tsv", ["yes"], ["yes", "no"], "train.tsv")


def test_finetune_task_that_contradicts_its_arguments_raises(tmp_path):
    with pytest.raises(InputError, match="task='token' but args.task='text'"):
        finetune(tmp_path / "x.tsv", output_dir=tmp_path / "out", task="token", args=FinetuneArguments(task="text"))
    assert not (tmp_path / "out").exists()


def test_fitted_attributes_end_with_an_underscore():
    rng = np.random.default_rng(0)
    blocks = rng.normal(size=(60, 3, 4)).astype(np.float32)
    labels = (blocks[:, 1, 0] > 0).astype(int)
    mix = ScalarMixClassifier().fit(blocks, labels)
    learned = [name for name in vars(mix) if name not in mix.get_params()]
    assert learned and all(name.endswith("_") for name in learned), learned


def test_the_library_leaves_matplotlib_and_transformers_logging_alone(sample, tmp_path):
    import matplotlib
    import transformers

    from bertkit.tasks.report import classification_metrics, write_report

    backend = matplotlib.get_backend()
    transformers.utils.logging.set_verbosity_info()
    transformers.utils.logging.enable_progress_bar()
    try:
        texts, labels = sample
        metrics = classification_metrics(labels[:20], labels[:20], sorted(set(labels)))
        write_report(tmp_path, metrics, np.random.default_rng(0).normal(size=(20, 5)), labels[:20])
        BertVectorizer(model=str(tiny_models.tiny_bert(tmp_path / "enc"))).fit([])
        assert matplotlib.get_backend() == backend
        assert transformers.utils.logging.get_verbosity() == transformers.logging.INFO
        assert transformers.utils.logging.is_progress_bar_enabled()
    finally:
        transformers.utils.logging.set_verbosity_warning()


def test_the_majority_class_of_a_tie_does_not_depend_on_the_hash_seed():
    """On a tie the report names the class seen first, in every process (not whichever `set` order hashing gives)."""
    import os
    import subprocess
    import sys

    script = (
        "from bertkit.tasks.report import classification_metrics as m; "
        "print(m(['neg', 'pos', 'pos', 'neg'], ['pos'] * 4, ['neg', 'pos'])['majority_class'])"
    )
    named = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in range(4)
    }
    assert named == {"neg"}
