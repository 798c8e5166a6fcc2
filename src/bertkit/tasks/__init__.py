"""The tasks wing: what is built on vectors: vectorizer, feature classifiers, fine-tuning, tagging, probes,
reports, runs, bench.

May import: `bertkit.errors`, `bertkit.encoder`, `bertkit.io`.
"""
