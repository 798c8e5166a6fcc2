"""Regression tests for the promises on the surfaces added last (issue 31): a file is never replaced unasked, bad
pair/score/multi-label input is refused at its line, paths and ports are checked before the model loads, and
messages stay short and about the user's input."""

import json

import numpy as np
import pytest
from conftest import run_cli
from sklearn.linear_model import LogisticRegression

from bertkit.errors import InputError
from bertkit.records import record_kind


@pytest.fixture(scope="module")
def features_run(tmp_path_factory):
    from bertkit import BertVectorizer, TextClassifier

    root = tmp_path_factory.mktemp("run")
    texts = ["good film", "great film", "love it", "bad film", "awful plot", "boring mess"] * 2
    labels = ["pos", "pos", "pos", "neg", "neg", "neg"] * 2
    estimator = TextClassifier(BertVectorizer(layers="last"), LogisticRegression(C=1.0, max_iter=3000))
    estimator.fit(texts, labels).save_pretrained(root / "run")
    return root / "run"


@pytest.fixture
def reviews(tmp_path):
    path = tmp_path / "reviews.tsv"
    path.write_text("".join(f"review number {i}\t{i % 2}\n" for i in range(6)))
    return path


# ---- an existing file is never replaced without --overwrite, whoever wrote it ------------------------------------
REFUSED = "already exists; nothing was touched. Choose another output, or pass --overwrite to replace it."


@pytest.mark.parametrize("name", ["mine.npy", "mine.npz"])
def test_embed_keeps_a_users_vectors_file(monkeypatch, capsys, tmp_path, reviews, name):
    mine = tmp_path / name
    np.save(mine, np.arange(6.0)) if name.endswith(".npy") else np.savez(mine, vectors=np.arange(6.0))
    before = mine.read_bytes()
    code, _, err = run_cli(monkeypatch, capsys, "embed", reviews, "-o", mine, "-c", "0", "--no-header")
    assert code == 2 and REFUSED in err, err
    assert mine.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "reviews.tsv"])  # nothing partial left
    code, _, err = run_cli(monkeypatch, capsys, "embed", reviews, "-o", mine, "-c", "0", "--no-header", "--overwrite")
    assert code == 0, err
    vectors = np.load(mine) if name.endswith(".npy") else np.load(mine)["vectors"]
    assert vectors.shape == (6, 384)


def test_embed_refuses_even_its_own_npz_without_overwrite(monkeypatch, capsys, tmp_path, reviews):
    output = tmp_path / "vectors.npz"
    args = ["embed", reviews, "-o", output, "-c", "0", "--no-header"]
    assert run_cli(monkeypatch, capsys, *args)[0] == 0
    before = output.read_bytes()
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and REFUSED in err and output.read_bytes() == before, err
    assert run_cli(monkeypatch, capsys, *args, "--overwrite")[0] == 0
    with np.load(output) as archive:
        assert record_kind(json.loads(str(archive["meta"]))) == "vectors"


def test_token_vectors_keep_a_users_npz_and_carry_the_record(monkeypatch, capsys, tmp_path, reviews):
    mine = tmp_path / "tokens.npz"
    np.savez(mine, tokens=np.arange(3))
    args = ["embed", reviews, "-o", mine, "-c", "0", "--no-header", "--pooling", "none"]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and REFUSED in err
    assert run_cli(monkeypatch, capsys, *args, "--overwrite")[0] == 0
    with np.load(mine) as archive:
        assert record_kind(json.loads(str(archive["meta"]))) == "token vectors"
    assert run_cli(monkeypatch, capsys, *args)[0] == 2  # bertkit's own now, and still refused


def test_predict_keeps_a_users_table(monkeypatch, capsys, tmp_path, features_run):
    notes = tmp_path / "notes.tsv"
    notes.write_text("my\tnotes\n")
    code, out, err = run_cli(monkeypatch, capsys, "predict", features_run, "a fine film", "-o", notes)
    assert code == 2 and REFUSED in err and notes.read_text() == "my\tnotes\n"
    predictions = tmp_path / "predictions.tsv"
    assert run_cli(monkeypatch, capsys, "predict", features_run, "a fine film", "-o", predictions)[0] == 0
    code, _, err = run_cli(monkeypatch, capsys, "predict", features_run, "a fine film", "-o", predictions)
    assert code == 2 and REFUSED in err, err
    assert predictions.read_text().splitlines()[0] == "label\tprobability\ttext"
    assert run_cli(monkeypatch, capsys, "predict", features_run, "a fine film", "-o", notes, "--overwrite")[0] == 0
    assert notes.read_text().startswith("label\tprobability\ttext\n")


@pytest.mark.parametrize("header", ["labels\ttext", "score\ttext", "score\ttext\tpair"])
def test_predict_keeps_a_users_multi_label_or_regression_file(monkeypatch, capsys, tmp_path, features_run, header):
    """A user's training data for those tasks starts with the header bertkit's own predictions have."""
    data = tmp_path / "data.tsv"
    data.write_text(f"{header}\nsports,politics\tthe minister played golf\tx\n")
    before = data.read_text()
    for args in ([data, "-c", "text"], ["a fine film"]):
        code, _, err = run_cli(monkeypatch, capsys, "predict", features_run, *args, "-o", data)
        assert code == 2 and data.read_text() == before, err
        assert ("is also an input" if args[0] == data else REFUSED) in err, err


def test_predict_never_writes_over_its_input(monkeypatch, capsys, tmp_path, features_run):
    table = tmp_path / "predictions.tsv"
    assert run_cli(monkeypatch, capsys, "predict", features_run, "a fine film", "-o", table)[0] == 0
    before = table.read_text()
    for overwrite in ([], ["--overwrite"]):
        code, _, err = run_cli(
            monkeypatch, capsys, "predict", features_run, table, "-c", "text", "-o", table, *overwrite
        )
        assert code == 2 and "is also an input" in err and table.read_text() == before, err


def test_a_long_text_on_the_command_line_is_a_text_and_bytes_that_are_not_utf8_are_one_line(
    monkeypatch, capsys, features_run
):
    review = " ".join(["a fine film with a great cast"] * 12)
    assert len(review) > 255  # longer than a file name may be
    code, out, err = run_cli(monkeypatch, capsys, "predict", features_run, review)
    assert code == 0 and out.splitlines()[1].endswith(review), err
    for args in (
        ["tokenize", "caf\udce9"],
        ["predict", features_run, "caf\udce9 good"],
        ["search", "v.npz", "caf\udce9"],
        ["search", "v.npz", "a query", "--prompt", "caf\udce9"],
        ["explain", "a text", "--compare", "caf\udce9"],
    ):
        code, out, err = run_cli(monkeypatch, capsys, *args)
        assert code == 2 and err.startswith("error: caf\\xe9") and "is a byte that is not UTF-8" in err, err
        assert "Traceback" not in err and len(err.splitlines()) == 1


def test_explain_keeps_a_users_page(monkeypatch, capsys, tmp_path):
    page = tmp_path / "mypage.html"
    page.write_text("<html><body>my page</body></html>")
    code, _, err = run_cli(monkeypatch, capsys, "explain", "a fine film", "-o", page)
    assert code == 2 and REFUSED in err and page.read_text().endswith("my page</body></html>")


def test_report_files_are_replaced_only_with_overwrite(tmp_path):
    from bertkit.tasks.report import classification_metrics, write_report

    labels = ["pos", "neg"] * 10
    metrics = classification_metrics(labels, labels, ["neg", "pos"], "neg")
    written = write_report(tmp_path, metrics, np.random.default_rng(0).normal(size=(20, 5)), labels)
    assert [p.name for p in written] == ["metrics.json", "confusion.png", "pca.png"]
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record_kind(record) == "metrics" and record["accuracy"] == 1.0
    (tmp_path / "confusion.png").write_bytes(b"\x89PNG\r\n\x1a\nmine")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(InputError, match=f"metrics.json {REFUSED}"):  # bertkit's own files and a user's alike
        write_report(tmp_path, metrics)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert len(write_report(tmp_path, metrics, overwrite=True)) == 2
    assert not (tmp_path / "confusion.png").read_bytes().endswith(b"mine")


# ---- bad training input is refused at its line, before any training ----------------------------------------------
def test_blank_text_or_pair_cells_are_refused_at_their_line(tmp_path):
    from bertkit.io.readers import read_labelled

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a cat sat\ton a mat\tyes\nthe dog\t  \tno\n")
    with pytest.raises(InputError, match=r"pairs.tsv, line 2: the pair text is blank"):
        read_labelled(pairs, paired=True)
    texts = tmp_path / "texts.tsv"
    texts.write_text("fine\tpos\n\t\tneg\n".replace("\t\t", "\t"))
    with pytest.raises(InputError, match=r"texts.tsv, line 2: the text is blank"):
        read_labelled(texts)


def test_a_stray_word_among_decimal_scores_is_refused(tiny_dirs, tmp_path):
    from test_finetune import tiny_args

    from bertkit.tasks.finetune import finetune

    rows = [f"text number {i}\tanother text {i}\t{i / 10:.2f}" for i in range(20)]
    rows[7] = "text number 7\tanother text 7\thigh"
    (tmp_path / "scores.tsv").write_text("\n".join(rows) + "\n")
    with pytest.raises(InputError, match=r"scores.tsv, line 8: the label 'high' is not a number.*read as scores"):
        finetune(
            tmp_path / "scores.tsv",
            output_dir=tmp_path / "run",
            task="pair",
            model=str(tiny_dirs["bert_cased"]),
            args=tiny_args(),
        )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "labels, problem",
    [
        (["pos", "neg", "0.5", "neg"], "single_label_classification"),  # words dominate: classes, "0.5" one of them
        (["1", "2", "3", "1"], "single_label_classification"),  # whole numbers are class names
        (["0.1", "0.7", "0.25", "1"], "regression"),  # numbers with decimals are scores
    ],
)
def test_what_the_labels_say_decides_classes_or_scores(encoder, tmp_path, labels, problem):
    from bertkit.tasks.finetune.prepare import SINGLE_LABEL, Columns, prepare

    path = tmp_path / "train.tsv"
    path.write_text("".join(f"sentence number {i}\t{label}\n" for i, label in enumerate(labels * 3)))
    prepared = prepare("text", SINGLE_LABEL, encoder.tokenizer, path, path, 16, 0, 0.25, None, Columns())
    assert prepared.problem == problem
    if problem != "regression":
        assert sorted(prepared.labels) == sorted(set(labels))


@pytest.mark.parametrize("task", ["text", "pair"])
def test_a_small_file_without_dev_is_refused_in_one_line(monkeypatch, capsys, tmp_path, task):
    rows = [f"sentence {i}\t" + ("other {i}\t" if task == "pair" else "") + f"{'abc'[i % 3]}" for i in range(9)]
    (tmp_path / "small.tsv").write_text("\n".join(rows) + "\n")
    code, _, err = run_cli(
        monkeypatch, capsys, "finetune", tmp_path / "small.tsv", "-o", tmp_path / "r", "--task", task
    )
    assert code == 2 and err.count("\n") == 1, err
    assert "9 examples of 3 classes" in err and "--dev" in err and "Traceback" not in err


def test_split_holdout_refuses_what_scikit_learn_cannot_split():
    from bertkit.tasks.labels import split_holdout

    with pytest.raises(InputError, match="8 examples of 3 classes: holding out 10% leaves 1 for dev"):
        split_holdout(list(range(8)), list("aabbccab"), 0.1, 0)
    train, dev, _, dev_labels = split_holdout(list(range(8)), list("aabbccab"), 0.5, 0)
    assert len(dev) == 4 and set(dev_labels) == set("abc")


def test_an_empty_label_separator_is_refused(monkeypatch, capsys, tmp_path):
    (tmp_path / "m.tsv").write_text("a text\tx,y\n")
    code, _, err = run_cli(
        monkeypatch,
        capsys,
        "finetune",
        tmp_path / "m.tsv",
        "-o",
        tmp_path / "r",
        "--multi-label",
        "--label-separator",
        "",
    )
    assert code == 2 and "label separator ''" in err and "ValueError" not in err


# ---- a chapter in one cell (csv's 131,072-character field limit) -------------------------------------------------
def test_a_300k_character_cell_is_read_without_a_column_given(monkeypatch, capsys, tmp_path):
    from bertkit.io.columns import choose_text_column
    from bertkit.io.readers import read_texts

    chapter = "word " * 60_000
    (tmp_path / "book.tsv").write_text(f"ch1\t{chapter}\nch2\tshort text\n")
    assert choose_text_column(tmp_path / "book.tsv").column == 1
    assert len(read_texts(tmp_path / "book.tsv", 1)[0][0]) == len(chapter)
    code, _, err = run_cli(monkeypatch, capsys, "embed", tmp_path / "book.tsv", "-o", tmp_path / "v.npz")
    assert code == 0, err
    code, _, err = run_cli(
        monkeypatch, capsys, "embed", tmp_path / "book.tsv", "-o", tmp_path / "e.npz", "--long-text", "error"
    )
    assert code == 2 and "book.tsv, line 1:" in err and "more than the limit" in err


# ---- binary files, missing paths and ports: one line, before torch or a model loads -------------------------------
@pytest.mark.parametrize(
    "content, kind",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00", "a PNG image"),
        (b"\x7fELF\x02\x01\x01\x00", "an executable"),
        (b"\x93NUMPY\x01\x00v\x00{'descr'", "a NumPy .npy array"),
        (b"\x00\x00\xa0\xff binary\x00", "NUL bytes in what is not UTF-8 text"),
    ],
)
def test_a_binary_file_is_called_one(tmp_path, content, kind):
    from bertkit.io.readers import read_texts

    (tmp_path / "data.tsv").write_bytes(content)
    with pytest.raises(InputError, match=f"data.tsv: this is a binary file \\({kind}"):
        read_texts(tmp_path / "data.tsv")


def test_a_nul_in_utf8_text_is_still_text(tmp_path):
    from bertkit.io.readers import read_texts

    (tmp_path / "t.txt").write_bytes(b"one\x00text\nanother\n")
    assert read_texts(tmp_path / "t.txt")[0] == ["one\x00text", "another"]


def test_utf16_is_named_as_such(tmp_path):
    from bertkit.io.readers import read_texts

    (tmp_path / "u.txt").write_bytes("hello\n".encode("utf-16"))
    with pytest.raises(InputError, match="UTF-16 text; re-save it as UTF-8"):
        read_texts(tmp_path / "u.txt")


def run_light(tmp_path, *args) -> tuple[int, str, bool]:
    """`bertkit ARGS` in a fresh interpreter: (exit code, stderr, whether torch was imported)."""
    import subprocess
    import sys

    script = (
        "import sys\nfrom bertkit.cli.main import main\nsys.argv = ['bertkit', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
        "print('torch' in sys.modules, file=sys.stdout)\nsys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    return done.returncode, done.stderr, done.stdout.strip() == "True"


@pytest.mark.parametrize(
    "args, message",
    [
        (["finetune", "nothere.tsv", "-o", "out"], "nothere.tsv: no such file or directory; check the path"),
        (["train", "nothere.tsv", "-o", "out"], "nothere.tsv: no such file or directory; check the path"),
        (["predict", "no-run", "good"], "no-run: no such file or directory; check the path"),
        (["evaluate", "no-run", "x.tsv"], "no-run: no such file or directory; check the path"),
        (["serve", "--run", "nope=no-run"], "no-run: no such file or directory; check the path"),
        (["explain", "a text", "--run", "no-run"], "no-run: no such file or directory; check the path"),
        (["embed", "nothere.tsv", "-o", "v.npy"], "nothere.tsv: no such file or directory; check the path"),
        (["serve", "--port", "99999"], "--port 99999: give a port from 1 to 65535"),
        (["serve", "--port", "0"], "--port 0: give a port from 1 to 65535"),
    ],
)
def test_mistakes_are_refused_before_torch_loads(tmp_path, args, message):
    code, err, torch_loaded = run_light(tmp_path, *args)
    assert code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert not torch_loaded


def test_a_busy_port_is_refused_before_the_model_loads(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, err, torch_loaded = run_light(tmp_path, "serve", "--port", port)
    assert (
        code == 2
        and err
        == f"error: --port {port}: 127.0.0.1:{port} is already in use (another server?); "
        "stop it or choose another --port.\n"
    )
    assert not torch_loaded


def test_a_folder_that_is_not_a_run_says_so(tmp_path):
    (tmp_path / "notes").mkdir()
    code, err, _ = run_light(tmp_path, "predict", "notes", "good")
    assert code == 2 and "notes is not a bertkit run directory (no bertkit.json)" in err


# ---- messages: brief, and no advice bertkit would refuse ------------------------------------------------------------
def test_a_long_value_is_not_echoed_whole(monkeypatch, capsys, tmp_path, reviews):
    huge = "last" + "x" * 100_000
    code, _, err = run_cli(monkeypatch, capsys, "embed", reviews, "-o", tmp_path / "v.npy", "--layers", huge)
    assert code == 2 and "x" * 100 not in err and len(err) < 600, len(err)  # the value cut, the advice kept
    from bertkit.io.readers import read_labelled

    (tmp_path / "scores.tsv").write_text("a text\t" + "9" * 50 + "x" * 100_000 + "\n")
    with pytest.raises(InputError) as refused:
        read_labelled(tmp_path / "scores.tsv", label_kind="numeric")
    assert "x" * 100 not in str(refused.value) and "scores.tsv, line 1" in str(refused.value)


def test_a_model_that_needs_its_own_code_is_refused_in_one_line(tiny_dirs, tmp_path):
    import shutil

    from bertkit import Encoder
    from bertkit.errors import ModelLoadError

    model = tmp_path / "custom"
    shutil.copytree(tiny_dirs["bert_cased"], model)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_custom.CustomModel"}
    (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError) as refused:
        Encoder.from_pretrained(str(model))
    message = str(refused.value)
    assert "never a model's code" in message and "\n" not in message and "trust_remote_code" not in message


# ---- saved vectors: damage is one line, whatever the bytes say ------------------------------------------------------
FUZZ_NPZ = (  # found by fuzz/fuzz_inputs.py: a .npz whose member offset sends zipfile's seek below 0 (EINVAL)
    "eNoL8GZm0WWAAEUG15a3M/9DgQgDN0NZanJJflGxXl5BJSODAMMCRojCBVANk/1CfQMiGRnKFIgBXBBNDfZAwgGIgLgBiBcA8QEg"
    "fuAQgOKWuqzfJ2FuYWcQYchMgbtjAlTRBHR3MFSrp6QWJxepWymo22RaqOsoqKflF5UUJebF5xelpILE3RJzilOB4sUZiQWpQL6G"
    "kY6mjkKtAvFAF5fPGBig4cOA6pO8PfYXYT7hAPokN7UkEeaVGVAtMBq7V0LNDYjyC4k+wRJH1UA3KAFxEhCnAnEREJcAcTYQZ0LZ"
    "IHkrIFaAstOAuBSIq6AYJKaDJJ8LxPlAnAI1MweLGTA5kFmJUPNykOzTQVObCTUX2RxjNHX5UHNAZhQgsbG5PweqPhGqBmSWEVS+"
    "FhyjjEy6zKg5ZQE0K3AzIEADOB6R8g26RlCyngBNu+woGu+CvJWCVRMoBYFSCAhzoGhaBhSBpacAb1Y2kCgzEC4B0hXMIB4AGsem"
    "0Q=="
)


def test_a_fuzzed_npz_is_one_line_not_an_os_error(tmp_path):
    """Before: zipfile's seek to a negative offset raised OSError(EINVAL), which read_vectors passed on as if the
    disk had failed."""
    import base64
    import zlib

    from bertkit.io.vectors import read_vectors

    path = tmp_path / "v.npz"
    path.write_bytes(zlib.decompress(base64.b64decode("".join(FUZZ_NPZ))))
    with pytest.raises(InputError, match="v.npz is not a complete vectors file of bertkit"):
        read_vectors(path)
