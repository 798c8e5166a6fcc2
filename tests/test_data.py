"""Input readers: formats, headers, columns by index or name, and clear messages naming file and line."""

import csv
import io

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


def test_a_csv_quote_never_closed_names_the_line_it_opens_on(tmp_path):
    """csv's lenient reading took a stray quote's line and every line after it for one text, without a word."""
    path = write(tmp_path / "a.csv", 'a,b\n"x, y",1\n"two\nlines",2\n"unterminated,0\nz,1\nw,0\n')
    with pytest.raises(InputError, match=r'a.csv, line 5: a quote opened in this record is never closed.*""'):
        read_texts(path, "a")
    lenient = 'a,b\n"ok" ,1\n"x","y" \n"He said \\"hi\\"",2\n5" screen,3\n'  # sloppy, but each quote closes
    expected = [row[0] for row in csv.reader(io.StringIO(lenient))][1:]
    assert read_texts(write(tmp_path / "b.csv", lenient), "a")[0] == expected and expected[0] == "ok "
    assert read_texts(write(tmp_path / "c.csv", 'a,b\n"x, y",1\n"two\nlines",2\n"say ""hi""",3\n'), "a")[0] == [
        "x, y",
        "two\nlines",
        'say "hi"',
    ]


def test_jsonl_and_plain_text(tmp_path):
    jsonl = write(tmp_path / "a.jsonl", '{"text": "one"}\n\n{"text": "", "x": 1}\n')
    assert read_texts(jsonl)[0] == ["one", ""]
    txt = write(tmp_path / "a.txt", "first line\n\nthird\n")
    assert read_texts(txt)[0] == ["first line", "", "third"]


def test_missing_column_lists_the_columns(tmp_path):
    path = write(tmp_path / "a.csv", "sentence,label\nhi,1\n")
    with pytest.raises(
        InputError, match=r"a.csv, line 1: no column named 'text'; the header has \['sentence', 'label'\]"
    ):
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


@pytest.mark.parametrize("suffix, separator", [(".tsv", "\t"), (".csv", ",")])
def test_a_300k_character_field_is_a_valid_row(tmp_path, suffix, separator):
    """Above the csv module's default 131,072-character field limit, below bertkit's documented 50 MB cap."""
    long_text = ("word " * 60_000).strip()  # 299,999 characters
    path = write(tmp_path / f"long{suffix}", f"short one{separator}1\n{long_text}{separator}0\n")
    texts, _, lines = read_texts(path, 0)
    assert texts == ["short one", long_text] and len(texts[1]) == 299_999 and lines == [1, 2]


def test_a_field_over_the_cap_names_its_line(tmp_path, monkeypatch):
    import bertkit.io.readers as readers

    monkeypatch.setattr(readers, "MAX_FIELD_CHARS", 1000)  # as if the cap were 1000 characters
    previous = readers.csv.field_size_limit(1000)
    try:
        path = write(tmp_path / "a.csv", f"ok,1\n{'x' * 2000},0\n")
        with pytest.raises(
            InputError, match=r"a\.csv, line 2: a field is longer than bertkit's cap of 1,000 characters"
        ):
            read_texts(path, 0)
    finally:
        readers.csv.field_size_limit(previous)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["truncate", "window"])
def test_long_tsv_row_embeds_with_each_long_text_policy(tmp_path, tiny_dirs, policy):
    """A 300,000-character TSV row goes through `bertkit embed` like a JSONL row does (truncated or windowed)."""
    import numpy as np

    from bertkit import Encoder
    from bertkit.io.stream import embed_file

    encoder = Encoder.from_pretrained(tiny_dirs["bert_cased"])  # the readers are under test, not the model

    long_text = ("the film is long " * 17_700)[:300_000]
    tsv = write(tmp_path / "long.tsv", f"a short review\t1\n{long_text}\t0\n")
    jsonl = write(tmp_path / "long.jsonl", '{"text": "a short review"}\n' + f'{{"text": "{long_text}"}}\n')
    from_tsv = embed_file(encoder, tsv, tmp_path / "tsv.npy", long_text=policy, column=0)
    assert from_tsv.rows == 2 and (from_tsv.truncated, from_tsv.windowed) == (
        (1, 0) if policy == "truncate" else (0, 1)
    )
    if policy == "truncate":  # windowing 70k tokens twice is slow; the readers are what differ, and truncate shows it
        embed_file(encoder, jsonl, tmp_path / "jsonl.npy", long_text=policy, column="text")
        np.testing.assert_allclose(np.load(tmp_path / "tsv.npy"), np.load(tmp_path / "jsonl.npy"), atol=1e-6)
