"""TextClassifier: CV-chosen C, save → load predicts identically without pickle, clear refusals, known accuracy."""

import json
import shutil

import numpy as np
import pytest
import tiny_models
from conftest import shared_file
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from bertkit import BertVectorizer, InputError, ModelLoadError, TextClassifier
from bertkit.io.readers import read_labelled, sample_path


@pytest.fixture(scope="module")
def sample():
    data = read_labelled(sample_path("reviews.tsv"), "text", "label")
    return data.texts, data.labels


@pytest.mark.parametrize("kind", ["logreg", "linear-svm", "mlp"])
def test_save_load_predicts_identically(sample, tmp_path, kind):
    texts, labels = sample
    classifier = TextClassifier(BertVectorizer(layers="last"), classifier=kind, cv=3).fit(texts, labels)
    assert set(classifier.classes_) == {"negative", "positive"}
    assert classifier.score(texts, labels) > 0.9
    saved = classifier.save(tmp_path / "run", metrics={"note": "x"})
    assert sorted(p.name for p in saved.iterdir()) == ["bertkit.json", "classifier.safetensors"]
    loaded = TextClassifier.load(saved)
    probe = texts[:10] + ["an unseen sentence about a film"]
    np.testing.assert_array_equal(loaded.predict_proba(probe), classifier.predict_proba(probe))
    assert loaded.predict(probe).tolist() == classifier.predict(probe).tolist()
    record = json.loads((saved / "bertkit.json").read_text())
    assert record["kind"] == "features" and record["features"]["layers"] == "last"
    assert record["encoder"]["fingerprint"] == classifier.vectorizer_.encoder_.fingerprint
    assert record["classes"] == ["negative", "positive"] and record["versions"]["torch"]


def test_C_is_chosen_by_cross_validation(sample):
    texts, labels = sample
    classifier = TextClassifier(BertVectorizer(layers="last"), cv=4).fit(texts, labels)
    assert classifier.C_ in classifier.cv_scores_
    assert classifier.cv_scores_[classifier.C_] == max(classifier.cv_scores_.values())
    fixed = TextClassifier(BertVectorizer(layers="last"), C=0.5).fit(texts, labels)
    assert fixed.C_ == 0.5 and fixed.cv_scores_ == {}


def test_integer_and_multiclass_labels(sample, encoder):
    texts = sample[0][:30]
    labels = [i % 3 for i in range(30)]
    classifier = TextClassifier(BertVectorizer(layers="last"), C=1.0).fit(texts, labels)
    assert classifier.classes_.tolist() == [0, 1, 2]
    # the same thing by hand: Encoder.embed → StandardScaler → scikit-learn's multinomial LogisticRegression
    reference = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=3000))
    reference.fit(encoder.embed(texts, layers="last"), labels)
    probabilities = classifier.predict_proba(texts[:4])
    np.testing.assert_allclose(probabilities, reference.predict_proba(encoder.embed(texts[:4], layers="last")), atol=1e-4)
    assert classifier.predict(texts[:4]).tolist() == classifier.classes_[probabilities.argmax(1)].tolist()


def test_bad_training_data(sample):
    texts = sample[0][:6]
    with pytest.raises(InputError, match="one class only"):
        TextClassifier().fit(texts, ["a"] * 6)
    with pytest.raises(InputError, match="row 2: the label is empty"):
        TextClassifier().fit(texts, ["a", "b", None, "a", "b", "a"])
    with pytest.raises(InputError, match="row 1: the label is empty"):
        TextClassifier().fit(texts, ["a", float("nan"), "b", "a", "b", "a"])
    with pytest.raises(InputError, match=r"class 'c' \(1\) has fewer than 2 examples.*--C"):
        TextClassifier().fit(texts, ["a", "b", "c", "a", "b", "a"])
    with pytest.raises(InputError, match="classifier='forest'"):
        TextClassifier(classifier="forest").fit(texts, ["a", "b"] * 3)


def test_model_from_a_different_encoder_is_refused(sample, tmp_path):
    model_dir = tiny_models.tiny_bert(tmp_path / "enc", seed=0)
    texts, labels = sample[0][:12], sample[1][:12]
    TextClassifier(BertVectorizer(model=str(model_dir), layers="last"), C=1.0).fit(texts, labels).save(tmp_path / "run")
    shutil.rmtree(model_dir)
    tiny_models.tiny_bert(tmp_path / "enc", seed=1)  # same place, other weights
    with pytest.raises(ModelLoadError, match="fingerprint.*Retrain"):
        TextClassifier.load(tmp_path / "run")


def test_existing_run_directory_is_kept(sample, tmp_path):
    texts, labels = sample
    classifier = TextClassifier(BertVectorizer(layers="last"), C=1.0).fit(texts[:10], labels[:10])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "mine.txt").write_text("keep me")
    with pytest.raises(InputError, match="already exists.*--overwrite"):
        classifier.save(tmp_path / "run")
    assert (tmp_path / "run" / "mine.txt").read_text() == "keep me"
    with pytest.raises(InputError, match="not a folder bertkit wrote"):
        classifier.save(tmp_path / "run", overwrite=True)
    assert (tmp_path / "run" / "mine.txt").read_text() == "keep me"
    classifier.save(tmp_path / "run2")
    classifier.save(tmp_path / "run2", overwrite=True)  # a run bertkit wrote may be replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "run2"]


@pytest.mark.slow
def test_sst2_subset_accuracy():
    """Known accuracy: 1500 SST-2 training sentences → dev; the full set gives 84.4% (benchmarks/sst2_features.py)."""
    train = read_labelled(shared_file("sst2", "train.tsv"))
    dev = read_labelled(shared_file("sst2", "dev.tsv"))
    classifier = TextClassifier(BertVectorizer(layers="all:concat", batch_size=128)).fit(train.texts[:1500], train.labels[:1500])
    accuracy = classifier.score(dev.texts, dev.labels)
    assert accuracy >= 0.78, accuracy
