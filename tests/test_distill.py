"""`bertkit distill`: a cut keeps the teacher's first K layers, so its vectors are the teacher's layer K, loaded by
transformers and sentence-transformers as by bertkit; the probe's table says which K; every bad input is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import run_cli, shared_file

from bertkit import Encoder, InputError, distill
from bertkit.tasks.distill import cut_choice
from bertkit.tasks.probe import ProbeResult, ProbeRow

TEXTS = ["a visually stunning rumination on love", "the plot is a mess", "I love Korea", "an enchanting , funny film"]


@pytest.fixture(scope="module")
def cut(tmp_path_factory):
    """The packaged model (6 layers, with its sentence-transformers modules) cut to 2 layers."""
    output = tmp_path_factory.mktemp("distill") / "minilm-2"
    return distill(output_dir=output, layers=2), output


def test_a_cut_is_the_teachers_first_layers_for_transformers_sentence_transformers_and_bertkit(cut, encoder):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    report, output = cut
    assert (report.layers, report.of, report.reason) == (2, 6, "asked for")
    student = AutoModel.from_pretrained(output)
    assert student.config.num_hidden_layers == 2 and len(student.encoder.layer) == 2
    tokenizer = AutoTokenizer.from_pretrained(output)
    inputs = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        got = student(**inputs, output_hidden_states=True).hidden_states
        want = encoder.model(**inputs, output_hidden_states=True).hidden_states
    assert len(got) == 3
    for mine, teachers in zip(got, want[:3]):
        torch.testing.assert_close(mine, teachers, atol=1e-5, rtol=0)
    ours = Encoder.from_pretrained(str(output)).embed(TEXTS)
    np.testing.assert_allclose(ours, SentenceTransformer(str(output), device="cpu").encode(TEXTS), atol=1e-5)
    at_layer_2 = encoder.embed(TEXTS, layers="2", normalize_embeddings=True)  # the vectors the probe scored at h2
    np.testing.assert_allclose(ours, at_layer_2, atol=1e-5)
    files = {path.name for path in output.iterdir()}
    assert {"modules.json", "sentence_bert_config.json", "1_Pooling", "tokenizer.json", "bertkit.json"} <= files
    assert "int8_calibration.safetensors" not in files  # the teacher's calibration is for its own layers
    record = json.loads((output / "bertkit.json").read_text())
    assert record["layers"] == 2 and record["of"] == 6 and record["method"] == "cut"


def test_a_cut_model_runs_on_every_precision_and_engine(cut):
    _, output = cut
    exact = Encoder.from_pretrained(str(output), engine="torch").embed(TEXTS)
    for options in ({"engine": "openvino"}, {"precision": "int8"}):
        try:
            other = Encoder.from_pretrained(str(output), **options).embed(TEXTS)
        except InputError as error:  # OpenVINO not installed
            assert "openvino" in str(error).lower()
            continue
        assert (other * exact).sum(1).min() > 0.99, options


def row(layer: int, score: float, pooling: str = "mean") -> ProbeRow:
    return ProbeRow(pooling, f"h{layer}" + (" (last)" if layer == 6 else ""), 384, score, score, 0.1, 1.0)


def test_the_probe_chooses_the_fewest_layers_within_the_tolerance_of_the_best():
    scores = {0: 0.60, 1: 0.70, 2: 0.78, 3: 0.805, 4: 0.81, 5: 0.812, 6: 0.80}
    rows = [row(layer, score) for layer, score in scores.items()] + [row(2, 0.99, "cls")]  # cls: not the vectors
    choice = cut_choice(ProbeResult("text", "accuracy", "macro_f1", rows))
    assert (choice.layers, choice.best) == (3, 5)  # 0.805 >= 0.812 - 0.01; layer 0 (embeddings) is no cut
    assert choice.reason() == "layer 3 scores 80.5, within 1.0 of the best layer 5 (81.2)"
    strict = cut_choice(ProbeResult("text", "accuracy", "macro_f1", rows), tolerance=0.0)
    assert strict.layers == strict.best == 5 and "scores best" in strict.reason()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"layers": 0}, "layers=0: this model has 6 layers; keep 1 to 6."),
        ({"layers": 7}, "layers=7: this model has 6 layers; keep 1 to 6."),
        ({"layers": "3"}, "layers='3': give a number of layers to keep, or 'best'"),
        ({"layers": "best"}, "layers='best' probes the layers on labelled data: give data (training file) and dev."),
        ({"layers": 2, "tolerance": 1.5}, "tolerance=1.5: give a share of accuracy, 0 to 1"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, kwargs, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("'", ".")):
        distill(output_dir=tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def test_an_existing_output_is_kept_unless_overwrite_and_only_when_bertkit_wrote_it(cut, tmp_path, monkeypatch, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my own")
    code, _, err = run_cli(monkeypatch, capsys, "distill", "-l", "2", "-o", mine, "--overwrite")
    assert code == 2 and "notes.txt" not in err and (mine / "notes.txt").read_text() == "my own", err
    _, output = cut
    before = (output / "model.safetensors").stat().st_mtime_ns
    code, _, err = run_cli(monkeypatch, capsys, "distill", "-l", "1", "-o", output)
    assert code == 2 and "--overwrite" in err and (output / "model.safetensors").stat().st_mtime_ns == before


def test_distill_best_on_the_command_line_follows_the_probe_and_the_probe_prints_the_command(
    tiny_dirs, tmp_path, monkeypatch, capsys
):
    train, dev = shared_file("sst2", "train.tsv"), shared_file("sst2", "dev.tsv")
    small = {name: tmp_path / f"{name}.tsv" for name in ("train", "dev")}
    for path, source, rows in zip(small.values(), (train, dev), (120, 60)):
        path.write_text("".join(source.read_text(encoding="utf-8").splitlines(keepends=True)[:rows]))
    model = str(tiny_dirs["bert_cased"])
    code, _, err = run_cli(
        monkeypatch,
        capsys,
        "probe",
        small["train"],
        "--dev",
        small["dev"],
        "-o",
        tmp_path / "probe",
        "-m",
        model,
        "--poolings",
        "mean",
    )
    assert code == 0, err
    if "no smaller model" in err:  # the last layer scored best: no cut to suggest
        layers = Encoder.from_pretrained(model).num_layers
    else:
        layers = int(err.split("bertkit distill ")[1].split("-l ")[1].split()[0])
        assert f"keeping {layers} of " in err and f"--data {small['train']} --dev {small['dev']}" in err
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        "distill",
        model,
        "-o",
        tmp_path / "cut",
        "--data",
        small["train"],
        "--dev",
        small["dev"],
    )
    assert code == 0 and f"kept {layers} of " in err, err
    assert json.loads((tmp_path / "cut" / "bertkit.json").read_text())["layers"] == layers
    code, _, err = run_cli(monkeypatch, capsys, "distill", model, "-o", tmp_path / "x", "-l", "three")
    assert code == 2 and "--layers three: give a number of layers to keep, or best" in err
    code, _, err = run_cli(
        monkeypatch, capsys, "distill", model, "-o", tmp_path / "x", "-l", "1", "--data", small["train"]
    )
    assert code == 2 and "--data: the probe's data, for -l best" in err and not (tmp_path / "x").exists()


def test_training_on_unlabelled_texts_brings_the_cut_closer_to_the_teachers_vectors(tmp_path):
    """--texts: the cut learns the teacher's sentence vectors (MSE), on held-out texts closer than the cut alone."""
    model = None  # the packaged model: cut to 2 of its 6 layers, its vectors are another layer's until trained
    sentences = [line.split("\t")[0] for line in shared_file("sst2", "train.tsv").read_text().splitlines()[:300]]
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(sentences[:200]) + "\n")
    held_out = sentences[200:]
    plain = distill(model, tmp_path / "plain", layers=2)
    trained = distill(model, tmp_path / "trained", layers=2, texts=texts, epochs=1, batch_size=16, learning_rate=5e-4)
    record = json.loads((tmp_path / "trained" / "bertkit.json").read_text())
    assert (
        record["method"] == "cut and distilled"
        and record["texts"] == 200
        and record["loss_last"] < record["loss_first"]
    )
    assert "trained on 200 texts" in trained.reason and plain.reason == "asked for"
    teacher = Encoder.from_pretrained(model).embed(held_out)
    error = {
        name: float(((Encoder.from_pretrained(str(tmp_path / name)).embed(held_out) - teacher) ** 2).mean())
        for name in ("plain", "trained")
    }
    assert error["trained"] < 0.85 * error["plain"], error
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    with pytest.raises(InputError, match="no texts to distil on"):
        distill(model, tmp_path / "none", layers=2, texts=empty)
    with pytest.raises(InputError, match="epochs=0: give a whole number, 1 or more."):
        distill(model, tmp_path / "none", layers=2, texts=texts, epochs=0)
    assert not (tmp_path / "none").exists()
