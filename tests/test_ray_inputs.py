"""`bertkit embed --engine ray` and the local engine read every input alike: the same rows, ids and vectors for text
(form feeds, U+2028, lone and paired carriage returns, blank lines), TSV, CSV (quoted newlines, numbers, NA), JSONL,
Parquet shards of a few hundred rows, single files, folders and globs, absolute and relative paths."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

pytest.importorskip("ray", reason="the Ray engine needs the extra: pip install 'bertkit[ray]'")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


TEXT_FILE = (
    "first line\x0cwith a form feed\r\n"
    "second\u2028still the second line\n"
    "\n"
    "   \n"
    "a carriage\rreturn inside\n"
    "the last line has no newline"
)
TEXT_ROWS = [
    "first line\x0cwith a form feed",
    "second\u2028still the second line",
    "",
    "   ",
    "a carriage\rreturn inside",
    "the last line has no newline",
]
TSV_FILE = "id\ttext\r\nr1\tform\x0cfeed\r\n\r\nr2\tline\u2028separator\r\nr3\t123\n"
TSV_ROWS = {"r1": "form\x0cfeed", "r2": "line\u2028separator", "r3": "123"}
CSV_FILE = 'key,text\n1,"quoted, with a comma"\n2,"two\nlines"\n3,NA\n\n4,1.5\r\n'
CSV_ROWS = {"1": "quoted, with a comma", "2": "two\nlines", "3": "NA", "4": "1.5"}
JSONL_ROWS = {"7": "a line\u2028separator inside a string", "8": "a form\x0cfeed", "9": "plain"}
SHARDS, SHARD_ROWS = 3, 300


def write_inputs(root: Path) -> dict[str, dict[str, str]]:
    """Every kind of input under `root`; returns {file stem: {id: text}} as `bertkit embed` must read them."""
    (root / "lines.txt").write_bytes(TEXT_FILE.encode())
    (root / "table.tsv").write_bytes(TSV_FILE.encode())
    (root / "sheet.csv").write_bytes(CSV_FILE.encode())
    records = [json.dumps({"key": int(k), "text": t}, ensure_ascii=False) for k, t in JSONL_ROWS.items()]
    (root / "records.jsonl").write_text(records[0] + "\n\n" + "\n".join(records[1:]) + "\n", encoding="utf-8")
    (root / "shards").mkdir()
    expected = {
        "lines": {str(i): t for i, t in enumerate(TEXT_ROWS)},
        "table": TSV_ROWS,
        "sheet": CSV_ROWS,
        "records": JSONL_ROWS,
    }
    for shard in range(SHARDS):
        texts = [f"shard {shard} row {i}: a short review number {i * 7 % 31}" for i in range(SHARD_ROWS)]
        docs = [shard * 1000 + i for i in range(SHARD_ROWS)]
        pq.write_table(pa.table({"doc": docs, "text": texts}), root / "shards" / f"part{shard}.parquet")
        expected[f"part{shard}"] = {str(d): t for d, t in zip(docs, texts)}
    return expected


# (what to pass as INPUT, relative to the inputs folder or absolute, the reader options, the files it covers)
CASES = {
    "text-relative": ("lines.txt", [], ["lines"]),
    "tsv-relative": ("table.tsv", ["--text-column", "text", "--id-column", "id"], ["table"]),
    "csv-absolute": ("/sheet.csv", ["--text-column", "text", "--id-column", "key"], ["sheet"]),
    "jsonl-relative": ("records.jsonl", ["--text-column", "text", "--id-column", "key"], ["records"]),
    "jsonl-default-field": ("records.jsonl", [], ["records"]),
    "parquet-folder-relative": ("shards", ["--text-column", "text", "--id-column", "doc"], ["part0", "part1", "part2"]),
    "parquet-glob-absolute": ("/shards/*.parquet", ["--text-column", "text"], ["part0", "part1", "part2"]),
}


def read_vectors(path: Path) -> dict[str, np.ndarray]:
    table = pq.read_table(path)
    vectors = np.stack(table.column("vector").to_numpy(zero_copy_only=False)).astype(np.float32)
    return {str(i): v for i, v in zip(table.column("id").to_pylist(), vectors)}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.usefixtures("head")
def test_ray_reads_every_input_as_the_local_engine_does(case, tmp_path, monkeypatch, capsys, encoder):
    inputs = tmp_path / "in"
    inputs.mkdir()
    expected = write_inputs(inputs)
    given, options, stems = CASES[case]
    monkeypatch.chdir(inputs)
    source = str(inputs) + given if given.startswith("/") else given
    code, _, err = run_cli(
        monkeypatch, capsys, "embed", source, *options, "--engine", "ray", "-q", "-o", tmp_path / "ray"
    )
    assert code == 0, err
    for stem in stems:
        if "--id-column" not in options:  # ids are row numbers
            expected[stem] = {str(i): t for i, t in enumerate(expected[stem].values())}
        ids, texts = list(expected[stem]), list(expected[stem].values())
        on_ray = read_vectors(tmp_path / "ray" / stem)
        assert sorted(on_ray) == sorted(ids), f"{stem}: other rows or ids on Ray"
        reference = encoder.embed(texts)
        np.testing.assert_allclose(np.stack([on_ray[i] for i in ids]), reference, atol=1e-5, rtol=0)
        local_input = next(p for p in inputs.rglob(f"{stem}.*"))
        if local_input.suffix == ".parquet":
            continue  # the local engine reads text, TSV, CSV and JSONL
        code, _, err = run_cli(
            monkeypatch,
            capsys,
            "embed",
            local_input.relative_to(inputs),
            *options,
            "-q",
            "-o",
            tmp_path / f"{stem}.parquet",
        )
        assert code == 0, err
        local = read_vectors(tmp_path / f"{stem}.parquet")
        assert list(local) == ids, f"{stem}: the local engine read other rows"
        np.testing.assert_allclose(
            np.stack([on_ray[i] for i in ids]), np.stack(list(local.values())), atol=1e-5, rtol=0
        )


@pytest.mark.slow
@pytest.mark.usefixtures("head")
def test_a_folder_of_every_format_gives_one_output_per_file(tmp_path, encoder):
    from bertkit.ray import embed_files

    expected = write_inputs(tmp_path)
    for name in ("lines.txt", "table.tsv", "sheet.csv", "records.jsonl"):  # beside the shards: one of each format
        (tmp_path / name).rename(tmp_path / "shards" / name)
    summary = embed_files(tmp_path / "shards", tmp_path / "out", column="text", rows_per_call=128)
    assert sorted(summary.files) == ["lines", "part0", "part1", "part2", "records", "sheet", "table"]
    for stem in summary.files:
        texts = list(expected[stem].values())
        got = read_vectors(tmp_path / "out" / stem)
        assert sorted(got, key=int) == [str(i) for i in range(len(texts))]
        np.testing.assert_allclose(
            np.stack([got[str(i)] for i in range(len(texts))]), encoder.embed(texts), atol=1e-5, rtol=0
        )


def test_a_file_name_for_the_ray_output_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    (tmp_path / "in.txt").write_text("one\ntwo\n")
    for name in ("out.npy", "out.parquet"):
        code, _, err = run_cli(
            monkeypatch, capsys, "embed", tmp_path / "in.txt", "--engine", "ray", "-o", tmp_path / name
        )
        assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")
        assert "writes a folder" in err and not (tmp_path / name).exists()


def test_an_existing_output_folder_is_refused_before_any_work_and_left_as_it_is(monkeypatch, capsys, tmp_path):
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "texts.txt").write_text("a\nb\n")
    results = tmp_path / "results"
    (results / "texts").mkdir(parents=True)
    (results / "texts" / "analysis.md").write_text("my analysis")
    code, _, err = run_cli(
        monkeypatch, capsys, "embed", tmp_path / "inputs" / "texts.txt", "--engine", "ray", "-o", results
    )
    assert code == 2 and "results already exists; nothing was touched" in err and "--overwrite" in err, err
    assert [p.name for p in results.rglob("*")] == ["texts", "analysis.md"]
    assert (results / "texts" / "analysis.md").read_text() == "my analysis"
