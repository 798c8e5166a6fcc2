"""Layer specs and pooling on hand-made tensors, so every expected value is computed by hand."""

import pytest
import torch

from bertkit import InputError, parse_layers
from bertkit.encoder.pooling import parse_pooling, pool_sentences, pool_words


@pytest.mark.parametrize(
    "spec, indices, combine",
    [
        ("0", (0,), "concat"),
        ("-1", (-1,), "concat"),
        ("last", (-1,), "concat"),
        ("second_to_last", (-2,), "concat"),
        ("embeddings", (0,), "concat"),
        ("-1,-2,-3,-4", (-1, -2, -3, -4), "concat"),
        ("-1, -2:sum", (-1, -2), "sum"),
        ("last4:sum", (-1, -2, -3, -4), "sum"),
        ("last4:concat", (-1, -2, -3, -4), "concat"),
        ("LAST2:mean", (-1, -2), "mean"),
        ("all:mean", None, "mean"),
        ("all:concat", None, "concat"),
        (3, (3,), "concat"),
        ([-1, -2], (-1, -2), "concat"),
    ],
)
def test_parse_layers(spec, indices, combine):
    selection = parse_layers(spec)
    assert (selection.indices, selection.combine) == (indices, combine)


def test_a_layer_listed_twice_is_concatenated_twice():
    """Every spec that matches the service's published pattern is served: a list may name a layer again."""
    states = [torch.full((1, 2, 3), float(i)) for i in range(4)]
    assert parse_layers("1,1").apply(states).tolist() == [[[1.0] * 6] * 2]


@pytest.mark.parametrize("spec", ["penultimate", "last4", "all", "last0:sum", "-1:median", ""])
def test_bad_layer_specs_list_the_valid_forms(spec):
    with pytest.raises(InputError, match="Valid forms.*last4:sum.*all:"):
        parse_layers(spec)


def test_apply_and_resolve_by_hand():
    states = tuple(torch.full((1, 2, 3), float(i)) for i in range(7))
    assert parse_layers("last4:sum").apply(states)[0, 0, 0] == 6 + 5 + 4 + 3
    assert parse_layers("all:mean").apply(states)[0, 0, 0] == 3.0
    concat = parse_layers("0,-1").apply(states)
    assert concat.shape == (1, 2, 6) and concat[0, 0].tolist() == [0, 0, 0, 6, 6, 6]
    assert parse_layers("all:concat").output_dim(3, 7) == 21
    assert parse_layers("-7").resolve(7) == (0,)
    with pytest.raises(InputError, match="indices run from -7 to 6"):
        parse_layers("7").resolve(7)


def test_mean_and_max_ignore_padding():
    vectors = torch.tensor([[[1.0, 2.0], [3.0, -4.0], [100.0, 100.0]]])  # last position is padding
    mask = torch.tensor([[1, 1, 0]])
    mean, maximum = pool_sentences(vectors, mask, ("mean", "max")).reshape(2, 2)
    assert mean.tolist() == [2.0, -1.0]
    assert maximum.tolist() == [3.0, 2.0]
    assert pool_sentences(vectors, mask, ("cls",)).tolist() == [[1.0, 2.0]]
    with pytest.raises(InputError, match="pooler"):
        pool_sentences(vectors, mask, ("pooler",), None)


@pytest.mark.parametrize(
    "spec, parsed",
    [("cls+mean", ("cls", "mean")), ("MAX", ("max",)), ("mean + cls", ("mean", "cls")), ("none", ("none",))],
)
def test_parse_pooling(spec, parsed):
    assert parse_pooling(spec) == parsed


@pytest.mark.parametrize(
    "bad, message",
    [
        ("avg", r"pooling='avg': unknown pooling 'avg'. Valid: cls, pooler, mean, max, none"),
        ("none+mean", r"'none' \(token vectors\) cannot be combined"),
        ("mean+mean", "a pooling is listed twice"),
    ],
)
def test_bad_pooling_names_the_problem(bad, message):
    with pytest.raises(InputError, match=message):
        parse_pooling(bad)


def test_word_pooling_by_hand():
    vectors = torch.tensor([[0.0, 0.0], [1.0, 10.0], [3.0, 30.0], [5.0, 50.0], [9.0, 9.0]])
    word_ids = [None, 0, 0, 1, None]  # word 2 has no token (cut off)
    assert pool_words(vectors, word_ids, 3, "first").tolist() == [[1, 10], [5, 50], [0, 0]]
    assert pool_words(vectors, word_ids, 3, "last").tolist() == [[3, 30], [5, 50], [0, 0]]
    assert pool_words(vectors, word_ids, 3, "mean").tolist() == [[2, 20], [5, 50], [0, 0]]
    assert pool_words(vectors, word_ids, 3, "first_last").tolist()[0] == [1, 10, 3, 30]
    with pytest.raises(InputError, match="subtoken_pooling"):
        pool_words(vectors, word_ids, 3, "max")


@pytest.mark.parametrize("spec", ["-2\x1c,0,0", "1,\x1f2", "٣", "1,\u20072"])
def test_layer_lists_with_odd_characters_are_refused_cleanly(spec):
    """Found by fuzz/fuzz_inputs.py: a separator `\\s` accepted but `int()` refused raised ValueError."""
    with pytest.raises(InputError, match="not a valid layer spec"):
        parse_layers(spec)


def test_an_absurd_last_n_is_refused_without_building_it():
    """Found by fuzz/fuzz_inputs.py: 'last0111…1:concat' built a range too large for C (OverflowError)."""
    with pytest.raises(InputError, match="more than any model has"):
        parse_layers("last" + "1" * 130 + ":concat")
