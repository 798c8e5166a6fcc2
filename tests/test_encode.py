"""Encoder outputs equal hand computations from plain transformers, for every layer and pooling choice."""

import numpy as np
import pytest
import torch

from bertkit import EmbedOptions, Encoder, InputError

TEXTS = [
    "I love Korea",
    "a visually stunning rumination on love , and a very, very long sentence that needs more tokens than the others",
    "",
    "EU rejects German call to boycott British lamb.",
    "the plot is a mess",
]
LAYER_CASES = {  # spec → function of the hidden-states tuple
    "last": lambda h: h[-1],
    "0": lambda h: h[0],
    "-2": lambda h: h[-2],
    "second_to_last": lambda h: h[-2],
    "3": lambda h: h[3],
    "last4:sum": lambda h: sum(h[-4:]),
    "last4:mean": lambda h: torch.stack(h[-4:]).mean(0),
    "last4:concat": lambda h: torch.cat([h[-1], h[-2], h[-3], h[-4]], -1),
    "-1,-2,-3,-4": lambda h: torch.cat([h[-1], h[-2], h[-3], h[-4]], -1),
    "-1,0:sum": lambda h: h[-1] + h[0],
    "all:mean": lambda h: torch.stack(h).mean(0),
    "all:sum": lambda h: sum(h),
    "all:concat": lambda h: torch.cat(h, -1),
}
POOL_CASES = {
    "cls": lambda x, out: x[0],
    "mean": lambda x, out: x.mean(0),
    "max": lambda x, out: x.max(0).values,
}


def hand_states(hf, text):
    model, tokenizer = hf
    inputs = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        return model(**inputs, output_hidden_states=True)


@pytest.fixture(scope="module")
def references(hf_default):
    return [hand_states(hf_default, t) for t in TEXTS]


@pytest.mark.parametrize("layers", LAYER_CASES)
@pytest.mark.parametrize("pooling", POOL_CASES)
def test_sentence_vectors_equal_transformers(encoder, references, layers, pooling):
    got = encoder.embed(TEXTS, layers=layers, pooling=pooling, batch_size=2, normalize_embeddings=False)
    expected = np.stack(
        [POOL_CASES[pooling](LAYER_CASES[layers](out.hidden_states)[0], out).numpy() for out in references]
    )
    assert got.dtype == np.float32
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_pooler_and_combined_pooling_equal_transformers(encoder, references):
    got = encoder.embed(TEXTS, pooling="pooler")
    np.testing.assert_allclose(got, np.concatenate([o.pooler_output.numpy() for o in references]), atol=1e-5, rtol=0)
    both = encoder.embed(TEXTS, pooling="cls+mean")
    expected = np.stack(
        [torch.cat([o.last_hidden_state[0, 0], o.last_hidden_state[0].mean(0)]).numpy() for o in references]
    )
    np.testing.assert_allclose(both, expected, atol=1e-5, rtol=0)
    assert encoder.output_dim(EmbedOptions(layers="last4:concat", pooling="cls+mean")) == 384 * 4 * 2


def test_seed_example_forward_shapes(encoder, references):
    batch = encoder.tokenize(["I love Korea"], max_length=7, padding="max_length")
    assert batch.input_ids.tolist() == [[101, 1045, 2293, 4420, 102, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0, 0]]
    assert batch.tokens == [["[CLS]", "i", "love", "korea", "[SEP]", "[PAD]", "[PAD]"]]
    out = encoder.forward(batch)
    assert tuple(out.last_hidden_state.shape) == (1, 7, 384)
    assert tuple(out.pooler_output.shape) == (1, 384)
    assert len(out.hidden_states) == 7
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)
    assert not out.last_hidden_state.requires_grad
    alone = references[0]  # "I love Korea" through plain transformers, unpadded
    np.testing.assert_allclose(
        out.last_hidden_state[0, :5].numpy(), alone.last_hidden_state[0].numpy(), atol=1e-5, rtol=0
    )
    np.testing.assert_allclose(out.pooler_output.numpy(), alone.pooler_output.numpy(), atol=1e-5, rtol=0)


def test_padding_never_leaks_into_mean_or_max(encoder, references):
    """A text padded to 40 tokens in a batch pools exactly like the text alone."""
    padded = encoder.embed(["I love Korea", "word " * 35], pooling="mean+max", batch_size=2)[0]
    alone = references[0].last_hidden_state[0]
    np.testing.assert_allclose(padded, torch.cat([alone.mean(0), alone.max(0).values]).numpy(), atol=1e-5, rtol=0)


def test_batch_size_and_order_do_not_change_results(encoder):
    rng = np.random.default_rng(0)
    words = ["the", "movie", "was", "a", "great", "and", "terrible", "thing", "to", "watch", "on", "a", "rainy", "day"]
    texts = [" ".join(rng.choice(words, size=rng.integers(1, 30))) for _ in range(70)]
    one = encoder.embed(texts, layers="last4:concat", pooling="mean", batch_size=1)
    many = encoder.embed(texts, layers="last4:concat", pooling="mean", batch_size=64)
    assert np.abs(one - many).max() <= 1e-5
    permutation = rng.permutation(len(texts))
    shuffled = encoder.embed([texts[i] for i in permutation], layers="last4:concat", pooling="mean", batch_size=16)
    assert np.abs(shuffled - one[permutation]).max() <= 1e-5


def test_token_vectors_with_tokens(encoder, references, hf_default):
    result = encoder.embed_tokens(TEXTS, layers="last")
    for item, out, text in zip(result, references, TEXTS):
        assert item.tokens == hf_default[1](text).tokens()
        np.testing.assert_allclose(item.vectors, out.last_hidden_state[0].numpy(), atol=1e-5, rtol=0)
    assert result[0].word_ids == [None, 0, 1, 2, None]


@pytest.mark.parametrize("method", ["first", "last", "mean", "first_last"])
def test_word_vectors_pool_subtokens_onto_user_words(encoder, hf_default, method):
    model, tokenizer = hf_default
    words = ["EU", "rejects", "German", "call", "to", "boycott", "Britishness", "lambkins"]
    got = encoder.embed_words([words], layers="last4:concat", subtoken_pooling=method)[0]
    inputs = tokenizer(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        states = model(**inputs, output_hidden_states=True).hidden_states
    vectors = torch.cat([states[-1], states[-2], states[-3], states[-4]], -1)[0]
    word_ids = inputs.word_ids(0)
    expected = []
    for w in range(len(words)):
        where = [i for i, x in enumerate(word_ids) if x == w]
        picks = {
            "first": vectors[where[0]],
            "last": vectors[where[-1]],
            "mean": vectors[where].mean(0),
            "first_last": torch.cat([vectors[where[0]], vectors[where[-1]]]),
        }
        expected.append(picks[method].numpy())
    assert any(len([x for x in word_ids if x == w]) > 1 for w in range(len(words))), "need a multi-piece word"
    assert got.shape == (len(words), 384 * 4 * (2 if method == "first_last" else 1))
    np.testing.assert_allclose(got, np.stack(expected), atol=1e-5, rtol=0)


def test_sentence_pairs_use_type_ids(encoder, hf_default):
    model, tokenizer = hf_default
    got = encoder.embed(["how old are you?"], text_pair=["I am six."], pooling="cls")
    inputs = tokenizer("how old are you?", "I am six.", return_tensors="pt")
    assert inputs["token_type_ids"].max() == 1
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state[:, 0].numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_a_long_pair_is_cut_with_advice_that_pairs_can_follow(encoder, caplog):
    encoder.embed(["how old are you?"], text_pair=["I am six. " * 20], max_length=16)
    assert "1 of 1 pairs were longer than 16 tokens and were truncated; shorten them" in caplog.text
    assert "to keep all of them" not in caplog.text  # windows are refused for pairs
    with pytest.raises(InputError, match="not sentence pairs"):
        encoder.embed(["how old are you?"], text_pair=["I am six."], long_text="window")


def test_long_text_policies(encoder, hf_default, caplog):
    model, tokenizer = hf_default
    long_text = " ".join(f"word{i % 50}" for i in range(120))  # ~ 2 tokens a word
    texts = ["short one", long_text]
    vectors, report = encoder.embed_with_report(texts, max_length=32, normalize_embeddings=False)
    assert "1 of 2 texts were longer than" in caplog.text
    assert report.truncated_rows == [1] and report.n_truncated == 1
    cut = tokenizer(long_text, truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        expected = model(**cut).last_hidden_state[0].mean(0).numpy()
    np.testing.assert_allclose(vectors[1], expected, atol=1e-5, rtol=0)

    with pytest.raises(InputError, match=r"text 1 has \d+ tokens, more than max_length=32"):
        encoder.embed(texts, max_length=32, long_text="error")

    result = encoder.embed_tokens(texts, max_length=32, long_text="window", stride=8)
    full = tokenizer(long_text)
    assert result[1].tokens == full.tokens()  # every token exactly once
    assert result[1].vectors.shape == (len(full["input_ids"]), 384)
    first_window = tokenizer(long_text, truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        first = model(**first_window).last_hidden_state[0]
    np.testing.assert_allclose(result[1].vectors[:10], first[:10].numpy(), atol=1e-5, rtol=0)
    windows = tokenizer(long_text, truncation=True, max_length=32, stride=8, return_overflowing_tokens=True)
    with torch.no_grad():  # the text's last token and [SEP] are only in the tokenizer's last overflow window
        last = model(input_ids=torch.tensor([windows["input_ids"][-1]])).last_hidden_state[0]
    np.testing.assert_allclose(result[1].vectors[-2:], last[-2:].numpy(), atol=1e-5, rtol=0)
    pooled = encoder.embed(texts, max_length=32, long_text="window", stride=8, normalize_embeddings=False)
    np.testing.assert_allclose(pooled[1], result[1].vectors.mean(0), atol=1e-5, rtol=0)
    np.testing.assert_allclose(pooled[0], result[0].vectors.mean(0), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["bert_cased", "roberta", "distilbert"])
@pytest.mark.parametrize("stride", [None, 0, 5])
def test_windows_are_the_fast_tokenizers_overflow_windows_and_tile_the_text(tiny_dirs, name, stride):
    """One rule for long inputs: the windows are `return_overflowing_tokens=True, stride=...`'s, and window k's
    content is the whole text's content from the position the stitching puts it at (each step: window length less
    the stride), for BERT, RoBERTa and DistilBERT alike."""
    from transformers import AutoTokenizer

    from bertkit.encoder.tokenize import content_bounds, encode

    encoder = Encoder.from_pretrained(str(tiny_dirs[name]))
    tokenizer = AutoTokenizer.from_pretrained(tiny_dirs[name])
    text = " ".join(f"word{i} and more, é{i}" for i in range(37))
    max_length = 24
    budget = max_length - tokenizer.num_special_tokens_to_add()
    overlap = budget // 4 if stride is None else stride
    [item] = encode(encoder.tokenizer, [text], max_length=max_length, long_text="window", stride=stride)
    expected = tokenizer(text, truncation=True, max_length=max_length, stride=overlap, return_overflowing_tokens=True)
    assert [w.ids for w in item.windows] == expected["input_ids"] and item.stride == overlap
    start, end = content_bounds(item.encoding.special_tokens_mask)
    content, position = item.encoding.ids[start:end], 0
    for window in item.windows:
        a, b = content_bounds(window.special_tokens_mask)
        assert window.ids[a:b] == content[position : position + b - a]
        position += b - a - overlap
    assert position + overlap == len(content)  # the last window ends at the text's end


def test_window_equals_plain_for_short_texts(encoder):
    texts = ["I love Korea", "a short text"]
    np.testing.assert_array_equal(encoder.embed(texts, long_text="window"), encoder.embed(texts))


def test_empty_inputs(encoder, references):
    assert encoder.embed([], layers="last4:concat").shape == (0, 1536)
    empty = references[TEXTS.index("")].last_hidden_state[0]  # "" is [CLS] [SEP] for plain transformers too
    got = encoder.embed([""], normalize_embeddings=False)
    np.testing.assert_allclose(got, empty.mean(0, keepdim=True).numpy(), atol=1e-5, rtol=0)
    assert encoder.embed_words([[]])[0].shape == (0, 384)


def test_bad_options_name_the_problem(encoder):
    with pytest.raises(InputError, match="Valid forms"):
        encoder.embed(["x"], layers="penultimate")
    with pytest.raises(InputError, match="layer 9 does not exist.*7 hidden states"):
        encoder.embed(["x"], layers="9")
    with pytest.raises(InputError, match="unknown pooling 'avg'"):
        encoder.embed(["x"], pooling="avg")
    with pytest.raises(InputError, match="layers='last'"):
        encoder.embed(["x"], pooling="pooler", layers="last4:sum")
    with pytest.raises(InputError, match=r"texts\[1\] is missing"):
        encoder.embed(["x", None])
    with pytest.raises(InputError, match=r"texts\[0\] is missing"):
        encoder.embed([float("nan")])
    with pytest.raises(InputError, match="batch_size"):
        encoder.embed(["x"], batch_size=0)
    with pytest.raises(InputError, match="long_text"):
        encoder.embed(["x"], long_text="chop")
    with pytest.raises(InputError, match="lists of words"):
        encoder.embed_words(["EU rejects"])


def test_progress_bar_shows_only_when_asked(encoder, capsys, monkeypatch):
    from bertkit.encoder import progress

    monkeypatch.setattr(progress, "terminal", lambda: True)  # a bar on a terminal (elsewhere: log lines)
    encoder.embed(["a", "b"], progress=True)
    assert "embed" in capsys.readouterr().err
    encoder.embed(["a", "b"], progress=False)
    assert capsys.readouterr().err == ""


def test_threads_are_set_by_one_explicit_call_and_constructors_take_none():
    import bertkit

    before = torch.get_num_threads()
    try:
        bertkit.set_threads(1)
        assert torch.get_num_threads() == 1
        torch.set_num_threads(before)
        Encoder.from_pretrained()  # loading a model leaves the process's threads alone
        assert torch.get_num_threads() == before
        with pytest.raises(TypeError, match="threads"):
            Encoder.from_pretrained(threads=1)
    finally:
        torch.set_num_threads(before)
    with pytest.raises(InputError, match="threads"):
        bertkit.set_threads(0)


def test_coverage_warning_for_korean_on_uncased_english_vocab(encoder, caplog):
    encoder.embed(["이 영화 재미없네요"])
    assert "covers the text poorly" in caplog.text and "Korean" in caplog.text
    caplog.clear()
    encoder.embed(["this movie is no fun"])
    assert caplog.records == []


def test_concurrent_batches_give_the_same_vectors_and_restore_threads(encoder):
    texts = [f"sentence number {i} " + "word " * (i % 13) for i in range(50)]
    threads = torch.get_num_threads()
    one = encoder.with_options(concurrent_batches=1).embed(texts, batch_size=4, layers="last4:concat")
    two = encoder.with_options(concurrent_batches=2).embed(texts, batch_size=4, layers="last4:concat")
    assert np.abs(one - two).max() <= 1e-5
    assert torch.get_num_threads() == threads
    with pytest.raises(InputError, match="concurrent_batches"):
        encoder.with_options(concurrent_batches=0)


def test_passes_are_cut_by_rows_and_by_padded_tokens():
    from bertkit.encoder.runner import plan_batches

    lengths = [100, 60, 50, 10, 10, 10]
    # 100 alone (two rows would pad to 200 > 128); 60 + 50 pad to 120; three 10s pad to 30
    assert plan_batches(lengths, 128, max_rows=4) == [[0], [2, 1], [3, 4, 5]]
    assert plan_batches(lengths, 128, max_rows=2) == [[0], [2, 1], [5], [3, 4]]
    assert plan_batches([300], 128, max_rows=4) == [[0]]  # too long even alone: its own pass


def test_texts_tokenized_in_chunks_give_the_vectors_and_report_of_one_call(monkeypatch):
    """A GPU tokenizes a call in chunks, the next one while the passes run; forced small here, on the CPU."""
    encoder = Encoder.from_pretrained(device="cpu")
    long_text = " ".join(["the film is long and slow but the ending pays off"] * 12)  # windows at max_length 32
    texts = [*TEXTS, long_text, "한국어 문장은 이 모델의 어휘로 잘 표현되지 않는다", *TEXTS[:2], long_text]
    options = {"max_length": 32, "progress": False, "warn": False}
    calls = {"truncate": {}, "window": {"long_text": "window"}, "pairs": {"text_pair": texts[::-1]}}
    for name, extra in calls.items():
        whole = encoder.embed_with_report(texts, **options, **extra)
        monkeypatch.setattr(encoder, "_chunk_texts", 3)
        chunked = encoder.embed_with_report(texts, **options, **extra)
        monkeypatch.setattr(encoder, "_chunk_texts", None)
        np.testing.assert_allclose(chunked.vectors, whole.vectors, atol=1e-5, err_msg=name)  # other passes
        assert chunked.report.truncated_rows == whole.report.truncated_rows, name
        assert (whole.report.truncated_rows == []) == (name == "window"), name
        assert chunked.report.windowed_rows == whole.report.windowed_rows, name
        assert chunked.report.coverage == whole.report.coverage, name
        assert chunked.report.coverage.poor_rows == [6], name  # the Korean text, by its row in the call
    monkeypatch.setattr(encoder, "_chunk_texts", 3)
    tokens = encoder.embed_tokens(texts, max_length=32, long_text="window", progress=False)
    monkeypatch.setattr(encoder, "_chunk_texts", None)
    for found, expected in zip(tokens, encoder.embed_tokens(texts, max_length=32, long_text="window", progress=False)):
        assert found.tokens == expected.tokens
        np.testing.assert_allclose(found.vectors, expected.vectors, atol=1e-5)
    with pytest.raises(InputError, match=r"texts\[9\] is missing"):  # named by its row in the call, not its chunk
        monkeypatch.setattr(encoder, "_chunk_texts", 3)
        encoder.embed([*texts[:9], None])


def test_embed_reaches_the_model_in_five_frames_and_parses_its_layers_and_pooling_once():
    """`Encoder.embed` reads top to bottom: embed → its report → the vector head's token states → the runner's pass →
    the one model call, then the model (a traceback taken inside it, through torch's public forward pre-hook); the
    layers and pooling specs are parsed once each, however many parts of the call read them."""
    import traceback

    from bertkit.encoder import layers, pooling

    encoder = Encoder.from_pretrained(device="cpu", engine="torch")
    stacks = []
    handle = encoder.model.register_forward_pre_hook(
        lambda module, args: stacks.append([f.name for f in traceback.extract_stack() if "/bertkit/" in f.filename])
    )
    try:
        layers._parse_text.cache_clear()
        pooling._parse_text.cache_clear()
        encoder.embed(["a film", "another film"], layers="last3:sum", pooling="cls+mean", progress=False)
    finally:
        handle.remove()
    assert stacks[0] == ["embed", "embed_with_report", "token_states", "passes", "call_model"], stacks[0]
    for parsed in (layers._parse_text.cache_info(), pooling._parse_text.cache_info()):
        assert parsed.misses == parsed.currsize <= 2, parsed  # each spec once: the caller's (and the default 'last')
