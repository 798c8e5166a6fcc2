"""`bertkit train / evaluate / predict`: the pipeline end to end on the shipped sample, and clear refusals."""

import csv
import json
from pathlib import Path

import pytest
from test_cli import run

from bertkit.io.cache import MEMORY
from bertkit.io.readers import sample_path

SAMPLE = str(sample_path("reviews.tsv"))


def train(monkeypatch, capsys, tmp_path, *extra):
    return run(
        monkeypatch,
        capsys,
        "train",
        SAMPLE,
        "--text-column",
        "text",
        "--label-column",
        "label",
        "--layers",
        "last",
        "--cache-dir",
        tmp_path / "cache",
        *extra,
    )


def test_train_evaluate_predict(monkeypatch, capsys, tmp_path):
    MEMORY.clear()
    code, out, err = train(
        monkeypatch, capsys, tmp_path, "--test-size", "0.25", "-o", tmp_path / "run", "--report", tmp_path / "report"
    )
    assert code == 0, err
    assert "accuracy" in out and "macro-F1" in out and "majority-class baseline 0.5000" in out
    assert "confusion matrix" in out and "negative" in out
    assert "C chosen by 5-fold cross-validation: C=" in err and "60 embedded" in err
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["confusion.png", "metrics.json", "pca.png"]
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())
    assert metrics["n"] == 20 and metrics["accuracy"] >= 0.8
    assert (tmp_path / "report" / "pca.png").read_bytes()[:4] == b"\x89PNG"

    code, out, err = train(monkeypatch, capsys, tmp_path, "--test-size", "0.25", "-o", tmp_path / "run2")
    assert code == 0 and "60 cached, 0 embedded" in err  # re-training never re-embeds

    code, out, err = run(monkeypatch, capsys, "evaluate", tmp_path / "run", SAMPLE)
    assert code == 0 and out.startswith("accuracy") and "n=80" in out
    assert "is the file this run was trained on" in err and "score a held-out file" in err  # the training file
    held_out = tmp_path / "held_out.tsv"
    held_out.write_text(Path(SAMPLE).read_text(encoding="utf-8") + "\n", encoding="utf-8")  # other bytes, same rows
    code, out, err = run(monkeypatch, capsys, "evaluate", tmp_path / "run", held_out)
    assert code == 0 and "n=80" in out and "trained on" not in err

    code, out, err = run(monkeypatch, capsys, "predict", tmp_path / "run", "a wonderful , moving film", "a dull mess")
    assert code == 0, err
    rows = list(csv.reader(out.splitlines(), delimiter="\t"))
    assert rows[0] == ["label", "probability", "text"]
    assert [r[0] for r in rows[1:]] == ["positive", "negative"] and float(rows[1][1]) > 0.5

    code, _, err = run(
        monkeypatch,
        capsys,
        "predict",
        tmp_path / "run",
        SAMPLE,
        "--text-column",
        "text",
        "--header",
        "-o",
        tmp_path / "pred.tsv",
    )
    assert code == 0, err
    rows = list(csv.reader((tmp_path / "pred.tsv").read_text().splitlines(), delimiter="\t"))
    sample_rows = list(csv.reader(Path(SAMPLE).read_text(encoding="utf-8").splitlines(), delimiter="\t"))
    assert [r[2] for r in rows[1:]] == [r[0] for r in sample_rows[1:]]  # row order kept


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "content, args, message",
    [
        ("good film\tpos\nnice film\tpos\n", [], "one class only ('pos')"),
        ("good film\tpos\nbad film\t\nfine\tneg\n", [], "line 2: the label is empty"),
        ("a\tpos\nb\tpos\nc\tneg\nd\tneg\ne\tmeh\n", ["--dev", "DEV"], "class 'meh' (1) has fewer than 2 examples"),
        ("phrase\tpolarity\n" + "good\tpos\nbad\tneg\n" * 6, [], "line 1 looks like a header"),
        ("text\tlabel\n", [], "the file has no data rows"),  # a header alone: not "one class only ('label')"
        ("text,label\na great film,pos\na dull film,neg\n", [], "Line 1 has no tab but 1 comma: if the file is CSV"),
    ],
)
def test_bad_training_input(monkeypatch, capsys, tmp_path, content, args, message):
    source = write(tmp_path / "train.tsv", content)
    dev = write(tmp_path / "dev.tsv", "fine\tpos\n")
    args = [str(dev) if a == "DEV" else a for a in args]
    code, _, err = run(monkeypatch, capsys, "train", source, "-o", tmp_path / "run", "--no-cache", *args)
    assert code == 2 and err.splitlines()[-1].startswith("error: ") and message in err, err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


def test_train_reads_a_header_as_embed_does(monkeypatch, capsys, tmp_path):
    """One reader rule: line 1 of usual column names is a header for `train` as for `embed`, without --header (a
    4-row CSV said "class ['label'] has a single example" before)."""
    rows = "text,label\na great film,pos\na dull film,neg\na lovely story,pos\na boring mess,neg\n"
    source = write(tmp_path / "four.csv", rows * 1)
    code, _, err = run(monkeypatch, capsys, "train", source, "-o", tmp_path / "run", "--no-cache", "-l", "last")
    assert code == 2 and "4 examples of 2 classes" in err and "label" not in err.split("error:")[-1], err
    source = write(tmp_path / "more.csv", rows + "".join(rows.splitlines(keepends=True)[1:]) * 3)
    code, _, err = run(monkeypatch, capsys, "train", source, "-o", tmp_path / "run", "--no-cache", "-l", "last")
    assert code == 0, err
    assert json.loads((tmp_path / "run" / "bertkit.json").read_text())["classes"] == ["neg", "pos"]
    code, out, err = run(monkeypatch, capsys, "embed", source, "-o", tmp_path / "v.npz")
    assert code == 0 and "line 1 is a header" in err and "16 × 384" in err, err


def test_dev_labels_unseen_in_training_are_named(monkeypatch, capsys, tmp_path):
    source = write(tmp_path / "train.tsv", "good\tpos\nbad\tneg\n" * 3)
    dev = write(tmp_path / "dev.tsv", "fine\tpos\nso so\tneutral\nawful\tterrible\n")
    code, _, err = run(monkeypatch, capsys, "train", source, "--dev", dev, "-o", tmp_path / "run", "--no-cache")
    assert (
        code == 2
        and f"labels ['neutral', 'terrible'] never occur in {source}" in err
        and "known: ['neg', 'pos']" in err
    )
    assert not (tmp_path / "run").exists()


def test_existing_output_needs_overwrite(monkeypatch, capsys, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "mine.txt").write_text("keep me")
    code, _, err = train(monkeypatch, capsys, tmp_path, "-o", tmp_path / "run")
    assert code == 2 and "run already exists; nothing was touched" in err and "--overwrite" in err
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["mine.txt"]
    (tmp_path / "run2").mkdir()  # an empty folder is there too: the same refusal
    code, _, err = train(monkeypatch, capsys, tmp_path, "-o", tmp_path / "run2")
    assert code == 2 and "run2 already exists; nothing was touched" in err and "--overwrite" in err
    assert (tmp_path / "run" / "mine.txt").read_text() == "keep me"


def test_evaluate_refuses_unknown_labels_and_non_runs(monkeypatch, capsys, tmp_path):
    code, _, err = train(monkeypatch, capsys, tmp_path, "-o", tmp_path / "run", "--C", "1")
    assert code == 0, err
    other = write(tmp_path / "other.tsv", "text\tlabel\nfine\tpositive\nmeh\tneutral\n")
    code, _, err = run(monkeypatch, capsys, "evaluate", tmp_path / "run", other)
    assert code == 2 and "['neutral'] never occur" in err
    code, _, err = run(monkeypatch, capsys, "evaluate", tmp_path, other)
    assert code == 2 and "not a bertkit run directory" in err


def test_embed_of_a_csv_named_tsv_says_so_instead_of_embedding_whole_lines(monkeypatch, capsys, tmp_path):
    """Each line read as one field with the same number of commas is a CSV named .tsv: embedding "text,label" lines
    would put the labels in the vectors. Sentences with commas in varying numbers are one column, as before."""
    source = write(tmp_path / "c.tsv", "text,label\na great film,pos\na dull film,neg\na lovely story,pos\n")
    code, out, err = run(monkeypatch, capsys, "embed", source, "-o", tmp_path / "v.npy")
    assert code == 2 and "no tab but 1 comma: if the file is CSV" in err and "--text-column 0" in err, err
    assert not (tmp_path / "v.npy").exists() and not out
    code, _, err = run(monkeypatch, capsys, "embed", source, "-o", tmp_path / "v.npy", "--text-column", "0")
    assert code == 0 and "4 × 384" in err, err  # the way out the message names
    quoted = write(tmp_path / "q.tsv", 'text,label\n"a film, at last",pos\nthe plot,neg\n"dull, slow, long",neg\n')
    code, _, err = run(monkeypatch, capsys, "embed", quoted, "-o", tmp_path / "q.npy")  # CSV quotes a comma
    assert code == 2 and "if the file is CSV" in err, err
    sentences = write(tmp_path / "s.tsv", "a film , at last\na dull , slow , long film\nfine\n")
    code, _, err = run(monkeypatch, capsys, "embed", sentences, "-o", tmp_path / "s.npy")
    assert code == 0 and "3 × 384" in err, err
