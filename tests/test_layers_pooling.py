"""Layer specs and pooling on hand-made tensors, so every expected value is computed by hand."""

import re
from typing import Annotated

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field, TypeAdapter, ValidationError

from bertkit import EmbedOptions, InputError, parse_layers
from bertkit.encoder.layers import LAYERS_PATTERN
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


# Issue 61 (9): the layer grammar as one regular expression (the service's schema publishes it), equal to the parser
LAYER_SPEC = re.compile(LAYERS_PATTERN)
RUST_REGEX = TypeAdapter(Annotated[str, Field(pattern=LAYERS_PATTERN)])  # pydantic's engine: what the service uses
PIECES = [
    *("last", "LaSt", "second_to_last", "Embeddings", "all", "ALL", "sum", "Mean", "concat", "median"),
    *(":", ",", " , ", "-", "0", "4", "07", "1000", "1001"),
    *(" ", "\t", "\n", "\u3000", "\x1c", "\u0085", "\ufeff", "\u200b", "x", "٣", "_"),
]
SPACES = st.sampled_from(["", " ", "  ", "\t", "\n", "\u3000", "\x1c", "\u0085", "\ufeff", "\u200b"])
INDEX_LIST = st.lists(st.integers(-12, 12).map(str), min_size=1, max_size=4).flatmap(
    lambda indices: st.sampled_from([",", " , ", ",\t", ", ", ",,"]).map(lambda separator: separator.join(indices))
)
HEADS = st.one_of(
    INDEX_LIST,
    st.sampled_from(["last", "LaSt", "second_to_last", "Embeddings", "all", "ALL", "last4", "LAST07", "x", "٣", ""]),
    st.sampled_from(["last0", "last1000", "last01000", "last1001", "lastx", "penultimate", "-", "+1", "1_0"]),
)
# near-valid specs: white space, a head, a separator and a combination, each often valid and sometimes not
SPECS = st.tuples(
    SPACES, HEADS, SPACES, st.sampled_from(["", ":", "::", ","]), SPACES, st.sampled_from(["", "sum", "Mean", "median"])
).map("".join)


def parses(spec: str) -> bool:
    """Whether `parse_layers` takes `spec` (its syntax; no model's range)."""
    try:
        parse_layers(spec)
    except InputError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(spec=st.from_regex(LAYERS_PATTERN, fullmatch=True))
def test_every_spec_the_pattern_allows_parses_and_a_6_layer_model_takes_it_or_says_its_range(spec, encoder):
    assert encoder.num_layers == 6
    selection = parse_layers(spec)
    try:
        EmbedOptions(layers=spec, pooling="mean").resolve(encoder)
    except InputError as exc:
        assert "does not exist" in str(exc) and "indices run from -7 to 6" in str(exc), str(exc)
        assert any(not -7 <= i < 7 for i in selection.indices or ())


@settings(max_examples=1500, deadline=None)
@given(st.one_of(SPECS, st.lists(st.sampled_from(PIECES), max_size=7).map("".join), st.text(max_size=10)))
def test_the_pattern_matches_exactly_the_specs_the_parser_takes(spec):
    assert bool(LAYER_SPEC.fullmatch(spec)) == parses(spec), repr(spec)
    try:
        RUST_REGEX.validate_python(spec)
        rust = True
    except ValidationError:
        rust = False
    assert rust == parses(spec), repr(spec)


@pytest.mark.parametrize(
    "spec",
    [
        *("last", "-2", "3", "0", "second_to_last", "embeddings", "last4:sum", "last4:concat", "LAST2:Mean"),
        *("all:concat", "all:sum", "0,3,5:mean", "-1, -2:sum", "-1,-2,-3,-4", " last ", "last:", "5 :", "last1000:sum"),
    ],
)
def test_known_layer_specs_match_the_pattern(spec):
    assert parses(spec) and LAYER_SPEC.fullmatch(spec)


@pytest.mark.parametrize(
    "spec",
    [*("", " ", "all", "last4", "last0:sum", "last:sum", "last1001:sum", "-1:median", "1,,2", "1;2", "٣"), "a b"],
)
def test_blank_and_malformed_layer_specs_do_not_match(spec):
    assert not parses(spec) and not LAYER_SPEC.fullmatch(spec)


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"[a-z]{1,12}( [a-z]{1,12})?", fullmatch=True).filter(lambda w: w not in ("last", "embeddings")))
def test_random_words_do_not_match(word):
    assert not LAYER_SPEC.fullmatch(word)
