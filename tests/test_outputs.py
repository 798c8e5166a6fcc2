"""Vector writers: formats round-trip, and a failed write leaves neither a partial file nor a temp file."""

import numpy as np
import pyarrow.parquet as pq
import pytest

from bertkit import InputError
from bertkit.io import writers as outputs


def test_formats_round_trip(tmp_path):
    vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
    outputs.write_vectors(tmp_path / "v.npy", vectors)
    np.testing.assert_array_equal(np.load(tmp_path / "v.npy"), vectors)
    outputs.write_vectors(tmp_path / "v.npz", vectors, ["a", "b", "c"])
    saved = np.load(tmp_path / "v.npz")
    np.testing.assert_array_equal(saved["vectors"], vectors)
    assert saved["ids"].tolist() == ["a", "b", "c"]
    outputs.write_vectors(tmp_path / "v.parquet", vectors, [10, 11, 12])
    table = pq.read_table(tmp_path / "v.parquet")
    assert table.column("id").to_pylist() == [10, 11, 12]
    np.testing.assert_array_equal(np.array(table.column("vector").to_pylist(), dtype=np.float32), vectors)


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "v.npy"
    target.write_bytes(b"previous complete result")

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(np, "save", explode)
    with pytest.raises(RuntimeError, match="disk full"):
        outputs.write_vectors(target, np.zeros((2, 2), np.float32))
    assert target.read_bytes() == b"previous complete result"
    assert [p.name for p in tmp_path.iterdir()] == ["v.npy"]


def test_unknown_extension_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"use one of .npy, .npz, .parquet"):
        outputs.write_vectors(tmp_path / "v.csv", np.zeros((1, 1), np.float32))


def test_token_vectors_npz(tmp_path):
    vectors = [np.arange(6, dtype=np.float32).reshape(2, 3), -np.arange(12, dtype=np.float32).reshape(4, 3)]
    outputs.write_token_vectors(tmp_path / "t.npz", [["a", "b"], ["c", "d", "e", "f"]], vectors, ["x", "y"])
    saved = np.load(tmp_path / "t.npz")
    assert saved["offsets"].tolist() == [0, 2, 6] and saved["ids"].tolist() == ["x", "y"]
    np.testing.assert_array_equal(saved["vectors"], np.concatenate(vectors))
    second = saved["vectors"][saved["offsets"][1] : saved["offsets"][2]]  # how a reader gets text 1 back
    np.testing.assert_array_equal(second, vectors[1])
    assert saved["tokens"].tolist() == ["a", "b", "c", "d", "e", "f"]
