"""The first hour (issue 22): bertkit says what it took, and a table without --text-column is read as a person would."""

import logging

import numpy as np
import pytest
from conftest import run_cli

from bertkit.errors import InputError
from bertkit.io.columns import choose_text_column


def test_embed_a_csv_with_a_header_reads_the_text_column_and_says_so(monkeypatch, capsys, tmp_path, encoder):
    sentences = [f"this is review number {i} of a film" for i in range(200)]
    source = tmp_path / "data.csv"
    source.write_text("id,sentence,label\n" + "".join(f"{i},{s},{i % 2}\n" for i, s in enumerate(sentences)))
    code, _, err = run_cli(monkeypatch, capsys, "embed", source, "-o", tmp_path / "v.npy")
    assert code == 0, err
    assert "reading column 'sentence' (line 1 is a header)" in err
    vectors = np.load(tmp_path / "v.npy")
    assert vectors.shape == (200, 384)  # not 201: the header is not a text
    np.testing.assert_allclose(vectors[:3], encoder.embed(sentences[:3]), atol=1e-5)


@pytest.mark.parametrize(
    "content, expected",
    [
        ("a stirring funny film\t1\nthe plot is a mess\t0\n", (0, False)),  # SST-2: no header, texts first
        ("label\treview\n1\ta stirring funny film\n0\tawful\n", ("review", True)),
        ("doc_id,body\nA1,a long text about films and plots\nA2,another long one\n", ("body", True)),
        ("key,notes\nk1,a fairly long free text field here\nk2,and another free text here\n", ("notes", True)),
    ],
)
def test_the_text_column_is_detected(tmp_path, content, expected):
    path = tmp_path / ("t.tsv" if "\t" in content else "t.csv")
    path.write_text(content)
    choice = choose_text_column(path)
    assert (choice.column, choice.header) == expected


def test_an_unclear_table_is_refused_with_its_columns(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("x,y\n1,2\n3,4\n")
    with pytest.raises(
        InputError, match=r"which column holds the texts\? the header has \['x', 'y'\]; pass --text-column"
    ):
        choose_text_column(path)


def test_blank_lines_are_embedded_and_named(monkeypatch, capsys, tmp_path):
    (tmp_path / "t.txt").write_text("one text\n\nanother\n   \n")
    code, _, err = run_cli(monkeypatch, capsys, "embed", tmp_path / "t.txt", "-o", tmp_path / "v.npy")
    assert code == 0 and "2 blank texts were embedded as empty texts (lines 2, 4)" in err
    assert np.load(tmp_path / "v.npy").shape[0] == 4


def test_a_short_first_text_is_not_taken_for_a_header(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("great film\tpos\nthe plot is a mess and the acting worse\tneg\na long slow dull story\tneg\n")
    assert choose_text_column(path).header is False


def test_finetune_takes_the_command_line_settings_as_keywords(tiny_dirs, tmp_path):
    import json

    from test_finetune import sentiment_file

    from bertkit import finetune

    data = sentiment_file(tmp_path / "train.tsv", n=16)
    finetune(
        data,
        output_dir=tmp_path / "run",
        model=str(tiny_dirs["bert_cased"]),
        num_train_epochs=1,
        lr=5e-5,
        batch_size=4,
        dev_share=0.25,
    )
    saved = json.loads((tmp_path / "run" / "bertkit.json").read_text())["args"]
    assert (saved["num_train_epochs"], saved["learning_rate"], saved["batch_size"]) == (1, 5e-5, 4)
    with pytest.raises(InputError, match="unknown setting 'epoch'"):
        finetune(data, output_dir=tmp_path / "other", epoch=1)


def test_a_run_that_learned_nothing_says_so(tiny_dirs, tmp_path, caplog):
    import json

    from test_finetune import sentiment_file

    from bertkit import finetune

    data = sentiment_file(tmp_path / "train.tsv", n=32)
    finetune(
        data,
        output_dir=tmp_path / "flat",
        model=str(tiny_dirs["bert_cased"]),
        num_train_epochs=1,
        lr=1e-12,
        dev_share=0.25,
    )
    record = json.loads((tmp_path / "flat" / "bertkit.json").read_text())
    assert record["baseline"]["learned"] is False
    assert record["baseline"]["score"] == 0.5 and "majority label" in record["baseline"]["what"]
    warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "learned nothing useful" in warning and "--epochs" in warning and "--lr" in warning

    caplog.clear()
    finetune(
        sentiment_file(tmp_path / "more.tsv", n=128),
        output_dir=tmp_path / "learned",
        model=str(tiny_dirs["bert_cased"]),
        num_train_epochs=6,
        early_stopping_patience=6,
        lr=3e-3,
        batch_size=8,
        warmup_ratio=0.0,
        dev_share=0.25,
    )
    record = json.loads((tmp_path / "learned" / "bertkit.json").read_text())
    assert record["baseline"]["learned"] is True, (record["baseline"], record["metrics"])
    assert not any(r.levelno >= logging.WARNING for r in caplog.records)


def test_embed_names_truncated_and_poorly_covered_rows_by_line(monkeypatch, capsys, tmp_path):
    source = tmp_path / "t.txt"
    source.write_text("a fine film\n" + "word " * 300 + "\n이 영화 재미없네요 정말\nanother fine film\n")
    code, _, err = run_cli(monkeypatch, capsys, "embed", source, "-o", tmp_path / "v.npy")
    assert code == 0, err
    assert "1 texts were truncated to 256 tokens (line 2)" in err
    assert "1 rows are poorly covered by this model's vocabulary (line 3)" in err and "for Korean" in err


def test_long_text_error_names_the_file_line_and_the_option(monkeypatch, capsys, tmp_path):
    source = tmp_path / "t.txt"
    source.write_text("a fine film\n" + "word " * 300 + "\n")
    code, _, err = run_cli(monkeypatch, capsys, "embed", source, "-o", tmp_path / "v.npy", "--long-text", "error")
    assert code == 2 and f"error: {source}, line 2: 302 tokens, more than the limit of 256" in err
    assert "--long-text truncate" in err and not (tmp_path / "v.npy").exists()


# ---- one rule per option: --run [NAME=]DIR for serve and explain -------------------------------------------------
def test_run_specs_take_a_bare_folder_or_a_name(tmp_path):
    from bertkit.tasks.runs import parse_run_specs

    (tmp_path / "sst2").mkdir()
    (tmp_path / "a=b").mkdir()  # an existing folder whose name holds '=' is a folder, named with NAME=DIR
    specs = [str(tmp_path / "sst2"), f"other={tmp_path / 'sst2'}", f"ab={tmp_path / 'a=b'}"]
    assert parse_run_specs(specs) == {"sst2": tmp_path / "sst2", "other": tmp_path / "sst2", "ab": tmp_path / "a=b"}
    with pytest.raises(InputError, match="give one with NAME=DIR"):
        parse_run_specs([str(tmp_path / "a=b")])
    with pytest.raises(InputError, match="given twice"):
        parse_run_specs([str(tmp_path / "sst2"), f"sst2={tmp_path}"])
    with pytest.raises(InputError, match="letters, digits"):
        parse_run_specs([f"bad name={tmp_path}"])


def test_serve_and_explain_read_runs_with_the_same_parser():
    import inspect

    from bertkit.explain import explainer
    from bertkit.serve import app

    assert "parse_run_specs" in inspect.getsource(app.build_app) and "parse_run_specs" in inspect.getsource(
        explainer.Explainer.from_paths
    )


def test_info_lists_the_probes_on_the_page(encoder):
    from fastapi.testclient import TestClient

    from bertkit.serve import create_app

    app = create_app(encoder)
    app.state.explain_probes = {"layers-sst2": {"task": "text"}}
    with TestClient(app) as client:
        info = client.get("/info").json()
    assert info["probes"] == ["layers-sst2"] and info["runs"] == []


# ---- bench tells the truth on any input ----------------------------------------------------------------------------
def test_where_time_goes_never_has_negative_parts(encoder):
    from test_bench import bench

    for texts in (["a"], ["a fine film"] * 3, [("word " * 200).strip()] * 4):
        split = bench.where_time_goes(encoder, texts, batch_size=32)
        assert all(seconds >= 0 for seconds in split.values()), split
        assert split["tokenize"] + split["forward"] <= split["total"] + 1e-6


def test_bench_on_a_tiny_input_says_it_is_too_small(encoder, monkeypatch):
    from test_bench import bench

    # two texts take milliseconds; a busy machine can stretch that past the 0.2 s line, never past 5 s
    monkeypatch.setattr(bench, "TOO_SHORT_S", 5.0)
    lines: list[str] = []
    bench.run_benchmark(
        encoder, ["a fine film", "awful"], repeats=3, include_peers=False, echo=lines.append, precisions="fp32"
    )
    text = "\n".join(lines)
    assert "too short to time reliably" in text and "\r" not in text and "it/s" not in text
    fp32 = next(line for line in lines if line.startswith("bertkit fp32"))
    share = fp32.split()[-5]
    assert share.endswith("%") and 0 <= float(share.rstrip("%")) <= 100 or share == ">pk*", fp32
