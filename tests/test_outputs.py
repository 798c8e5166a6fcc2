"""Vector writers: formats round-trip, and a failed write leaves neither a partial file nor a temp file."""

import numpy as np
import pyarrow.parquet as pq
import pytest

from bertkit import InputError
from bertkit.io import vectors as vectors_module
from bertkit.io import writers as outputs


def test_formats_round_trip(tmp_path, encoder):
    from bertkit.io.stream import embed_file
    from bertkit.io.vectors import read_vectors

    texts = ["I love Korea", "the movie was great", "a dull mess"]
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(texts) + "\n")
    expected = encoder.embed(texts)
    embed_file(encoder, source, tmp_path / "v.npy")
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-6)
    for suffix in (".npz", ".parquet"):
        vectors, ids, meta = read_vectors(
            embed_file(encoder, source, tmp_path / f"v{suffix}") and tmp_path / f"v{suffix}"
        )
        np.testing.assert_allclose(vectors, expected, atol=1e-6)
        assert ids.tolist() == [0, 1, 2] and meta["fingerprint"] == encoder.fingerprint
    table = pq.read_table(tmp_path / "v.parquet")
    assert table.column("id").to_pylist() == [0, 1, 2]


def test_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "v.npy"
    target.write_bytes(b"previous complete result")
    with pytest.raises(RuntimeError, match="disk full"), outputs.atomic_path(target) as temporary:
        temporary.write_bytes(b"half a")
        raise RuntimeError("disk full")
    assert target.read_bytes() == b"previous complete result"
    assert [p.name for p in tmp_path.iterdir()] == ["v.npy"]


def test_unknown_extension_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"use one of .npy, .npz, .parquet"):
        outputs.check_output_path(tmp_path / "v.csv")


def test_token_vectors_npz(tmp_path):
    vectors = [np.arange(6, dtype=np.float32).reshape(2, 3), -np.arange(12, dtype=np.float32).reshape(4, 3)]
    vectors_module.write_token_vectors(tmp_path / "t.npz", [["a", "b"], ["c", "d", "e", "f"]], vectors, ["x", "y"])
    saved = np.load(tmp_path / "t.npz")
    assert saved["offsets"].tolist() == [0, 2, 6] and saved["ids"].tolist() == ["x", "y"]
    np.testing.assert_array_equal(saved["vectors"], np.concatenate(vectors))
    second = saved["vectors"][saved["offsets"][1] : saved["offsets"][2]]  # how a reader gets text 1 back
    np.testing.assert_array_equal(second, vectors[1])
    assert saved["tokens"].tolist() == ["a", "b", "c", "d", "e", "f"]
