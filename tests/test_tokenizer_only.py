"""`bertkit tokenize` reads tokenizer.json with the tokenizers library alone; its table is `Encoder.tokenize`'s."""

import pytest

from bertkit import Encoder, InputError, text_coverage
from bertkit.encoder.tokenizer_only import TokenizerOnly

CASES = [
    ("I love Korea", None, 7),
    ("I love Korea", None, None),
    ("how old are you?", "I am six.", None),
    ("how old are you?", "I am six.", 16),
    ("EU rejects German call to boycott British lamb. " * 40, None, None),  # longer than the limit: truncated
    ("EU rejects German call", "a second text that is rather long " * 30, 24),  # a pair cut longest first
    ("이 영화 재미없네요", None, None),  # jamo and [UNK]: the coverage line warns
    ("  Mixed   CASE, accents: café naïve — 東京  ", None, None),
]


@pytest.mark.parametrize("name", ["default", "bert_cased", "roberta", "distilbert", "electra"])
def test_the_table_equals_the_encoders(tiny_dirs, name):
    spec = None if name == "default" else str(tiny_dirs[name])
    light = TokenizerOnly.from_model(spec)
    assert light is not None
    encoder = Encoder.from_pretrained(spec)
    assert light.max_length == encoder.max_length
    for text, pair, max_length in CASES:
        if max_length is not None and max_length > encoder.info()["position_limit"]:
            continue
        rows, truncated, coverage = light.table(text, pair, max_length)
        batch = encoder.tokenize(
            [text], [pair] if pair else None, max_length=max_length, padding="max_length" if max_length else "longest"
        )
        assert rows == batch.table(0), (name, text)
        assert truncated == batch.truncated[0]
        assert coverage == text_coverage(encoder.tokenizer, [text] + ([pair] if pair else [])).message()


def test_hub_names_and_missing_tokenizer_json_fall_back_to_the_encoder(tiny_dirs, tmp_path):
    assert TokenizerOnly.from_model("bert-base-uncased") is None
    import shutil

    copy = shutil.copytree(tiny_dirs["bert_cased"], tmp_path / "copy")
    (copy / "tokenizer.json").unlink()
    assert TokenizerOnly.from_model(str(copy)) is None
    with pytest.raises(InputError, match="between 3 and"):
        TokenizerOnly.from_model(None).table("x", max_length=2)
