"""Input readers: formats, headers, columns by index or name, and clear messages naming file and line."""

import pytest

from bertkit import InputError
from bertkit.io.readers import read_texts


def write(path, text, mode="w"):
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_tsv_without_header_by_index(tmp_path):
    path = write(tmp_path / "a.tsv", 'a "quoted" film\t1\n\t0\nsecond one\t1\n')
    texts, ids, lines = read_texts(path, 0)
    assert texts == ['a "quoted" film', "", "second one"]  # quotes kept, empty text valid
    assert lines == [1, 2, 3] and ids == [0, 1, 2]


def test_csv_with_header_by_name_and_ids(tmp_path):
    path = write(tmp_path / "a.csv", 'id,sentence,label\nx1,"hello, world",1\n\nx2,bye,0\n')
    texts, ids, lines = read_texts(path, "sentence", id_column="id")
    assert texts == ["hello, world", "bye"] and ids == ["x1", "x2"] and lines == [2, 4]


def test_jsonl_and_plain_text(tmp_path):
    jsonl = write(tmp_path / "a.jsonl", '{"text": "one"}\n\n{"text": "", "x": 1}\n')
    assert read_texts(jsonl)[0] == ["one", ""]
    txt = write(tmp_path / "a.txt", "first line\n\nthird\n")
    assert read_texts(txt)[0] == ["first line", "", "third"]


def test_missing_column_lists_the_columns(tmp_path):
    path = write(tmp_path / "a.csv", "sentence,label\nhi,1\n")
    with pytest.raises(InputError, match=r"a.csv: no column named 'text'; the columns are \['sentence', 'label'\]"):
        read_texts(path, "text")
    tsv = write(tmp_path / "b.tsv", "hi\t1\n")
    with pytest.raises(InputError, match="column 5 does not exist; the file has 2 columns"):
        read_texts(tsv, 5)


def test_short_row_names_its_line(tmp_path):
    path = write(tmp_path / "a.tsv", "a\t1\nb\t0\nc\n")
    with pytest.raises(InputError, match=r"a.tsv, line 3: 1 fields, but column 1"):
        read_texts(path, 1)


def test_empty_file(tmp_path):
    with pytest.raises(InputError, match="no data rows"):
        read_texts(write(tmp_path / "e.tsv", ""), 0)
    with pytest.raises(InputError, match="no data rows"):
        read_texts(write(tmp_path / "h.csv", "text,label\n"), "text")


def test_non_utf8_bytes_name_the_line(tmp_path):
    path = write(tmp_path / "l.tsv", "fine\t1\ncaf\xe9\t0\n".encode("latin-1"), "wb")
    with pytest.raises(InputError, match=r"l.tsv, line 2: bytes that are not UTF-8 at column 4"):
        read_texts(path, 0)


def test_null_and_non_string_json_values(tmp_path):
    path = write(tmp_path / "n.jsonl", '{"text": "ok"}\n{"text": null}\n')
    with pytest.raises(InputError, match=r"n.jsonl, line 2: 'text' is empty \(null/NaN\)"):
        read_texts(path)
    path = write(tmp_path / "m.jsonl", '{"text": 3}\n')
    with pytest.raises(InputError, match="line 1: the text is a int"):
        read_texts(path)
    path = write(tmp_path / "k.jsonl", '{"body": "x"}\n')
    with pytest.raises(InputError, match=r"no field 'text'; the fields are \['body'\]"):
        read_texts(path)
    path = write(tmp_path / "bad.jsonl", '{"text": "x"\n')
    with pytest.raises(InputError, match="line 1: not valid JSON"):
        read_texts(path)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_texts(tmp_path / "absent.tsv")
