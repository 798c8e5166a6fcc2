"""TextClassifier: a scikit-learn Pipeline inside; any classifier; saved with skops (no pickle) and loaded back
identically; clear refusals; known accuracy."""

import json
import shutil

import numpy as np
import pytest
import tiny_models
from conftest import shared_file
from sklearn.base import clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier
from sklearn.utils import estimator_checks

from bertkit import BertVectorizer, InputError, ModelLoadError, TextClassifier
from bertkit.io.readers import read_labelled, sample_path
from bertkit.records import FORMAT_VERSION
from bertkit.tasks.heads import C_GRID, named_classifier


@pytest.fixture(scope="module")
def sample():
    data = read_labelled(sample_path("reviews.tsv"), "text", "label")
    return data.texts, data.labels


def logreg(C=1.0):
    return LogisticRegression(C=C, max_iter=3000)


@pytest.mark.parametrize("kind", ["logreg", "linear-svm", "mlp"])
def test_save_load_predicts_identically(sample, tmp_path, kind):
    texts, labels = sample
    head = named_classifier(kind, None if kind != "mlp" else 1.0, cv=3, n_samples=len(texts))
    classifier = TextClassifier(BertVectorizer(layers="last"), head, cv=3).fit(texts, labels)
    assert set(classifier.classes_) == {"negative", "positive"}
    assert classifier.score(texts, labels) > 0.9
    saved = classifier.save_pretrained(tmp_path / "run", metrics={"note": "x"})
    assert sorted(p.name for p in saved.iterdir()) == ["bertkit.json", "head.skops"]
    loaded = TextClassifier.from_pretrained(saved)
    probe = texts[:10] + ["an unseen sentence about a film"]
    np.testing.assert_array_equal(loaded.predict_proba(probe), classifier.predict_proba(probe))
    assert loaded.predict(probe).tolist() == classifier.predict(probe).tolist()
    assert isinstance(loaded.pipeline_, Pipeline) and list(loaded.pipeline_.named_steps) == [
        "vectorizer",
        "scaler",
        "classifier",
    ]
    record = json.loads((saved / "bertkit.json").read_text())
    assert record["bertkit"]["kind"] == "features" and record["bertkit"]["format_version"] == FORMAT_VERSION
    assert record["features"]["layers"] == "last"
    assert record["encoder"]["fingerprint"] == classifier.vectorizer_.encoder_.fingerprint
    assert record["classes"] == ["negative", "positive"] and record["versions"]["skops"]
    assert (saved / "head.skops").read_bytes()[:2] == b"PK"  # skops' own format: a zip of JSON and arrays


def test_the_default_is_logistic_regression_with_C_by_cross_validation(sample):
    texts, labels = sample
    classifier = TextClassifier(BertVectorizer(layers="last"), cv=4).fit(texts, labels)
    estimator = classifier.pipeline_.named_steps["classifier"]
    assert isinstance(estimator, LogisticRegressionCV) and estimator.Cs_.tolist() == list(C_GRID)
    assert classifier.C_ in classifier.cv_scores_ and classifier.cv_folds_ == 4
    assert classifier.cv_scores_[classifier.C_] == max(classifier.cv_scores_.values())
    # the same choice made by scikit-learn's GridSearchCV over LogisticRegression on the same folds
    features = StandardScaler().fit_transform(classifier.vectorizer_.transform(texts))
    search = GridSearchCV(
        LogisticRegression(max_iter=3000),
        {"C": list(C_GRID)},
        scoring="accuracy",
        cv=StratifiedKFold(4, shuffle=True, random_state=0),
    ).fit(features, labels)
    np.testing.assert_allclose(list(classifier.cv_scores_.values()), search.cv_results_["mean_test_score"], atol=0.02)
    fixed = TextClassifier(BertVectorizer(layers="last"), logreg(0.5)).fit(texts, labels)
    assert fixed.C_ is None and fixed.cv_scores_ == {}


def test_any_classifier_and_calibration_where_needed(sample):
    texts, labels = sample
    tree = TextClassifier(BertVectorizer(layers="last"), DecisionTreeClassifier(max_depth=2, random_state=0))
    assert tree.fit(texts, labels).pipeline_.named_steps["classifier"].get_depth() <= 2
    svm = TextClassifier(BertVectorizer(layers="last"), LinearSVC(C=0.1), cv=3).fit(texts, labels)
    calibrated = svm.pipeline_.named_steps["classifier"]
    assert isinstance(calibrated, CalibratedClassifierCV) and isinstance(calibrated.estimator, LinearSVC)
    np.testing.assert_allclose(svm.predict_proba(texts[:5]).sum(axis=1), 1.0, rtol=1e-6)


def test_integer_and_multiclass_labels(sample, encoder):
    texts = sample[0][:30]
    labels = [i % 3 for i in range(30)]
    classifier = TextClassifier(BertVectorizer(layers="last"), logreg()).fit(texts, labels)
    assert classifier.classes_.tolist() == [0, 1, 2]
    # the same thing by hand: Encoder.embed → StandardScaler → scikit-learn's multinomial LogisticRegression
    reference = make_pipeline(StandardScaler(), logreg())
    reference.fit(encoder.embed(texts, layers="last"), labels)
    probabilities = classifier.predict_proba(texts[:4])
    np.testing.assert_allclose(
        probabilities, reference.predict_proba(encoder.embed(texts[:4], layers="last")), atol=1e-4
    )
    assert classifier.predict(texts[:4]).tolist() == classifier.classes_[probabilities.argmax(1)].tolist()


def test_scikit_learn_conventions():
    """The estimator checks that apply to an estimator of texts (the others feed it numeric matrices)."""
    checks = [
        "check_no_attributes_set_in_init",
        "check_get_params_invariance",
        "check_set_params",
        "check_parameters_default_constructible",
        "check_estimator_repr",
        "check_estimator_cloneable",
        "check_do_not_raise_errors_in_init_or_set_params",
        "check_mixin_order",
        "check_valid_tag_types",
        "check_estimator_tags_renamed",
    ]
    for estimator in (TextClassifier(), TextClassifier(BertVectorizer(layers="last"), logreg()), BertVectorizer()):
        for check in checks:
            getattr(estimator_checks, check)(type(estimator).__name__, estimator)
    nested = TextClassifier(BertVectorizer(layers="last"), logreg()).get_params()
    assert nested["classifier__C"] == 1.0 and nested["vectorizer__layers"] == "last" and nested["random_state"] == 0
    assert clone(TextClassifier(random_state=7)).random_state == 7


def test_grid_search_and_cross_validation_reach_the_parts(sample):
    texts, labels = sample
    model = TextClassifier(BertVectorizer(layers="last"), logreg())
    search = GridSearchCV(model, {"classifier__C": [0.01, 1.0], "vectorizer__pooling": ["mean", "cls"]}, cv=2)
    search.fit(texts, labels)
    assert set(search.best_params_) == {"classifier__C", "vectorizer__pooling"}
    assert len(cross_val_score(model, texts, labels, cv=2)) == 2


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
    with pytest.raises(InputError, match="classifier 'forest'"):
        named_classifier("forest")


def test_untrusted_types_in_a_saved_head_are_refused(sample, tmp_path):
    texts, labels = sample
    from sklearn.ensemble import HistGradientBoostingClassifier

    model = TextClassifier(BertVectorizer(layers="last"), HistGradientBoostingClassifier(max_iter=3))
    model.fit(texts, labels).save_pretrained(tmp_path / "run")
    with pytest.raises(ModelLoadError, match="types bertkit does not load unless you trust them.*trusted="):
        TextClassifier.from_pretrained(tmp_path / "run")
    import skops.io

    names = skops.io.get_untrusted_types(file=tmp_path / "run" / "head.skops")
    loaded = TextClassifier.from_pretrained(tmp_path / "run", trusted=names)
    np.testing.assert_array_equal(loaded.predict_proba(texts[:3]), model.predict_proba(texts[:3]))
    (tmp_path / "run" / "head.skops").write_bytes(b"not a zip")
    with pytest.raises(ModelLoadError, match="not a readable skops file"):
        TextClassifier.from_pretrained(tmp_path / "run")


def test_model_from_a_different_encoder_is_refused(sample, tmp_path):
    model_dir = tiny_models.tiny_bert(tmp_path / "enc", seed=0)
    texts, labels = sample[0][:12], sample[1][:12]
    TextClassifier(BertVectorizer(model=str(model_dir), layers="last"), logreg()).fit(texts, labels).save_pretrained(
        tmp_path / "run"
    )
    shutil.rmtree(model_dir)
    tiny_models.tiny_bert(tmp_path / "enc", seed=1)  # same place, other weights
    with pytest.raises(ModelLoadError, match="fingerprint.*Retrain"):
        TextClassifier.from_pretrained(tmp_path / "run")


def test_an_existing_run_directory_is_replaced_only_with_overwrite(sample, tmp_path):
    texts, labels = sample
    classifier = TextClassifier(BertVectorizer(layers="last"), logreg()).fit(texts[:10], labels[:10])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "mine.txt").write_text("keep me")
    with pytest.raises(InputError, match="run already exists; nothing was touched.*--overwrite"):
        classifier.save_pretrained(tmp_path / "run")
    assert (tmp_path / "run" / "mine.txt").read_text() == "keep me"
    with pytest.raises(InputError, match="bertkit did not write.*give a new or empty folder"):
        classifier.save_pretrained(tmp_path / "run", overwrite=True)  # a folder of the user's: not even then
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["mine.txt"]
    classifier.save_pretrained(tmp_path / "ours")
    (tmp_path / "ours" / "notes.txt").write_text("a file in a run of bertkit's")
    classifier.save_pretrained(tmp_path / "ours", overwrite=True)  # bertkit's own run: replaced whole
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == ["bertkit.json", "head.skops"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours", "run"]


def test_a_run_without_the_bertkit_record_is_refused_in_one_line(sample, tmp_path):
    texts, labels = sample
    run = TextClassifier(BertVectorizer(layers="last"), logreg()).fit(texts[:10], labels[:10])
    run = run.save_pretrained(tmp_path / "run")
    record = json.loads((run / "bertkit.json").read_text())
    del record["bertkit"]
    (run / "bertkit.json").write_text(json.dumps({"kind": "features", "format": 2, **record}))  # bertkit 0.2's
    with pytest.raises(ModelLoadError, match="not a file bertkit wrote \\(it has no bertkit record\\)"):
        TextClassifier.from_pretrained(run)


@pytest.mark.slow
def test_sst2_subset_accuracy():
    """Known accuracy: 1500 SST-2 training sentences → dev; the full set gives 84.4% (benchmarks/sst2_features.py)."""
    train = read_labelled(shared_file("sst2", "train.tsv"))
    dev = read_labelled(shared_file("sst2", "dev.tsv"))
    classifier = TextClassifier(BertVectorizer(layers="all:concat", batch_size=128)).fit(
        train.texts[:1500], train.labels[:1500]
    )
    accuracy = classifier.score(dev.texts, dev.labels)
    assert accuracy >= 0.78, accuracy
