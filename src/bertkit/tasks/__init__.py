"""The tasks wing: what is built on vectors.

Vectorizer, feature classifiers, fine-tuning, tagging, probes, reports, runs, bench.

May import: `bertkit.errors`, `bertkit.encoder`, `bertkit.io`.
"""
