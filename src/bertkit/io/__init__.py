"""The io wing: data readers (TSV/CSV/JSONL/text, CoNLL) with format sniffing, vector writers, streaming embed,
embedding cache.

May import: `bertkit.errors`, `bertkit.encoder`.
"""
