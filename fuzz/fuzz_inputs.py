"""Coverage-guided fuzzing (atheris) of what bertkit parses from users: the file readers (texts, labels, pairs, scores,
label sets, CoNLL, saved vectors) and the option parsers.

Any exception other than `BertkitError` (one clear line for the user) is a finding. Run for a bounded time:

    pip install atheris
    python fuzz/fuzz_inputs.py -max_total_time=300 -rss_limit_mb=4096 fuzz/corpus

The corpus folder is made and seeded (bertkit's samples, the first lines of ../shared/data when present) on the
first run; atheris adds what it learns there. A crash writes `crash-*` beside it: turn it into a regression test.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["bertkit"]):  # only bertkit: torch, scipy... are not the target
    from bertkit.encoder.layers import parse_layers
    from bertkit.encoder.pooling import parse_pooling
    from bertkit.errors import BertkitError
    from bertkit.io.conll import read_tagged
    from bertkit.io.readers import read_labelled, read_texts
    from bertkit.io.stream import read_vectors

SUFFIXES = (".tsv", ".csv", ".jsonl", ".txt", ".conll")
KINDS = 9  # selector % KINDS: 0-4 a file of each suffix, 5 the option parsers, 6 pairs/scores/label sets, 7-8 vectors
LABEL_KINDS = ("categorical", "numeric", "multi")
SCRATCH = Path(tempfile.mkdtemp(prefix="bertkit-fuzz-"))
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def read_file(selector: int, payload: bytes) -> None:
    path = SCRATCH / f"input{SUFFIXES[selector % KINDS]}"
    path.write_bytes(payload)
    if path.suffix == ".conll":
        read_tagged(path)
    elif path.suffix == ".txt":
        read_texts(path)
    elif (selector // KINDS) % 2:
        read_labelled(path)  # default columns: 0 and 1, or JSON fields text and label
    else:
        read_labelled(path, "text", "label")


def read_pairs(selector: int, payload: bytes) -> None:
    """A text-pair file (TSV, or JSONL with text, text_pair, label) read as classes, scores or label sets."""
    path = SCRATCH / ("pairs.jsonl" if (selector // KINDS) % 2 else "pairs.tsv")
    path.write_bytes(payload)
    kind = LABEL_KINDS[(selector // (2 * KINDS)) % 3]
    read_labelled(path, paired=True, label_kind=kind, label_separator="|" if selector & 128 else ",")


def read_vector_file(selector: int, payload: bytes) -> None:
    """Any bytes as a vectors file `bertkit search` would open (.npz or .parquet)."""
    path = SCRATCH / ("vectors.npz" if selector % KINDS == 7 else "vectors.parquet")
    path.write_bytes(payload)
    read_vectors(path)


def parse_options(payload: bytes) -> None:
    text = payload.decode("utf-8", "replace")
    parse_layers(text).resolve(7)
    parse_pooling(text)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    selector, payload = data[0], data[1:]
    try:
        if selector % KINDS == 5:
            parse_options(payload)
        elif selector % KINDS == 6:
            read_pairs(selector, payload)
        elif selector % KINDS in (7, 8):
            read_vector_file(selector, payload)
        else:
            read_file(selector, payload)
    except BertkitError as exc:
        message = str(exc)
        if "\n" in message.strip():
            raise AssertionError(f"a user error must be one line: {message!r}") from None


def seed(corpus: Path) -> None:
    """Valid inputs of every kind, so the fuzzer starts from files that parse."""
    corpus.mkdir(parents=True, exist_ok=True)
    if any(corpus.iterdir()):
        return
    seeds = {
        "tsv": (b"\x00", b"text\tlabel\na good film\tpos\nawful\tneg\n"),
        "tsv-plain": (b"\x09", b"a good film\t1\nawful\t0\n"),
        "pairs": (b"\x06", b"a cat\ta dog\t0.5\nthe sun\tthe moon\t1.25\n"),
        "pairs-multi": (b"\x2a", b'{"text": "a", "text_pair": "b", "label": "x,y"}\n'),
        "csv": (b"\x01", b'text,label\n"a ""good"", long\nfilm",pos\nawful,neg\n'),
        "jsonl": (b"\x02", b'{"text": "a good film", "label": "pos"}\n{"text": "awful", "label": 0}\n'),
        "txt": (b"\x03", "a good film\n한국어 🙂\n".encode()),
        "conll": (b"\x04", b"-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n"),
        "layers": (b"\x05", b"last4:concat"),
        "layers-list": (b"\x05", b"-1,-2,0"),
        "pooling": (b"\x0e", b"cls+mean"),
    }
    seeds.update(vector_seeds())
    for name, (selector, payload) in seeds.items():
        (corpus / name).write_bytes(selector + payload)
    for selector, relative in ((b"\x09", "sst2/dev.tsv"), (b"\x04", "conll2003/dev.txt")):
        if (SHARED / relative).is_file():
            head = b"".join((SHARED / relative).open("rb").readlines()[:40])
            (corpus / relative.replace("/", "-")).write_bytes(selector + head)


def vector_seeds() -> dict[str, tuple[bytes, bytes]]:
    """A small .npz and .parquet as bertkit writes them (vectors, ids, metadata)."""
    import io
    import json

    import numpy as np

    meta = json.dumps({"bertkit": "fuzz", "model": "default", "dim": 4, "output": "float32"})
    vectors, ids = np.arange(8, dtype=np.float32).reshape(2, 4), np.arange(2)
    buffer = io.BytesIO()
    np.savez(buffer, vectors=vectors, ids=ids, meta=np.array(meta))
    seeds = {"npz": (b"\x07", buffer.getvalue())}
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return seeds
    table = pa.table({"id": ids, "vector": pa.array(vectors.tolist(), pa.list_(pa.float32(), 4))})
    sink = io.BytesIO()
    pq.write_table(table.replace_schema_metadata({"bertkit": meta}), sink)
    seeds["parquet"] = (b"\x08", sink.getvalue())
    return seeds


def main() -> None:
    corpora = [arg for arg in sys.argv[1:] if not arg.startswith("-")]
    for corpus in corpora:
        seed(Path(corpus))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
