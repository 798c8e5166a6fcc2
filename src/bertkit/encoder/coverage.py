"""How well a vocabulary covers some text: [UNK] share, pieces per word, syllables broken into letters."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tokenize import Encoded

# The words a WordPiece vocabulary is asked to cover: runs of letters and digits, and each punctuation mark on its own
# (BERT's pre-tokenizer splits there first; "20-6-70-2" is seven of them, each in the vocabulary).
_PIECES_OF_WORDS = re.compile(r"\w+|[^\w\s]")
UNKNOWN_SHARE = 0.05  # [UNK] tokens, of all tokens, that make coverage poor
PIECES_PER_WORD = 3.0  # sub-tokens a word, on average, that make coverage poor...
SPLIT_MIN_WORDS = 8  # ...over at least this many words of a Latin-script text (short English phrases of rare words)


@dataclass
class Coverage:
    """How well the vocabulary covers some text: share of [UNK], pieces per word, letters broken into parts."""

    n_tokens: int
    n_unknown: int
    n_words: int
    scripts: list[str]  # non-Latin scripts present in the text
    decomposed: bool  # the tokenizer broke syllables into letter parts (uncased BERT: Hangul → jamo)
    poor_rows: list[int] = field(default_factory=list)  # rows whose own coverage is poor

    @property
    def unknown_share(self) -> float:
        """The share of the tokens that are [UNK]."""
        return self.n_unknown / self.n_tokens if self.n_tokens else 0.0

    @property
    def tokens_per_word(self) -> float:
        """Tokens per word."""
        return self.n_tokens / self.n_words if self.n_words else 0.0

    @property
    def poor(self) -> bool:
        """Whether the vocabulary covers the text poorly.

        Letters broken into parts; [UNK]s (5% of the tokens: two or more, or any in a non-Latin script); or 3+ pieces a
        word, in a non-Latin script or over 8+ words: a few rare English words split into pieces ("dis ##jo ##int
        ##ed") are not it, nor one emoji's [UNK] among words; a text of nothing but [UNK] is.
        """
        many_unknown = self.unknown_share >= UNKNOWN_SHARE and (self.n_unknown >= 2 or bool(self.scripts))
        many_unknown = many_unknown or (self.n_tokens > 0 and self.n_unknown == self.n_tokens)  # nothing but [UNK]
        split = self.tokens_per_word >= PIECES_PER_WORD and (bool(self.scripts) or self.n_words >= SPLIT_MIN_WORDS)
        return self.decomposed or many_unknown or split

    def message(self) -> str:
        """Describe the coverage in a line: [UNK]s and tokens per word; when poor, why, and which model to use."""
        head = (
            f"[UNK] {self.n_unknown} of {self.n_tokens} tokens ({self.unknown_share:.1%}); "
            f"{self.tokens_per_word:.2f} tokens per word"
        )
        if not self.poor:
            return head
        why = []
        if self.decomposed:
            why.append("syllables are broken into letter pieces (jamo)")
        if self.n_tokens and self.n_unknown == self.n_tokens:
            why.append("every token is [UNK]: the vector says nothing of the text")
        elif self.unknown_share >= UNKNOWN_SHARE and (self.n_unknown >= 2 or self.scripts):
            why.append("many tokens are [UNK] and their meaning is lost")
        if self.tokens_per_word >= PIECES_PER_WORD:
            why.append("words are split into many sub-tokens")
        hint = _MODEL_HINTS.get(self.scripts[0] if self.scripts else "", _MODEL_HINTS[""])
        return (
            f"{head}. WARNING: this model's vocabulary covers the text poorly: {'; '.join(why)}. "
            f"Use a model made for that language, {hint}."
        )


_MODEL_HINTS = {
    "HANGUL": "e.g. beomi/kcbert-base or klue/bert-base for Korean",
    "CJK": "e.g. bert-base-chinese, or a Japanese BERT",
    "ARABIC": "e.g. aubmindlab/bert-base-arabertv2 for Arabic",
    "CYRILLIC": "e.g. DeepPavlov/rubert-base-cased for Russian",
    "": "or a multilingual one such as bert-base-multilingual-cased",
}
_JAMO = re.compile(r"[\u1100-\u11ff\u3130-\u318f]")


def _scripts_in(text: str) -> list[str]:
    scripts = (unicodedata.name(char, "?").split(" ")[0] for char in text if ord(char) > 0x24F and char.isalpha())
    return list(dict.fromkeys(scripts))  # each once, in order of appearance


def coverage(encoded: Sequence[Encoded], unk_token_id: int | None) -> Coverage:
    """Count [UNK] tokens and words, and notice when the vocabulary decomposes a script's syllables."""
    n_tokens = n_unknown = n_words = 0
    scripts: list[str] = []
    decomposed = False
    poor_rows: list[int] = []
    for row, item in enumerate(encoded):
        encoding = item.encoding
        tokens = len(encoding) - encoding.special_tokens_mask.count(1)
        unknown = encoding.ids.count(unk_token_id)
        words = len(_PIECES_OF_WORDS.findall(item.text)) + len(_PIECES_OF_WORDS.findall(item.pair_text or ""))
        n_tokens, n_unknown, n_words = n_tokens + tokens, n_unknown + unknown, n_words + words
        row_scripts: list[str] = []
        if not item.text.isascii():  # item.text: the text as tokenized (a list of words joined by spaces)
            row_scripts = _scripts_in(item.text)
            scripts += [s for s in row_scripts if s not in scripts]
        if not unknown and not row_scripts and tokens < PIECES_PER_WORD * words:
            continue  # no [UNK], no other script, few pieces a word: poor by no rule (the common row, made cheap)
        row_decomposed = "HANGUL" in row_scripts and any(_JAMO.search(t) for t in item.tokens)
        decomposed = decomposed or row_decomposed
        if Coverage(tokens, unknown, words, row_scripts, row_decomposed).poor:
            poor_rows.append(row)
    return Coverage(n_tokens, n_unknown, n_words, scripts, decomposed, poor_rows)


def text_coverage(tokenizer: Any, texts: str | Sequence[str]) -> Coverage:
    """How well `tokenizer`'s vocabulary fits the language of `texts`, each read whole (nothing truncated).

    Parameters
    ----------
    tokenizer : transformers fast tokenizer
        An encoder's (`Encoder.tokenizer`).
    texts : str or list of str
        The texts (one string is one text).

    Returns
    -------
    Coverage
        [UNK] share, word pieces per word, scripts split into letters, and the rows covered poorly.

    Examples
    --------
    >>> from bertkit import Encoder, text_coverage
    >>> text_coverage(Encoder.from_pretrained().tokenizer, "I love Korea").poor
    False
    """
    from .tokenize import encode

    encoded = encode(tokenizer, [texts] if isinstance(texts, str) else list(texts), max_length=0, long_text="keep")
    return coverage(encoded, tokenizer.unk_token_id)


def combined(parts: Sequence[tuple[int, Coverage]]) -> Coverage:
    """Sum the coverages of texts tokenized in chunks (each chunk's first row and coverage); rows made global."""
    scripts = list(dict.fromkeys(script for _, part in parts for script in part.scripts))
    tokens, unknown, words = (sum(getattr(part, n) for _, part in parts) for n in ("n_tokens", "n_unknown", "n_words"))
    poor_rows = [first + row for first, part in parts for row in part.poor_rows]
    return Coverage(tokens, unknown, words, scripts, any(part.decomposed for _, part in parts), poor_rows)
