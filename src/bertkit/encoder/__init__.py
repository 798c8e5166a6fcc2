"""The encoder wing: model resolution and safe loading, tokenization, layer selection, pooling, precision, `Encoder`.

May import: `bertkit.errors` only. Everything else in bertkit builds on this wing.
"""
