"""Tiny randomly-initialised models with vocabularies written by the tests: they check code paths, not accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import torch

WORDS = [
    "I",
    "love",
    "Korea",
    "the",
    "movie",
    "was",
    "great",
    "EU",
    "rejects",
    "German",
    "call",
    "to",
    "boycott",
    "British",
    "lamb",
    ".",
    ",",
    "a",
    "film",
    "New",
    "York",
    "-",
    "is",
    "big",
    "good",
    "bad",
    "이",
    "영화",
    "재미",
    "##없",
    "##네요",
    "##s",
    "##ing",
    "##ed",
    "k",
    "##o",
    "##r",
    "##e",
    "##a",
]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CORPUS = ["I love Korea and the movie was great", "EU rejects German call to boycott British lamb ."] * 5


def _small(**extra) -> dict:
    return dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, **extra)


def _save(model, tokenizer, directory: Path) -> Path:
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def write_wordpiece(directory: Path, cased: bool, tokenizer_class: str = "BertTokenizer", extra=()) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    vocab = SPECIALS + WORDS + [w.lower() for w in WORDS if w.lower() not in WORDS] + list(extra)
    (directory / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n", encoding="utf-8")
    config = {"tokenizer_class": tokenizer_class, "do_lower_case": not cased}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def tiny_bert(
    directory: Path,
    cased: bool = True,
    max_positions: int = 64,
    seed: int = 0,
    dropout: float | None = None,
    extra_words: tuple[str, ...] = (),
) -> Path:
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(seed)
    write_wordpiece(directory, cased, extra=extra_words)
    (directory / "config.json").write_text(json.dumps({"model_type": "bert"}))
    tokenizer = AutoTokenizer.from_pretrained(directory)
    config = BertConfig(vocab_size=len(tokenizer), max_position_embeddings=max_positions, **_small())
    if dropout is not None:  # 0.0: training is deterministic given the batches (accumulation and DDP tests)
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = dropout
    return _save(BertModel(config), tokenizer, directory)


def tiny_distilbert(directory: Path, seed: int = 0) -> Path:
    from transformers import AutoTokenizer, DistilBertConfig, DistilBertModel

    torch.manual_seed(seed)
    write_wordpiece(directory, cased=False, tokenizer_class="DistilBertTokenizer")
    (directory / "config.json").write_text(json.dumps({"model_type": "distilbert"}))
    tokenizer = AutoTokenizer.from_pretrained(directory)
    config = DistilBertConfig(
        vocab_size=len(tokenizer), dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64
    )
    return _save(DistilBertModel(config), tokenizer, directory)


def tiny_electra(directory: Path, seed: int = 0) -> Path:
    from transformers import AutoTokenizer, ElectraConfig, ElectraModel

    torch.manual_seed(seed)
    write_wordpiece(directory, cased=False, tokenizer_class="ElectraTokenizer")
    (directory / "config.json").write_text(json.dumps({"model_type": "electra"}))
    tokenizer = AutoTokenizer.from_pretrained(directory)
    config = ElectraConfig(vocab_size=len(tokenizer), embedding_size=32, max_position_embeddings=64, **_small())
    return _save(ElectraModel(config), tokenizer, directory)


def tiny_roberta(directory: Path, seed: int = 0) -> Path:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import AutoTokenizer, RobertaConfig, RobertaModel

    torch.manual_seed(seed)
    directory.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        CORPUS, vocab_size=300, min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    )
    bpe.save_model(str(directory))
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "RobertaTokenizer"}))
    (directory / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    tokenizer = AutoTokenizer.from_pretrained(directory)
    config = RobertaConfig(
        vocab_size=len(tokenizer), max_position_embeddings=66, pad_token_id=1, type_vocab_size=1, **_small()
    )
    return _save(RobertaModel(config), tokenizer, directory)
