"""Regression tests for what a new user tripped over in the second hour (issue 33)."""

import subprocess
import sys

import pytest


def test_flags_show_no_type_in_help():
    """Before: Rich's help panels printed `--version <bool>`, `--help <bool>`, as if those flags took a value."""
    for args in (["--help"], ["embed", "--help"], ["finetune", "--help"]):
        shown = subprocess.run(
            [sys.executable, "-m", "bertkit.cli", *args], capture_output=True, text=True, check=True, timeout=120
        ).stdout
        assert "<bool>" not in shown and "--overwrite" in shown or args == ["--help"], shown
        assert "--help" in shown and "Show this message and exit." in shown


@pytest.mark.parametrize(
    "text",
    ["disjointed parody", "woefully pretentious", "predictably melodramatic", "I loved it 🙂", "Croft 29-6-64-1"],
)
def test_rare_english_words_are_not_poor_coverage(encoder, text):
    """Before: rare English words split into word pieces ("dis ##jo ##int ##ed") told the user to switch to a
    multilingual model; so did an emoji's one [UNK] and cricket figures (benchmarks/coverage.py: SST-2 7 rows,
    CoNLL-2003 6.6% of its rows flagged; now none)."""
    report = encoder.coverage([text])
    assert not report.poor and "WARNING" not in report.message(), report.message()


@pytest.mark.parametrize(
    "text", ["나는 한국을 사랑해요", "Я люблю этот фильм", "ฉันชอบภาพยนตร์เรื่องนี้มาก", "أحب هذا الفيلم كثيرا"]
)
def test_text_in_another_script_is_poor_coverage_row_by_row(encoder, text):
    """Each row is judged with its own script (before: a row's script was not passed, so only jamo and [UNK]s
    counted, and a Russian row in an English vocabulary passed)."""
    assert encoder.coverage([text]).poor, encoder.coverage([text]).message()
    assert encoder.coverage([text, "a plain English sentence"]).poor_rows == [0]


def test_a_run_finds_its_training_file_from_any_folder(monkeypatch, capsys, tmp_path):
    """Before: `train reviews.tsv` recorded 'reviews.tsv'; the explainer, started in another folder, lost the run's
    map ("its training file is not reachable here") and fell back to sample reviews whose labels were another set."""
    from conftest import run_cli

    from bertkit.explain.explainer import _fit_map, map_source
    from bertkit.tasks.load import load_run

    (tmp_path / "work").mkdir()
    rows = [f"a good film number {i}\t1" for i in range(8)] + [f"a bad film number {i}\t0" for i in range(8)]
    (tmp_path / "work" / "reviews.tsv").write_text("\n".join(rows) + "\n")
    monkeypatch.chdir(tmp_path / "work")
    args = ["train", "reviews.tsv", "--dev", "reviews.tsv", "-o", "run", "-l", "last", "--C", "1"]
    assert run_cli(monkeypatch, capsys, *args)[0] == 0
    monkeypatch.chdir(tmp_path)
    run = load_run(tmp_path / "work" / "run")
    texts, labels, source, sample = map_source(run, "run")
    assert not sample and len(texts) == 16 and "training file" in source and str(tmp_path) not in source
    run.record_["data"]["train"] = str(tmp_path / "gone.tsv")  # a file no longer there: the sample, in the run's labels
    fallback = _fit_map(run, "run")
    assert set(fallback.labels) <= {"0", "1"} and "coloured by the run's predictions" in fallback.source
