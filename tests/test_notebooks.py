"""The notebooks in docs/notebooks run top to bottom in a fresh kernel (on fewer sentences than their default), and
bertkit's objects show themselves readably: a table or picture in Jupyter, a line of text in a plain `repr`."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_DATA, shared_file

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "docs" / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    shared_file("sst2", "train.tsv")
    monkeypatch.setenv("BERTKIT_DATA", str(SHARED_DATA))
    monkeypatch.setenv("BERTKIT_NOTEBOOK_LIMIT", "160")
    monkeypatch.setenv("BERTKIT_NOTEBOOK_EPOCHS", "1")
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # huggingface_hub refuses even 127.0.0.1 when offline
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # what the notebooks write goes under this test's folder
    book = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # a cell that raises fails here, naming the cell
    outputs = [o for cell in book.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    if path.stem == "visual-guide":
        shown = "\n".join(o.get("data", {}).get("text/plain", "") for o in outputs)
        assert re.search(r"logistic regression 0\.\d+ +dummy 0\.\d+", "\n".join(o.get("text", "") for o in outputs))
        assert "Encoder('default'" in shown and any("image/png" in o.get("data", {}) for o in outputs)


def install_cell(path: Path = NOTEBOOKS[0]) -> str:
    """The notebook's install cell (the same in every notebook)."""
    import json

    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return next("".join(c["source"]) for c in cells if "torch==2.13.0" in "".join(c["source"]))


def test_every_notebook_has_the_same_install_cell():
    """Installed packages are looked up by distribution (a `bertkit/` folder beside the notebook is not bertkit), torch
    is the pinned CPU wheel where there is none, bertkit comes from the checkout or BERTKIT_SOURCE (it is not on PyPI)
    with the notebooks' extra (httpx and the clients serving.ipynb imports). tests/test_wheel.py runs the cell in a
    fresh virtual environment outside the checkout."""
    cells = {install_cell(path) for path in NOTEBOOKS}
    assert len(cells) == 1
    cell = cells.pop()
    assert "importlib.metadata.version" in cell and "find_spec" not in cell and "BERTKIT_SOURCE" in cell
    assert '"torch==2.13.0"' in cell and "bertkit[notebooks] @" in cell


# ---- rich display ---------------------------------------------------------------------------------------------
def test_an_encoder_prints_what_it_is(encoder):
    assert repr(encoder) == (
        "Encoder('default': BertModel, 6 layers, hidden 384, max_length 256, fp32 on cpu)"
        if encoder.device.type == "cpu"
        else repr(encoder)
    )
    page = encoder._repr_html_()
    assert "<table" in page and "<td>384</td>" in page and "<td>BertModel</td>" in page


def test_a_batch_shows_the_guides_table(encoder):
    batch = encoder.tokenize(["I love Korea", "a visually stunning rumination on love"])
    assert repr(batch).splitlines() == [
        "Batch(2 rows × 9 tokens)",
        "  0: [CLS] i love korea [SEP] [PAD] [PAD] [PAD] [PAD]",
        "  1: [CLS] a visually stunning rum ##ination on love [SEP]",
    ]
    page = batch._repr_html_()
    assert page.count("<table") == 2 and "<td>##ination</td>" in page and "<th>mask</th>" in page
    assert "tensor(" not in repr(batch)


def test_token_vectors_and_reports_show_their_contents(encoder):
    (tokens,), report = encoder.embed_with_report(["I love <Korea>"], pooling="none")
    assert repr(tokens).startswith("TokenEmbedding(7 tokens, vectors 7×384: [CLS] i love < korea > [SEP])")
    page = tokens._repr_html_()
    assert "<td>&lt;</td>" in page and page.count("<tr>") == 8  # escaped, a row per token and the header
    norm = float(np.linalg.norm(tokens.vectors[1]))
    assert f"<td>{norm:.4g}</td>" in page
    assert repr(report).startswith("EmbedReport(texts: 1; token limit: 256; truncated: 0; in windows: 0;")
    assert "vocabulary coverage" in report._repr_html_()


def test_an_evaluation_report_is_a_dict_a_table_and_a_picture(encoder):
    from bertkit import BertVectorizer, TextClassifier
    from bertkit.io.readers import read_labelled, sample_path

    data = read_labelled(sample_path("reviews.tsv"), "text", "label")
    clf = TextClassifier(BertVectorizer(layers="last"), cv=3).fit(data.texts[:60], data.labels[:60])
    report = clf.evaluate(data.texts[60:], data.labels[60:])
    predicted = clf.predict(data.texts[60:])
    assert report["accuracy"] == pytest.approx(np.mean(predicted == np.array(data.labels[60:])))
    assert repr(report).startswith(f"accuracy {report['accuracy']:.4f}") and "confusion matrix" in repr(report)
    assert report._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "data:image/png;base64," in report._repr_html_()
    import json

    assert json.loads(json.dumps(report))["n"] == 20  # still a plain dict underneath


def test_fine_tuned_runs_and_probes_print_a_summary(tiny_dirs, tmp_path):
    from test_finetune import sentiment_file, tiny_args

    from bertkit import finetune

    train = sentiment_file(tmp_path / "train.tsv", n=24)
    dev = sentiment_file(tmp_path / "dev.tsv", n=8, seed=1)
    run = finetune(
        train, dev, args=tiny_args(num_train_epochs=1), output_dir=tmp_path / "run", model=str(tiny_dirs["bert_cased"])
    )
    assert repr(run).startswith("FineTunedClassifier(text on ") and "labels neg, pos" in repr(run)
    assert "dev accuracy" in repr(run) and "<td>fp32 on cpu</td>" in run._repr_html_()
