"""Compact sentence vectors: float16, int8 / uint8 (per-dimension buckets) and binary / ubinary (one bit a
dimension), with sentence-transformers' `quantize_embeddings` semantics and packing (tests hold the two equal).

int8 and uint8 need each dimension's range. Computed from the vectors being compacted, as sentence-transformers
does by default, a corpus and a query embedded apart would be bucketed differently; bertkit takes the ranges from
the caller (`ranges=`, e.g. `int8_ranges(corpus_vectors)`) or from bertkit's packaged calibration sentences
embedded with the same options, and records them with what it writes, so that later vectors share the mapping.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError

OUTPUT_TYPES = ("float32", "float16", "int8", "uint8", "binary", "ubinary")
RANGED = ("int8", "uint8")
DTYPES = {"float32": "float32", "float16": "float16", "int8": "int8", "uint8": "uint8", "binary": "int8"}
DTYPES["ubinary"] = "uint8"  # what each output type's array holds


def check_output_type(output: str) -> str:
    """`output` if it is one of OUTPUT_TYPES, else an InputError listing them."""
    if output not in OUTPUT_TYPES:
        raise InputError(f"output={output!r}: valid values are {', '.join(OUTPUT_TYPES)}.")
    return output


def int8_ranges(vectors: np.ndarray) -> np.ndarray:
    """Each dimension's [minimum, maximum] over `vectors`: the (2, dim) ranges int8/uint8 buckets are cut from.

    Parameters
    ----------
    vectors : numpy.ndarray
        (n, dim) float vectors representative of what will be compacted (a corpus, a calibration set), n >= 2.

    Returns
    -------
    numpy.ndarray
        (2, dim) float32.
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or len(vectors) < 2:
        raise InputError("int8 ranges need at least two vectors (an (n, dim) array); give a representative set.")
    return np.vstack((vectors.min(axis=0), vectors.max(axis=0))).astype(np.float32)


def compact(vectors: np.ndarray, output: str = "float32", ranges: np.ndarray | None = None) -> np.ndarray:
    """Sentence vectors in a compact type.

    Parameters
    ----------
    vectors : numpy.ndarray
        (n, dim) float vectors.
    output : str
        'float32', 'float16', 'int8' / 'uint8' (256 buckets a dimension, between `ranges`), 'binary' / 'ubinary'
        (the sign of each dimension, 8 to a byte: dim / 8 bytes; 'binary' shifted to int8 as sentence-transformers).
    ranges : numpy.ndarray, optional
        int8/uint8: the (2, dim) minima and maxima (`int8_ranges`); required for those two types.

    Returns
    -------
    numpy.ndarray
        float32/float16 (n, dim), int8/uint8 (n, dim), or int8/uint8 (n, ceil(dim / 8)) for the binary types.
    """
    check_output_type(output)
    vectors = np.asarray(vectors, dtype=np.float32)
    if output == "float32":
        return vectors
    if output == "float16":
        return vectors.astype(np.float16)
    if output in RANGED:
        if ranges is None:
            raise InputError(f"output={output!r} needs ranges: give ranges=int8_ranges(representative_vectors).")
        ranges = np.asarray(ranges, dtype=np.float32)
        if ranges.shape != (2, vectors.shape[-1]):
            raise InputError(f"ranges have shape {ranges.shape}; these vectors need (2, {vectors.shape[-1]}).")
        starts = ranges[0]
        steps = (ranges[1] - starts) / 255
        steps = np.where(steps == 0, 1, steps)
        buckets = np.clip(np.floor((vectors - starts) / steps), 0, 255)
        return buckets.astype(np.uint8) if output == "uint8" else (buckets - 128).astype(np.int8)
    packed = np.packbits(vectors > 0, axis=-1)
    return packed if output == "ubinary" else (packed.astype(np.int16) - 128).astype(np.int8)


def unpack_binary(packed: np.ndarray, dim: int) -> np.ndarray:
    """binary/ubinary vectors back to ±1 float32 (n, dim): what float queries are rescored against."""
    packed = np.asarray(packed)
    unsigned = (packed.astype(np.int16) + 128).astype(np.uint8) if packed.dtype == np.int8 else packed
    bits = np.unpackbits(unsigned, axis=-1)[:, :dim]
    return bits.astype(np.float32) * 2 - 1
