"""Tokenization matches the model's own HF tokenizer; word ids map tokens to the user's words."""

import pytest

from bertkit import InputError, text_coverage

TEXTS = ["I love Korea", "Hello, world! This is New-York's finest.", "", "unbelievably tokenizable words"]


@pytest.mark.parametrize("padding", ["longest", "max_length"])
@pytest.mark.parametrize("max_length", [8, 32])
def test_same_ids_as_hf_tokenizer(encoder, hf_default, padding, max_length):
    tokenizer = hf_default[1]
    batch = encoder.tokenize(TEXTS, max_length=max_length, padding=padding)
    expected = tokenizer(TEXTS, padding=padding, truncation=True, max_length=max_length)
    assert batch.input_ids.tolist() == expected["input_ids"]
    assert batch.attention_mask.tolist() == expected["attention_mask"]
    assert batch.token_type_ids.tolist() == expected["token_type_ids"]
    assert batch.truncated == [len(tokenizer(t)["input_ids"]) > max_length for t in TEXTS]


def test_sentence_pairs_match_hf_and_mark_type_ids(encoder, hf_default):
    tokenizer = hf_default[1]
    firsts = ["how old are you?", "a very long first sentence with many many words in it"]
    seconds = ["I am six.", "short"]
    batch = encoder.tokenize(firsts, seconds, max_length=12)
    expected = tokenizer(firsts, seconds, padding="longest", truncation=True, max_length=12)
    assert batch.input_ids.tolist() == expected["input_ids"]
    assert batch.token_type_ids.tolist() == expected["token_type_ids"]
    assert set(batch.token_type_ids[0].tolist()) == {0, 1}
    row = batch.table(0)
    assert [r["type_id"] for r in row if r["token"] == "[SEP]"] == [0, 1]
    assert batch.word_ids[0][batch.tokens[0].index("six")] == 2  # word ids restart in the second sentence


@pytest.mark.parametrize("direction", ["right", "left"])
def test_long_pairs_are_cut_as_hf_cuts_them_with_bounded_work(hf_default, direction):
    """Longest-first truncation of long pairs keeps transformers' tokens and offsets (odd budgets, ties, either side),
    and a long query with a long document no longer makes one overflow window per pair of windows (132,486 before)."""
    import random
    import re

    from bertkit.encoder import tokenize as tok

    tokenizer, words = hf_default[1], TEXTS[1].split() + TEXTS[3].split() + ["Korea", "tokenizable", "a"]
    rng = random.Random(7)
    tokenizer.truncation_side = direction
    try:
        for _ in range(150):
            first, second = (" ".join(rng.choices(words, k=rng.randint(1, 300))) for _ in range(2))
            second = first if rng.random() < 0.1 else second  # ties: the second is the longer
            max_length = rng.choice([16, 33, 64, 128])
            expected = tokenizer(
                first, second, truncation="longest_first", max_length=max_length, return_offsets_mapping=True
            )
            [got] = tok.encode(tokenizer, [first], [second], max_length=max_length, direction=direction)
            assert list(got.ids) == expected["input_ids"], (len(first), len(second), max_length)
            spans = [[m.span() for m in re.finditer(r"\S+", text)] for text in (first, second)]
            words_read = [
                None if s is None else next(k for k, (a, b) in enumerate(spans[s]) if a <= start < b)
                for (start, _), s in zip(expected["offset_mapping"], expected.sequence_ids())
            ]
            assert got.word_ids() == words_read  # the offsets still point into the texts as given
        if direction == "right":  # the side pairs are read from (rank, predict); a left cut would move the offsets
            huge = " ".join(rng.choices(words, k=20_000))
            [got] = tok.encode(tokenizer, [huge], [huge + " more"], max_length=128)
            assert len(got.encoding.overflowing) < 50 and got.truncated and len(got.ids) == 128
    finally:
        tokenizer.truncation_side = "right"


def test_word_ids_map_tokens_to_whitespace_words(encoder):
    batch = encoder.tokenize(["New-York's unbelievably big"])
    tokens, words = batch.tokens[0], batch.word_ids[0]
    assert words[0] is None and words[-1] is None
    by_word = {}
    for token, word in zip(tokens, words):
        if word is not None:
            by_word.setdefault(word, []).append(token)
    assert by_word[0] == ["new", "-", "york", "'", "s"]
    assert "".join(t.lstrip("#") for t in by_word[1]) == "unbelievably" and len(by_word[1]) > 1
    assert by_word[2] == ["big"]


def test_pre_split_words_match_hf_is_split_into_words(encoder, hf_default):
    words = ["EU", "rejects", "German", "Britishness", "lambkins", "."]
    batch = encoder.tokenize([words])
    expected = hf_default[1](words, is_split_into_words=True)
    assert batch.input_ids[0].tolist() == expected["input_ids"]
    assert batch.word_ids[0] == expected.word_ids(0)


def test_truncation_off_keeps_everything(encoder):
    batch = encoder.tokenize(["word " * 20], max_length=8, truncation=False)
    assert batch.input_ids.shape[1] == 22 and batch.truncated == [False]


def test_table_has_the_tutorial_columns(encoder):
    rows = encoder.tokenize(["I love Korea"], max_length=7, padding="max_length").table(0)
    assert rows[1] == {"position": 1, "token": "i", "id": 1045, "mask": 1, "type_id": 0, "word": 0}
    assert rows[-1]["token"] == "[PAD]" and rows[-1]["mask"] == 0


def test_coverage_reports_unknown_share(encoder):
    english = text_coverage(encoder.tokenizer, ["I love Korea"])
    assert english.n_unknown == 0 and not english.poor
    korean = text_coverage(encoder.tokenizer, ["이 영화 재미없네요"])
    assert korean.n_unknown == 1 and korean.n_tokens == 8 and korean.unknown_share == pytest.approx(1 / 8)
    assert korean.decomposed and korean.poor
    assert "Korean" in korean.message()


def test_bad_tokenize_options(encoder):
    with pytest.raises(InputError, match="padding"):
        encoder.tokenize(["x"], padding="max")
    with pytest.raises(InputError, match="between 3 and 512"):
        encoder.tokenize(["x"], max_length=1000)
    with pytest.raises(InputError, match="one pair per text"):
        encoder.tokenize(["a", "b"], ["c"])
    with pytest.raises(InputError, match="not a string"):
        encoder.tokenize([3])
