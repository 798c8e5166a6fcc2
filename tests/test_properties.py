"""Properties that hold for generated inputs (hypothesis), not only for the cases someone thought of.

Texts: any Unicode (empty, control characters, emoji, RTL, CJK, very long) embeds under each long-text policy;
words map back to the user's words; vectors do not depend on batch size or order. Files: any table a standard writer
produces reads back the same rows; any truncated or garbled file is a `BertkitError` naming the file and line.
"""

import csv
import io
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bertkit import Encoder
from bertkit.errors import BertkitError, InputError
from bertkit.io.conll import read_tagged
from bertkit.io.readers import read_labelled, read_texts

# Example counts come from the hypothesis profile (tests/conftest.py): "ci" by default, `--hypothesis-profile=long`.
PROFILE = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Text as users paste it: any code point but surrogates, weighted towards the hard cases.
HARD_CHARACTERS = st.sampled_from(
    list(
        "\x00\x01\t\n\r\x0b\x0c\x1c\x85\u00a0\u200b\u200d\u2028\u2029\ufeff\ufffd"
        "🙂👍🏽👨‍👩‍👧 שלום مرحبا 東京 한국어 e\u0301 ﷽ 𝔘"
    )
)
TEXT = st.text(st.one_of(st.characters(exclude_categories=("Cs",)), HARD_CHARACTERS), max_size=300)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import tiny_models

    return Encoder.from_pretrained(str(tiny_models.tiny_bert(tmp_path_factory.mktemp("tiny") / "m", max_positions=32)))


def embed(encoder, texts, **options):
    return encoder.embed(texts, **options)


@PROFILE
@given(texts=st.lists(TEXT, min_size=1, max_size=6), policy=st.sampled_from(["truncate", "window", "error"]))
def test_any_text_embeds_under_each_long_text_policy(tiny, texts, policy):
    try:
        vectors = embed(tiny, texts, long_text=policy)
    except InputError as exc:
        assert policy == "error", exc  # only 'error' refuses a text, and it names the option that would take it
        assert "long_text" in str(exc) or "--long-text" in str(exc), exc
        return
    assert vectors.shape == (len(texts), tiny.hidden_size) and np.isfinite(vectors).all()


def test_a_100k_character_text_embeds_in_windows(tiny):
    text = ("한국어 text, עברית and 🙂 " * 5000)[:100_000]
    vectors = embed(tiny, [text, ""], long_text="window")
    assert vectors.shape == (2, tiny.hidden_size) and np.isfinite(vectors).all()


WORD = st.text(
    st.one_of(st.characters(exclude_categories=("Cs", "Zs", "Cc")), HARD_CHARACTERS), min_size=1, max_size=12
).filter(lambda w: w.strip())


@PROFILE
@given(
    sentences=st.lists(st.lists(WORD, min_size=1, max_size=12), min_size=1, max_size=4),
    policy=st.sampled_from(["truncate", "window"]),
)
def test_one_vector_per_word_and_word_ids_in_order(tiny, sentences, policy):
    vectors = tiny.embed_words(sentences, long_text=policy)
    assert [len(v) for v in vectors] == [len(words) for words in sentences]
    batch = tiny.tokenize(sentences)
    for row, words in enumerate(sentences):
        ids = [
            w
            for w, token in zip(batch.word_ids[row], batch.tokens[row])
            if token not in (tiny.tokenizer.cls_token, tiny.tokenizer.sep_token, tiny.tokenizer.pad_token)
        ]
        assert None not in ids
        assert ids == sorted(ids) and all(0 <= w < len(words) for w in ids)


@PROFILE
@given(texts=st.lists(TEXT, min_size=2, max_size=10), batch_size=st.integers(1, 7), seed=st.integers(0, 2**16))
def test_vectors_do_not_depend_on_batch_size_or_order(tiny, texts, batch_size, seed):
    order = np.random.default_rng(seed).permutation(len(texts))
    whole = embed(tiny, texts, batch_size=len(texts))
    shuffled = embed(tiny, [texts[i] for i in order], batch_size=batch_size)
    np.testing.assert_allclose(shuffled, whole[order], atol=2e-5, rtol=1e-4)


# ---- files --------------------------------------------------------------------------------------------------------
FIELD = st.text(
    st.one_of(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), HARD_CHARACTERS),
    min_size=1,
    max_size=40,
)
LABEL = st.sampled_from(["pos", "neg", "neutral", "0", "1"])
ROWS = st.lists(st.tuples(FIELD, LABEL), min_size=1, max_size=12)


def encode_file(text: str, bom: bool, crlf: bool) -> bytes:
    if crlf:
        text = text.replace("\n", "\r\n")
    return ("\ufeff" if bom else "").encode() + text.encode("utf-8")


@PROFILE
@given(rows=ROWS, bom=st.booleans(), crlf=st.booleans())
def test_csv_written_by_the_csv_module_reads_back(tmp_path, rows, bom, crlf):
    assume(all(field.strip() for field, _ in rows))
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["text", "label"])
    writer.writerows(rows)
    path = tmp_path / "t.csv"
    path.write_bytes(encode_file(buffer.getvalue(), bom, crlf=False))
    if crlf:  # a writer's own CRLF terminator (Excel, Windows), not a replacement inside quoted fields
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer, lineterminator="\r\n")
        writer.writerow(["text", "label"])
        writer.writerows(rows)
        path.write_bytes(encode_file(buffer.getvalue(), bom, crlf=False))
    data = read_labelled(path, "text", "label")
    assert data.texts == [text for text, _ in rows]
    assert [str(label) for label in data.labels] == [label for _, label in rows]


TSV_FIELD = FIELD.filter(lambda f: not any(c in f for c in "\t\n\r") and f.strip())


@PROFILE
@given(rows=st.lists(st.tuples(TSV_FIELD, LABEL), min_size=1, max_size=12), bom=st.booleans(), crlf=st.booleans())
def test_tsv_reads_back_every_field_a_tsv_can_hold(tmp_path, rows, bom, crlf):
    """TSV as GLUE writes it: a tab ends a field, a line ends a row, quotes are plain characters."""
    path = tmp_path / "t.tsv"
    path.write_bytes(encode_file("text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows), bom, crlf))
    data = read_labelled(path, "text", "label")
    assert data.texts == [text for text, _ in rows]
    assert data.lines == list(range(2, len(rows) + 2))


@PROFILE
@given(rows=ROWS, ascii_only=st.booleans(), bom=st.booleans(), crlf=st.booleans())
def test_jsonl_reads_back(tmp_path, rows, ascii_only, bom, crlf):
    assume(all(text.strip() for text, _ in rows))  # a blank text is refused at its line (the next properties)
    path = tmp_path / "t.jsonl"
    lines = "".join(json.dumps({"text": t, "label": label}, ensure_ascii=ascii_only) + "\n" for t, label in rows)
    path.write_bytes(encode_file(lines, bom, crlf))
    data = read_labelled(path)
    assert data.texts == [text for text, _ in rows]


@PROFILE
@given(
    lines=st.lists(FIELD.filter(lambda f: "\n" not in f and "\r" not in f), min_size=1, max_size=12),
    bom=st.booleans(),
    crlf=st.booleans(),
)
def test_plain_text_reads_one_text_per_line(tmp_path, lines, bom, crlf):
    path = tmp_path / "t.txt"
    path.write_bytes(encode_file("".join(f"{line}\n" for line in lines), bom, crlf))
    assert read_texts(path)[0] == lines


# ---- the pair, score and multi-label readers: the rows they say they took, or one error at the first bad line --------
CELL = st.text(
    st.one_of(
        st.characters(exclude_categories=("Cs",), exclude_characters="\x00\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
        st.sampled_from(list(" \"',|;")),
    ),
    max_size=20,
)
BLANK = st.sampled_from(["", " ", "  "])
LABEL_CELL = st.one_of(
    st.sampled_from(
        [
            "0",
            "1",
            "0.5",
            "-2.25",
            "1e3",
            "nan",
            "inf",
            "-inf",
            "3.",
            ".5",
            "pos",
            "neg",
            "a,b",
            "b|a",
            ",",
            "a, ,b",
            '"x"',
            "x;y",
        ]
    ),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    CELL,
    BLANK,
)
PAIR_ROWS = st.lists(st.tuples(st.one_of(CELL, BLANK), st.one_of(CELL, BLANK), LABEL_CELL), min_size=1, max_size=10)


def first_bad_line(rows, kind: str, separator: str) -> int | None:
    """The file line of the first row bertkit must refuse (line 1 is the first row: no header), by bertkit's rules."""
    for line, (text, pair, label) in enumerate(rows, start=1):
        if not text.strip() or not pair.strip():
            return line
        label = label.strip()
        if kind == "numeric":
            try:
                if not np.isfinite(float(label)):
                    return line
            except ValueError:
                return line
        elif kind == "categorical" and not label:
            return line
    return None


@PROFILE
@given(
    rows=PAIR_ROWS,
    kind=st.sampled_from(["categorical", "numeric", "multi"]),
    separator=st.sampled_from([",", "|", ";"]),
    bom=st.booleans(),
    crlf=st.booleans(),
)
def test_pair_score_and_label_set_files_read_as_said_or_fail_at_the_bad_line(
    tmp_path, rows, kind, separator, bom, crlf
):
    path = tmp_path / "pairs.tsv"
    path.write_bytes(encode_file("".join(f"{t}\t{p}\t{label}\n" for t, p, label in rows), bom, crlf))
    bad = first_bad_line(rows, kind, separator)
    try:
        data = read_labelled(path, paired=True, header=False, label_kind=kind, label_separator=separator)
    except BertkitError as exc:
        message = str(exc)
        assert bad is not None, message
        assert f"{path}, line {bad}:" in message and "\n" not in message, (bad, message)
        return
    assert bad is None, f"line {bad} should have been refused"
    assert data.texts == [t for t, _, _ in rows] and data.pairs == [p for _, p, _ in rows]
    assert data.lines == list(range(1, len(rows) + 1))
    for (_, _, cell), label in zip(rows, data.labels):
        if kind == "numeric":
            assert label == float(cell.strip())
        elif kind == "multi":
            assert label == tuple(sorted({part.strip() for part in cell.strip().split(separator) if part.strip()}))
        else:
            assert label == cell.strip()


def valid_files(tmp_path):
    files = {
        "t.tsv": "text\tlabel\na good film\tpos\nawful\tneg\n",
        "t.csv": 'text,label\n"a ""good"", long\nfilm",pos\nawful,neg\n',
        "t.jsonl": '{"text": "a good film", "label": "pos"}\n{"text": "awful", "label": "neg"}\n',
        "t.txt": "a good film\nawful\n",
        "t.conll": "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n",
    }
    paths = {}
    for name, text in files.items():
        paths[name] = tmp_path / name
        paths[name].write_text(text, encoding="utf-8")
    return paths


def read_any(path):
    if path.suffix == ".conll":
        return read_tagged(path)
    if path.suffix == ".txt":
        return read_texts(path)
    return read_labelled(path, "text", "label")


@PROFILE
@given(name=st.sampled_from(["t.tsv", "t.csv", "t.jsonl", "t.txt", "t.conll"]), data=st.data())
def test_a_truncated_or_garbled_file_is_one_clear_error(tmp_path, name, data):
    path = valid_files(tmp_path)[name]
    raw = bytearray(path.read_bytes())
    damage = data.draw(st.sampled_from(["truncate", "flip", "insert"]))
    at = data.draw(st.integers(0, len(raw)))
    if damage == "truncate":
        raw = raw[:at]
    elif damage == "flip":
        raw[min(at, len(raw) - 1)] = data.draw(st.integers(0, 255))
    else:
        raw[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    path.write_bytes(bytes(raw))
    try:
        read_any(path)
    except BertkitError as exc:
        message = str(exc)
        assert str(path) in message, message
        said = ("line", "no data rows", "empty", "this is a binary file", "UTF-16")  # where, or what the file is
        assert any(what in message for what in said), message
        assert "\n" not in message.strip(), message
