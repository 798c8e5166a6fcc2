"""Regression tests for what a new user tripped over in the second hour (issue 33)."""

import sys

import pytest
import warm

from bertkit import text_coverage


def test_flags_show_no_type_in_help():
    """Before: Rich's help panels printed `--version <bool>`, `--help <bool>`, as if those flags took a value."""
    for args in (["--help"], ["embed", "--help"], ["finetune", "--help"], ["serve", "--help"], ["answer", "--help"]):
        shown = warm.run(
            [sys.executable, "-m", "bertkit.cli", *args], capture_output=True, text=True, check=True, timeout=120
        ).stdout
        assert "<bool>" not in shown and "<list" not in shown, shown  # repeatable options name what they take
        assert "--help" in shown and "Show this message and exit." in shown
    assert "--question TEXT" in shown  # the last: `answer --help`


@pytest.mark.parametrize(
    "text",
    ["disjointed parody", "woefully pretentious", "predictably melodramatic", "I loved it 🙂", "Croft 29-6-64-1"],
)
def test_rare_english_words_are_not_poor_coverage(encoder, text):
    """Before: rare English words split into word pieces ("dis ##jo ##int ##ed") told the user to switch to a
    multilingual model; so did an emoji's one [UNK] and cricket figures (benchmarks/coverage.py: SST-2 7 rows,
    CoNLL-2003 6.6% of its rows flagged; now none)."""
    report = text_coverage(encoder.tokenizer, [text])
    assert not report.poor and "WARNING" not in report.message(), report.message()


@pytest.mark.parametrize("texts", [["🙂"], ["🙂🙂 ☃"], ["🙂", "☃☃"]])
def test_a_text_of_nothing_but_unk_is_poor_coverage(encoder, texts):
    """One emoji among words is not poor coverage, but a text that is all [UNK] embeds as nothing but [UNK]: its
    vector says nothing of it (before: a one-token text of 100 % [UNK] passed without a word)."""
    report = text_coverage(encoder.tokenizer, texts)
    assert report.poor and "every token is [UNK]" in report.message(), report.message()
    assert report.poor_rows == list(range(len(texts)))


@pytest.mark.parametrize(
    "text", ["나는 한국을 사랑해요", "Я люблю этот фильм", "ฉันชอบภาพยนตร์เรื่องนี้มาก", "أحب هذا الفيلم كثيرا"]
)
def test_text_in_another_script_is_poor_coverage_row_by_row(encoder, text):
    """Each row is judged with its own script (before: a row's script was not passed, so only jamo and [UNK]s
    counted, and a Russian row in an English vocabulary passed)."""
    assert text_coverage(encoder.tokenizer, [text]).poor, text_coverage(encoder.tokenizer, [text]).message()
    assert text_coverage(encoder.tokenizer, [text, "a plain English sentence"]).poor_rows == [0]


def test_a_run_finds_its_training_file_from_any_folder(monkeypatch, capsys, tmp_path, encoder):
    """Before: `train reviews.tsv` recorded 'reviews.tsv'; the explainer, started in another folder, lost the run's
    map ("its training file is not reachable here") and fell back to sample reviews whose labels were another set."""
    from conftest import run_cli

    from bertkit.explain.explainer import Explainer

    (tmp_path / "work").mkdir()
    rows = [f"a good film number {i}\t1" for i in range(8)] + [f"a bad film number {i}\t0" for i in range(8)]
    (tmp_path / "work" / "reviews.tsv").write_text("\n".join(rows) + "\n")
    monkeypatch.chdir(tmp_path / "work")
    args = ["train", "reviews.tsv", "--dev", "reviews.tsv", "-o", "run", "-l", "last", "--C", "1"]
    assert run_cli(monkeypatch, capsys, *args)[0] == 0
    monkeypatch.chdir(tmp_path)
    explainer = Explainer.from_paths(encoder=encoder, run_dirs=[str(tmp_path / "work" / "run")])
    shown = explainer.map_view("run", "a good film")
    assert shown["n"] == 16 and "training file" in shown["source"] and str(tmp_path) not in shown["source"]
    # the groups come in the run's class order: the order (and so the colours) of `train --report`'s pca.png
    assert [g["label"] for g in shown["groups"]] == ["0", "1"]

    run = explainer.runs["run"]
    run.record_["data"]["train"] = str(tmp_path / "gone.tsv")  # a file no longer there: the sample, in the run's labels
    fallback = Explainer(encoder, runs={"run": run}).map_view("run", "a good film")
    assert {g["label"] for g in fallback["groups"]} <= {"0", "1"}
    assert "coloured by the run's predictions" in fallback["source"]


@pytest.mark.slow
def test_the_page_without_a_run_says_so_calmly_in_both_forms(tmp_path):
    """Before: with no run, panel 4 was a red error box while panels 5 and 6 were neutral notes, and the saved file
    asked the reader to type into a box it had disabled."""
    from servers import Server as Served
    from test_explain import CHROMIUM, CHROMIUM_ARGS, Watched

    sync_api = pytest.importorskip("playwright.sync_api")
    output = tmp_path / "explain.html"
    done = warm.run(
        [sys.executable, "-m", "bertkit.cli", "explain", "I love Korea", "-o", str(output)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    served = Served()
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for form, url in [("saved", output.as_uri()), ("live", served.url + "/")]:
                watched = Watched(browser)
                if form == "saved":
                    watched.page.goto(url)
                    watched.page.wait_for_function("document.body.dataset.updated === 'offline'", timeout=60_000)
                else:
                    watched.update(lambda url=url, watched=watched: watched.page.goto(url))
                page = watched.page
                for panel in ("map", "prediction", "probe"):
                    assert page.locator(f"#panel-{panel} .error").is_hidden(), panel
                    assert page.locator(f"#panel-{panel} .note").is_visible(), panel
                assert "No feature-classifier run is loaded" in page.locator("#map-source").inner_text()
                assert page.locator("#map").is_hidden()
                cosine = page.locator("#cosine").inner_text()
                if form == "saved":
                    assert "No second sentence was saved" in cosine and "Type" not in cosine
                else:  # the live page opens on an example pair of sentences
                    assert cosine.startswith("cosine(")
                page.screenshot(path=str(tmp_path / f"{form}.png"), full_page=True)
                assert watched.errors == []
                page.close()
            browser.close()
    finally:
        served.stop()
