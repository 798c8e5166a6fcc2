"""Integrated Gradients of a similarity: a linear score's analytic answer, completeness, the score `embed` gives."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from bertkit import Encoder, InputError, attribute_similarity, similarity
from bertkit.explain import attributions


@pytest.fixture(scope="module")
def encoder(tiny_dirs):
    return Encoder.from_pretrained(str(tiny_dirs["bert_cased"]), device="cpu")


def test_a_score_linear_in_the_embeddings_gets_the_analytic_attributions(encoder):
    # f(e) = sum(e * w): Integrated Gradients is exactly (input - baseline) * w, whatever the steps
    item = encoder._encode(["the cat sat"], None, encoder.resolve())[0][0]
    table = encoder.model.get_input_embeddings()
    weights = torch.randn(len(item.ids), table.embedding_dim, generator=torch.Generator().manual_seed(0))
    result = attributions._integrate(encoder, lambda e: (e * weights).sum((-1, -2)), item, 8, "pad")
    with torch.no_grad():
        given = table(torch.tensor(item.ids))
        special = item.encoding.special_tokens_mask
        filler = encoder.tokenizer.pad_token_id
        empty = table(torch.tensor([t if s else filler for t, s in zip(item.ids, special)]))
        expected = ((given - empty) * weights).sum(-1).double().numpy()
    np.testing.assert_allclose(result.token_scores, expected, rtol=1e-4, atol=1e-5)
    assert result.token_scores[0] == 0 and result.token_scores[-1] == 0  # [CLS] and [SEP] are their own baseline
    assert result.words == ["the", "cat", "sat"] and result.delta < 1e-4
    by_word = np.zeros(3)
    for token, word in enumerate(item.word_ids()):
        if word is not None:
            by_word[word] += expected[token]
    np.testing.assert_allclose(result.word_scores, by_word, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "options",
    [{}, {"layers": "all:concat", "pooling": "cls+mean"}, {"prompt": "query: ", "truncate_dim": 16}],
    ids=["default", "layers-pooling", "prompt-truncate"],
)
@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_the_score_is_embeds_similarity_and_each_text_adds_up_to_it(encoder, options, metric):
    a, b = "the cat sat on the mat", "a dog ran in the park today"
    result = attribute_similarity(encoder, a, b, metric=metric, n_steps=64, **options)
    vectors = encoder.embed([a, b], **options)
    assert result.score == pytest.approx(float(similarity(vectors[:1], vectors[1:], metric)[0, 0]), rel=1e-6, abs=1e-5)
    assert result.target == f"{metric} similarity" and len(result.texts) == 2
    for text, given in zip(result.texts, (a, b)):
        assert text.text == options.get("prompt", "") + given
        assert text.words == text.text.split()
        assert len(text.token_scores) == len(text.tokens) and text.tokens[0] == "[CLS]"
        # completeness: this text's attributions carry the score from its baseline to the input
        total = text.token_scores.sum()
        assert total + text.baseline_score == pytest.approx(
            result.score, abs=0.02 * abs(result.score - text.baseline_score) + 1e-6
        )
        assert text.delta == pytest.approx(
            abs(total - (result.score - text.baseline_score)) / abs(result.score - text.baseline_score),
            rel=1e-3,
            abs=1e-6,
        )
        assert text.word_scores.sum() == pytest.approx(total, abs=1e-9)


def test_the_mask_baseline_puts_mask_in_the_content_positions(encoder, monkeypatch):
    seen = []
    original = attributions._integrate

    def spy(encoder_, score, item, n_steps, baseline):
        seen.append(baseline)
        return original(encoder_, score, item, n_steps, baseline)

    monkeypatch.setattr(attributions, "_integrate", spy)
    pad = attribute_similarity(encoder, "the cat", "a dog", n_steps=16)
    mask = attribute_similarity(encoder, "the cat", "a dog", n_steps=16, baseline="mask")
    assert seen == ["pad", "pad", "mask", "mask"] and mask.baseline == "mask"
    assert pad.score == mask.score and pad.texts[0].baseline_score != mask.texts[0].baseline_score


def test_too_few_steps_warn_with_the_delta(encoder, caplog):
    with caplog.at_level(logging.WARNING, logger="bertkit.explain.attributions"):
        result = attribute_similarity(encoder, "the cat sat on the mat", "dogs run", n_steps=2)
    worst = max(text.delta for text in result.texts)
    assert (worst > attributions.DELTA_WARNING) == ("use more steps than 2" in caplog.text)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_steps": 1}, "n_steps=1"),
        ({"n_steps": True}, "n_steps=True"),
        ({"baseline": "zeros"}, "baseline='zeros'"),
        ({"metric": "euclidean"}, "metric='euclidean'"),
        ({"long_text": "window"}, "long_text='window'"),
    ],
)
def test_what_attributions_cannot_follow_is_refused_in_one_line(encoder, kwargs, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        attribute_similarity(encoder, "the cat", "a dog", **kwargs)


def test_int8_weights_are_refused(tiny_dirs):
    encoder = Encoder.from_pretrained(str(tiny_dirs["bert_cased"]), device="cpu", precision="int8")
    with pytest.raises(InputError, match="int8 weights have no gradients"):
        attribute_similarity(encoder, "the cat", "a dog")
