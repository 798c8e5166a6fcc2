"""Fine-tuning mechanics on tiny random models, plain-transformers loading, resume, and one small real run."""

import json
import logging
import random

import numpy as np
import pytest
import torch
import warm
from conftest import shared_file
from safetensors.torch import load_file
from servers import start_child
from test_cli import run

from bertkit.errors import InputError
from bertkit.tasks.finetune import FinetuneArguments, finetune
from bertkit.tasks.finetune.examples import IGNORE_INDEX, length_grouped_batches, token_examples
from bertkit.tasks.finetuned import FineTunedClassifier
from bertkit.tasks.load import load_run
from bertkit.tasks.tagger import FineTunedTagger

POSITIVE, NEGATIVE = ["good", "great", "love"], ["bad", "rejects", "boycott"]
FILLER = ["the", "movie", "was", "a", "film", "is", "big", "I", "to"]
ENTITIES = [(["EU"], "ORG"), (["German"], "MISC"), (["British"], "MISC"), (["New", "York"], "LOC"), (["Korea"], "LOC")]


def sentiment_file(path, n=64, seed=0):
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        label = i % 2
        words = rng.sample(FILLER, 4) + [rng.choice(POSITIVE if label else NEGATIVE)]
        rng.shuffle(words)
        lines.append(f"{' '.join(words)}\t{'pos' if label else 'neg'}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def conll_file(path, n=48, seed=0, long_every=0):
    rng = random.Random(seed)
    blocks = []
    for i in range(n):
        rows = []
        for _ in range(rng.randint(2, 5) + (12 if long_every and i % long_every == 0 else 0)):
            if rng.random() < 0.35:
                words, kind = rng.choice(ENTITIES)
                rows += [f"{w} X X {'B' if k == 0 else 'I'}-{kind}" for k, w in enumerate(words)]
            else:
                rows.append(f"{rng.choice(FILLER)} X X O")
        blocks.append("\n".join(rows))
    path.write_text("-DOCSTART- -X- -X- O\n\n" + "\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


def tiny_args(**extra):
    return FinetuneArguments(
        **{"num_train_epochs": 3, "learning_rate": 3e-3, "batch_size": 8, "warmup_ratio": 0.0, **extra}
    )


def test_text_finetune_learns_and_loads_in_plain_transformers(tiny_dirs, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    data = sentiment_file(tmp_path / "train.tsv", n=128)
    dev = sentiment_file(tmp_path / "dev.tsv", n=32, seed=1)
    model = finetune(
        data,
        dev,
        output_dir=tmp_path / "run",
        model=str(tiny_dirs["bert_cased"]),
        args=tiny_args(num_train_epochs=6, early_stopping_patience=6),
    )
    record = json.loads((tmp_path / "run" / "bertkit.json").read_text())
    losses = [h["train_loss"] for h in record["training"]["history"]]
    assert losses[-1] < losses[0] * 0.5, losses
    assert record["bertkit"]["kind"] == "finetuned-text" and record["labels"] == ["neg", "pos"]
    assert record["metrics"]["accuracy"] >= 0.9
    assert record["data"]["train_sha256"] and record["data"]["train_rows"] == 128 and record["data"]["dev_rows"] == 32
    assert record["args"]["learning_rate"] == 3e-3 and not list((tmp_path / "run").glob("checkpoint-*"))

    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path / "run").eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "run")
    assert plain.config.id2label == {0: "neg", 1: "pos"}
    texts = ["the movie was great", "I boycott the big film", "love"]
    with torch.no_grad():
        logits = plain(**tokenizer(texts, padding=True, return_tensors="pt")).logits
    ours = model.predict_proba(texts)
    assert torch.allclose(torch.softmax(logits, -1), torch.from_numpy(ours), atol=1e-5)
    assert list(model.predict(texts)) == [plain.config.id2label[int(i)] for i in logits.argmax(-1)]
    assert isinstance(load_run(tmp_path / "run"), FineTunedClassifier)


def final_weights(directory):
    return load_file(str(directory / "model.safetensors"))


@pytest.mark.parametrize("stop", [7, 6])  # early in epoch 2 (Trainer's epoch reads 1.17), or epoch 1's last step
def test_same_seed_same_weights_and_resume_matches_an_uninterrupted_run(tiny_dirs, tmp_path, stop):
    data = sentiment_file(tmp_path / "train.tsv")
    model = str(tiny_dirs["bert_cased"])
    options = dict(model=model, args=tiny_args(num_train_epochs=2), dev_share=0.25)
    finetune(data, output_dir=tmp_path / "a", **options)
    finetune(data, output_dir=tmp_path / "b", **options)

    def interrupt(state):
        if state.global_step == stop:  # 6 batches per epoch
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finetune(data, output_dir=tmp_path / "c", callbacks=[interrupt], **options)
    saved = json.loads((tmp_path / "c.partial" / f"checkpoint-{stop}" / "trainer_state.json").read_text())
    assert saved["global_step"] == stop and saved["epoch"] == pytest.approx(stop / 6)  # the step it stopped after
    assert not (tmp_path / "c" / "bertkit.json").exists()
    with pytest.raises(InputError, match="unfinished run; pass --resume"):
        finetune(data, output_dir=tmp_path / "c", **options)
    finetune(data, output_dir=tmp_path / "c", resume=True, **options)

    a, b, c = (final_weights(tmp_path / name) for name in "abc")
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "same seed, different weights"
    assert all(torch.equal(a[k], c[k]) for k in a), "resumed run differs from the uninterrupted one"
    records = [json.loads((tmp_path / n / "bertkit.json").read_text()) for n in "ac"]
    said = [[(h["epoch"], h["dev_score"], h["train_loss"]) for h in r["training"]["history"]] for r in records]
    assert said[0] == said[1] and [epoch for epoch, _, _ in said[1]] == [1, 2]  # the cut epoch was not scored
    assert records[0]["metrics"] == records[1]["metrics"]
    with pytest.raises(InputError, match="this run already finished"):
        finetune(data, output_dir=tmp_path / "c", resume=True, **options)
    with pytest.raises(InputError, match="no checkpoint to resume from"):
        finetune(data, output_dir=tmp_path / "d", resume=True, **options)


def test_resume_refuses_a_changed_command(tiny_dirs, tmp_path):
    data = sentiment_file(tmp_path / "train.tsv")

    def interrupt(state):
        raise KeyboardInterrupt

    options = dict(model=str(tiny_dirs["bert_cased"]), dev_share=0.25)
    with pytest.raises(KeyboardInterrupt):
        finetune(data, output_dir=tmp_path / "run", args=tiny_args(), callbacks=[interrupt], **options)
    with pytest.raises(InputError, match="other settings .*args.learning_rate was 0.003, now 0.001"):
        finetune(data, output_dir=tmp_path / "run", args=tiny_args(learning_rate=1e-3), resume=True, **options)


def test_token_finetune_predicts_entities_with_character_spans(tiny_dirs, tmp_path, monkeypatch, capsys, caplog):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    train = conll_file(tmp_path / "train.txt", n=80, long_every=5)
    dev = conll_file(tmp_path / "dev.txt", n=24, seed=1)
    with caplog.at_level(logging.INFO, logger="bertkit"):
        tagger = finetune(
            train,
            dev,
            task="token",
            output_dir=tmp_path / "ner",
            model=str(tiny_dirs["bert_cased"]),
            args=tiny_args(num_train_epochs=4, max_length=12),
        )
    assert any("were read in overlapping windows" in r.getMessage() for r in caplog.records)
    record = json.loads((tmp_path / "ner" / "bertkit.json").read_text())
    assert record["bertkit"]["kind"] == "finetuned-token"
    assert record["labels"] == ["O", "B-LOC", "I-LOC", "B-MISC", "B-ORG"]
    assert record["metrics"]["f1"] >= 0.8, record["metrics"]
    plain = AutoModelForTokenClassification.from_pretrained(tmp_path / "ner").eval()
    assert plain.config.id2label[1] == "B-LOC"
    words = ["EU", "rejects", "German", "call", "in", "New", "York"]
    encoded = AutoTokenizer.from_pretrained(tmp_path / "ner")([words], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        best = plain(**encoded).logits[0].argmax(-1)
    firsts = [encoded.word_ids(0).index(w) for w in range(len(words))]
    assert tagger.predict_word_tags([words]) == [[plain.config.id2label[int(best[p])] for p in firsts]]

    text = "EU rejects the German movie in New York ."
    [entities] = tagger.predict([text])
    for entity in entities:
        assert text[entity.char_start : entity.char_end] == entity.text and 0 < entity.score <= 1
    assert ("LOC", "New York") in {(e.type, e.text) for e in entities}
    long_sentence = ["the", "movie"] * 20 + ["Korea"]
    [tags] = tagger.predict_word_tags([long_sentence])
    assert len(tags) == len(long_sentence) and tags[-1] == "B-LOC"
    assert isinstance(load_run(tmp_path / "ner"), FineTunedTagger)

    code, out, _ = run(monkeypatch, capsys, "evaluate", tmp_path / "ner", dev)
    assert code == 0 and out.startswith("entity F1") and "overall" in out
    code, out, err = run(monkeypatch, capsys, "predict", tmp_path / "ner", text)
    assert code == 0, err
    assert out.splitlines()[0].split("\t") == ["row", "type", "start", "end", "score", "entity"]
    assert ["0", "LOC", "31", "39"] in [line.split("\t")[:4] for line in out.splitlines()]
    code, _, err = run(monkeypatch, capsys, "evaluate", tmp_path / "ner", sentiment_file(tmp_path / "s.tsv"))
    assert code == 2 and "is a tagger" in err and "sentence classifier" in err


def test_long_sentences_train_on_the_windows_the_tagger_reads(encoder):
    sentences = [["Peter", "Blackburn"], ["unbelievably"] * 30]
    examples, windowed = token_examples(encoder.tokenizer, sentences, [[1, 2], list(range(30))], max_length=16)
    assert windowed == 1 and len(examples) > 2
    assert all(len(e.input_ids) <= 16 and len(e.labels) == len(e.input_ids) for e in examples)
    assert [label for label in examples[0].labels if label != IGNORE_INDEX] == [1, 2]
    labelled = [label for e in examples[1:] for label in e.labels if label != IGNORE_INDEX]
    assert set(labelled) == set(range(30)) and labelled == sorted(labelled)  # every word, at its first sub-token


def test_length_grouped_batches_cover_each_example_once_and_group_lengths():
    lengths = list(np.random.default_rng(0).integers(3, 60, 1000))
    batches = length_grouped_batches(lengths, 32, np.random.default_rng(1))
    assert sorted(i for b in batches for i in b) == list(range(1000))
    padding = sum(max(lengths[i] for i in b) * len(b) for b in batches) - sum(lengths)
    naive = sum(max(lengths[i : i + 32]) * len(lengths[i : i + 32]) for i in range(0, 1000, 32)) - sum(lengths)
    assert padding < naive / 5
    assert batches != length_grouped_batches(lengths, 32, np.random.default_rng(2))


@pytest.mark.parametrize(
    "case, message",
    [
        ("one_class", "one class only"),
        ("empty_dev", "no data rows"),
        ("tsv_as_token", "looks like sentence/label data"),
        ("conll_as_text", "word/tag \\(CoNLL\\) file.*use --task token"),
        ("exists", "run already exists; nothing was touched.*--overwrite"),
        ("bertkit_run", "run already exists; nothing was touched.*--overwrite"),  # bertkit's own: the same refusal
        ("a_file", "run already exists; nothing was touched.*--overwrite"),
        ("bad_column_count", "line 3: 2 columns, but the file started with 4"),
        ("not_iob", "line 2: tag 'PER' is not IOB"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(tiny_dirs, tmp_path, case, message):
    task, train, dev = "text", sentiment_file(tmp_path / "train.tsv", n=16), None
    output = tmp_path / "run"
    if case == "one_class":
        train.write_text("good film\tpos\ngreat film\tpos\nlove it\tpos\n")
    elif case == "empty_dev":
        dev = tmp_path / "dev.tsv"
        dev.write_text("")
    elif case == "tsv_as_token":
        task = "token"
    elif case == "conll_as_text":
        train = conll_file(tmp_path / "train.txt")
    elif case in ("exists", "bertkit_run"):
        output.mkdir()
        (output / ("keep.txt" if case == "exists" else "bertkit.json")).write_text("mine")
    elif case == "a_file":
        output.write_text("mine")
    elif case == "bad_column_count":
        task, train = "token", tmp_path / "train.txt"
        train.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman B-MISC\n")
    elif case == "not_iob":
        task, train = "token", tmp_path / "train.txt"
        train.write_text("Peter O\nBlackburn PER\n")
    with pytest.raises(InputError, match=message):
        finetune(train, dev, task=task, output_dir=output, model=str(tiny_dirs["bert_cased"]), args=tiny_args())
    if case in ("exists", "bertkit_run", "a_file"):
        assert (output if case == "a_file" else next(output.iterdir())).read_text() == "mine"
    else:
        assert not output.exists()


def first_lines(source, n, target):
    target.write_text("".join(source.read_text(encoding="utf-8").splitlines(keepends=True)[:n]), encoding="utf-8")
    return target


@pytest.mark.slow
def test_cli_finetune_evaluate_predict_on_the_default_model(monkeypatch, capsys, tmp_path):
    """A small real run: 400 SST-2 sentences, 4 epochs, must clearly beat the majority baseline on 300 dev rows."""
    train, dev = shared_file("sst2", "train.tsv"), shared_file("sst2", "dev.tsv")
    small_train, small_dev = (
        first_lines(train, 400, tmp_path / "train.tsv"),
        first_lines(dev, 300, tmp_path / "dev.tsv"),
    )
    code, out, err = run(
        monkeypatch,
        capsys,
        "finetune",
        small_train,
        "--dev",
        small_dev,
        "--task",
        "text",
        "--epochs",
        "4",
        "-o",
        tmp_path / "ft",
    )
    assert code == 0, err
    assert "epoch 4/4" in err and "saved" in err
    record = json.loads((tmp_path / "ft" / "bertkit.json").read_text())
    assert record["metrics"]["accuracy"] >= 0.72, record["training"]["history"]

    code, out, _ = run(monkeypatch, capsys, "evaluate", tmp_path / "ft", small_dev)
    assert code == 0 and out.startswith("accuracy") and "n=300" in out
    accuracy = float(out.split()[1])
    assert accuracy == pytest.approx(record["metrics"]["accuracy"], abs=5e-5)  # printed with 4 decimals
    baseline = float(out.split("majority-class baseline ")[1].split()[0])
    assert accuracy >= baseline + 0.2

    code, out, err = run(
        monkeypatch,
        capsys,
        "predict",
        tmp_path / "ft",
        "a visually stunning rumination on love",
        "a dull , lifeless mess",
    )
    assert code == 0, err
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows[0] == ["label", "probability", "text"] and [r[0] for r in rows[1:]] == ["1", "0"]

    code, _, err = run(monkeypatch, capsys, "finetune", small_train, "--dev", small_dev, "-o", tmp_path / "ft")
    assert code == 2 and "already exists" in err


@pytest.mark.slow
def test_ctrl_c_on_the_command_line_leaves_a_checkpoint_that_resumes_to_the_same_weights(tiny_dirs, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    data = sentiment_file(tmp_path / "train.tsv", n=1200)
    command = [
        sys.executable,
        "-m",
        "bertkit.cli",
        "finetune",
        str(data),
        "--model",
        str(tiny_dirs["bert_cased"]),
        "--epochs",
        "4",
        "--batch-size",
        "8",
        "--lr",
        "3e-3",
        "--threads",
        "1",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    warm.run(command + ["-o", str(tmp_path / "whole")], check=True, env=env, capture_output=True)

    process = start_child(command + ["-o", str(tmp_path / "cut")], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list((tmp_path / "cut.partial").glob("checkpoint-*/trainer_state.json")) and time.time() < deadline:
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    steps = [
        json.loads(p.read_text())["global_step"]
        for p in (tmp_path / "cut.partial").glob("checkpoint-*/trainer_state.json")
    ]
    assert (
        "--resume" in err and "interrupted in epoch" in err and max(steps) > 135
    )  # after epoch 1 (135 steps), mid-epoch 2
    assert not (tmp_path / "cut" / "bertkit.json").exists()
    warm.run(command + ["-o", str(tmp_path / "cut"), "--resume"], check=True, env=env, capture_output=True)
    whole, cut = final_weights(tmp_path / "whole"), final_weights(tmp_path / "cut")
    assert all(torch.equal(whole[k], cut[k]) for k in whole)


@pytest.mark.parametrize("architecture", ["distilbert", "electra", "roberta"])
def test_other_architectures_fine_tune_and_reload(tiny_dirs, tmp_path, architecture):
    from transformers import (
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    model = str(tiny_dirs[architecture])
    options = dict(model=model, args=tiny_args(num_train_epochs=1), dev_share=0.25)
    classifier = finetune(sentiment_file(tmp_path / "train.tsv", n=32), output_dir=tmp_path / "text", **options)
    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path / "text").eval()
    assert plain.config.id2label == {0: "neg", 1: "pos"}
    texts = ["the movie was great", "I boycott the big film"]
    with torch.no_grad():
        logits = plain(
            **AutoTokenizer.from_pretrained(tmp_path / "text")(texts, padding=True, return_tensors="pt")
        ).logits
    np.testing.assert_allclose(classifier.predict_proba(texts), torch.softmax(logits, -1).numpy(), atol=1e-5, rtol=0)

    tagger = finetune(conll_file(tmp_path / "train.txt", n=24), task="token", output_dir=tmp_path / "token", **options)
    plain = AutoModelForTokenClassification.from_pretrained(tmp_path / "token").eval()
    assert type(plain).__name__.lower().startswith(architecture)
    words = ["EU", "rejects", "German", "call"]
    encoded = AutoTokenizer.from_pretrained(tmp_path / "token")([words], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        best = plain(**encoded).logits[0].argmax(-1)
    firsts = [encoded.word_ids(0).index(w) for w in range(len(words))]  # each word's first sub-token
    assert tagger.predict_word_tags([words]) == [[plain.config.id2label[int(best[p])] for p in firsts]]


@pytest.mark.parametrize("on_terminal", [True, False])
def test_training_reports_its_steps_through_the_one_reporter_and_prints_no_raw_dicts(
    tiny_dirs, tmp_path, monkeypatch, capsys, caplog, on_terminal
):
    """Issue 45: piped, finetune said nothing between epochs; on a terminal transformers printed raw dicts a step."""
    from bertkit.encoder import progress

    monkeypatch.setattr(progress, "terminal", lambda: on_terminal)
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)  # a line at every step off a terminal
    data = sentiment_file(tmp_path / "train.tsv", n=32)
    with caplog.at_level(logging.INFO, logger="bertkit"):
        finetune(data, data, output_dir=tmp_path / "run", model=str(tiny_dirs["bert_cased"]), args=tiny_args())
    err = capsys.readouterr().err
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("finetune: ")]
    assert "{'loss'" not in err + "".join(r.getMessage() for r in caplog.records) and "train_runtime" not in err
    if on_terminal:  # tqdm's bar, redrawn in place: steps, loss and speed
        assert lines == [] and "finetune" in err and "/12" in err and "loss=" in err and "examples/s=" in err
    else:
        assert lines[-1].startswith("finetune: 12/12 steps, ") and "loss " in lines[-1] and "examples/s" in lines[-1]
        assert len(lines) >= 6


def test_progress_false_keeps_training_silent(tiny_dirs, tmp_path, capsys, caplog):
    data = sentiment_file(tmp_path / "train.tsv", n=16)
    with caplog.at_level(logging.INFO, logger="bertkit"):
        finetune(
            data,
            data,
            output_dir=tmp_path / "run",
            model=str(tiny_dirs["bert_cased"]),
            args=tiny_args(),
            progress=False,
        )
    assert not [r for r in caplog.records if r.getMessage().startswith("finetune: ")]
    assert "steps" not in capsys.readouterr().err


def test_question_answering_takes_its_own_step_defaults_and_what_is_given_stays():
    """benchmarks/qa_defaults.py: on 1,000 questions batches of 16 at 2e-4 learn far more than 32 at 1e-4; on 300,
    3 epochs learn nothing and 10 at 1e-4 do (issue 45): qa's schedule waits for the number of training questions."""
    from bertkit.tasks.finetune.run import _arguments
    from bertkit.tasks.finetune.settings import SMALL_QA

    text = FinetuneArguments(task="text")
    assert (text.batch_size, text.learning_rate, text.num_train_epochs, text.early_stopping_patience) == (
        32,
        1e-4,
        3,
        2,
    )
    qa = _arguments(None, "qa", {})
    assert (qa.batch_size, qa.learning_rate, qa.num_train_epochs, qa.record()["batch_size"]) == (16, None, None, 16)
    qa.fill_task_defaults(questions=SMALL_QA)
    assert (qa.learning_rate, qa.num_train_epochs, qa.early_stopping_patience) == (2e-4, 3, 2)
    small = _arguments(None, "qa", {})
    small.fill_task_defaults(questions=SMALL_QA - 1)
    assert (small.batch_size, small.learning_rate, small.num_train_epochs, small.early_stopping_patience) == (
        16,
        1e-4,
        10,
        10,
    )
    given = _arguments(FinetuneArguments(batch_size=8), "qa", {"lr": 5e-5, "num_train_epochs": 2})
    given.fill_task_defaults(questions=270)
    assert (given.batch_size, given.learning_rate, given.num_train_epochs, given.early_stopping_patience) == (
        8,
        5e-5,
        2,
        10,
    )
    assert _arguments(None, None, {}).batch_size == 32  # no task given: text's
    with pytest.raises(InputError, match="batch_size=0"):
        FinetuneArguments(batch_size=0, task="qa")
