"""The tasks wing: what is built on vectors.

Vectorizer, feature classifiers, fine-tuning, tagging, probes, reports, runs, search and indexes.

May import: `bertkit.errors`, `bertkit.encoder`, `bertkit.io`.
"""
