"""Compact sentence vectors: float16, int8 / uint8 (per-dimension buckets) and binary / ubinary (one bit a dimension).

Semantics and packing follow sentence-transformers' `quantize_embeddings`; int8/uint8 ranges come from the caller or
from the packaged calibration sentences, so that vectors embedded apart share one mapping.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from .options import OUTPUT_TYPES

RANGED = ("int8", "uint8")
DTYPES = {"float32": "float32", "float16": "float16", "int8": "int8", "uint8": "uint8", "binary": "int8"}
DTYPES["ubinary"] = "uint8"  # what each output type's array holds
BIT_TILE = 8192  # corpus rows per popcount pass: a query chunk's 64-bit scratch stays within a few MB


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
    if output not in OUTPUT_TYPES:
        raise InputError(f"output={output!r}: valid values are {', '.join(OUTPUT_TYPES)}.")
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
    bits = np.unpackbits(unsigned_bits(packed), axis=-1)[..., :dim]
    signs = np.empty(bits.shape, dtype=np.float32)
    np.multiply(bits, 2, out=signs, casting="unsafe")
    signs -= 1
    return signs


def unsigned_bits(packed: np.ndarray) -> np.ndarray:
    """Return binary (int8, shifted by -128) or ubinary (uint8) packed vectors as their raw bytes (uint8)."""
    packed = np.asarray(packed)
    return packed.view(np.uint8) ^ np.uint8(0x80) if packed.dtype == np.int8 else packed.astype(np.uint8, copy=False)


def dequantize(values: np.ndarray, output: str, ranges: np.ndarray) -> np.ndarray:
    """int8/uint8 buckets back to floats, each the lower edge of its bucket (sentence-transformers' rescoring)."""
    ranges = np.asarray(ranges, dtype=np.float32)
    steps = (ranges[1] - ranges[0]) / 255
    steps = np.where(steps == 0, 1, steps).astype(np.float32)
    floats = np.multiply(values, steps, dtype=np.float32)
    floats += ranges[0] + (128 if output == "int8" else 0) * steps
    return floats


_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(1).astype(np.uint8)


def _popcount(words: np.ndarray) -> np.ndarray:
    """Bits set in each uint64: numpy's popcount (2.0+), else a byte table."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(words)
    return _BYTE_BITS[words.view(np.uint8)].reshape(*words.shape, 8).sum(-1, dtype=np.uint8)  # pragma: no cover


def _words(packed: np.ndarray) -> np.ndarray:
    """(n, bytes) uint8 as (n, ceil(bytes / 8)) uint64, zero-padded (zeros add no distance)."""
    rows, width = packed.shape
    padded = np.zeros((rows, -(-width // 8) * 8), dtype=np.uint8)
    padded[:, :width] = packed
    return padded.view(np.uint64)


def hamming_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bits that differ between every packed vector of `a` and of `b`, by popcount on 64-bit words.

    Parameters
    ----------
    a, b : numpy.ndarray
        (n, bytes) and (m, bytes) binary (int8) or ubinary (uint8) vectors, as `compact` packs them.

    Returns
    -------
    numpy.ndarray
        (n, m) int32.

    Examples
    --------
    >>> import numpy as np
    >>> hamming_distances(np.array([[0b1011]], np.uint8), np.array([[0b0001], [0b1011]], np.uint8)).tolist()
    [[2, 0]]
    """
    a, b = unsigned_bits(a), unsigned_bits(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise InputError(f"packed vectors of shapes {a.shape} and {b.shape} do not compare: give (n, k) and (m, k).")
    left, right = _words(a), np.ascontiguousarray(_words(b).T)  # (n, words), (words, m)
    distances = np.zeros((len(a), len(b)), dtype=np.int32)
    scratch = np.empty((len(a), min(BIT_TILE, len(b))), dtype=np.uint64)
    for start in range(0, len(b), BIT_TILE):  # a tile of corpus columns at a time: the scratch stays small
        tile, out = scratch[:, : min(BIT_TILE, len(b) - start)], distances[:, start : start + BIT_TILE]
        for word in range(left.shape[1]):
            np.bitwise_xor(left[:, word, None], right[word, start : start + BIT_TILE][None, :], out=tile)
            out += _popcount(tile)
    return distances


def integer_dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return the (n, m) products of int8 vectors, summed in integers (int32).

    By torch's int8 matrix product (VNNI/AMX where the CPU has them), else float64 (exact for any width bertkit writes).
    """
    import torch

    left, right = torch.from_numpy(np.ascontiguousarray(a)), torch.from_numpy(np.ascontiguousarray(b))
    if a.shape[1] > 1:  # torch 2.13's CPU kernel gives wrong sums for one-number vectors (tests hold the rest)
        try:
            return torch._int_mm(left, right.T).numpy()
        except (RuntimeError, AttributeError):  # pragma: no cover - a torch without int8 products on this device
            pass
    return (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.int32)


def squared_norms(vectors: np.ndarray) -> np.ndarray:
    """Each int8 vector's squared length, summed exactly (float64)."""
    wide = vectors.astype(np.int32)
    return np.einsum("ij,ij->i", wide, wide).astype(np.float64)
