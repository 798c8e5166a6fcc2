"""The io wing: data readers, vector writers, streaming embed, embedding cache.

The readers take TSV/CSV/JSONL/text and CoNLL, with format sniffing.

May import: `bertkit.errors`, `bertkit.encoder`.
"""
