"""Coverage-guided fuzzing (atheris) of what bertkit parses from users: the file readers and the option parsers.

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

SUFFIXES = (".tsv", ".csv", ".jsonl", ".txt", ".conll")
SCRATCH = Path(tempfile.mkdtemp(prefix="bertkit-fuzz-"))
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def read_file(selector: int, payload: bytes) -> None:
    path = SCRATCH / f"input{SUFFIXES[selector % 6]}"
    path.write_bytes(payload)
    if path.suffix == ".conll":
        read_tagged(path)
    elif path.suffix == ".txt":
        read_texts(path)
    elif (selector // 6) % 2:
        read_labelled(path)  # default columns: 0 and 1, or JSON fields text and label
    else:
        read_labelled(path, "text", "label")


def parse_options(payload: bytes) -> None:
    text = payload.decode("utf-8", "replace")
    parse_layers(text).resolve(7)
    parse_pooling(text)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    selector, payload = data[0], data[1:]  # selector % 6: 0-4 a file of each kind, 5 the option parsers
    try:
        if selector % 6 == 5:
            parse_options(payload)
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
        "tsv-plain": (b"\x06", b"a good film\t1\nawful\t0\n"),
        "csv": (b"\x01", b'text,label\n"a ""good"", long\nfilm",pos\nawful,neg\n'),
        "jsonl": (b"\x02", b'{"text": "a good film", "label": "pos"}\n{"text": "awful", "label": 0}\n'),
        "txt": (b"\x03", "a good film\n한국어 🙂\n".encode()),
        "conll": (b"\x04", b"-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n"),
        "layers": (b"\x05", b"last4:concat"),
        "layers-list": (b"\x05", b"-1,-2,0"),
        "pooling": (b"\x0b", b"cls+mean"),
    }
    for name, (selector, payload) in seeds.items():
        (corpus / name).write_bytes(selector + payload)
    for selector, relative in ((b"\x06", "sst2/dev.tsv"), (b"\x04", "conll2003/dev.txt")):
        if (SHARED / relative).is_file():
            head = b"".join((SHARED / relative).open("rb").readlines()[:40])
            (corpus / relative.replace("/", "-")).write_bytes(selector + head)


def main() -> None:
    corpora = [arg for arg in sys.argv[1:] if not arg.startswith("-")]
    for corpus in corpora:
        seed(Path(corpus))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
