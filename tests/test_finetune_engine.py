"""The fine-tuning engine (accelerate under bertkit's loop): the same updates with gradient accumulation or over two
processes (torchrun, gloo), metrics a TensorBoard reads, mixed precision, and devices refused with one line."""

import json
import math
import os
import subprocess
import sys

import pytest
import tiny_models
import torch
from safetensors.torch import load_file
from test_finetune import conll_file, sentiment_file, tiny_args

from bertkit.encoder.precision import fast_bf16_cpu
from bertkit.errors import InputError
from bertkit.tasks.finetune import finetune

BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def no_dropout(tmp_path_factory):
    """A tiny BERT without dropout: its training depends on the batches alone."""
    return str(tiny_models.tiny_bert(tmp_path_factory.mktemp("nodrop") / "bert", dropout=0.0))


def weights(run):
    return load_file(str(run / "model.safetensors"))


def assert_same_weights(a, b, atol):
    first, second = weights(a), weights(b)
    assert first.keys() == second.keys()
    worst = max(float((first[k] - second[k]).abs().max()) for k in first)
    assert worst <= atol, worst


@pytest.mark.parametrize("task", ["text", pytest.param("token", marks=pytest.mark.slow)])
def test_gradient_accumulation_gives_the_same_updates(no_dropout, tmp_path, task):
    if task == "text":
        train, dev = sentiment_file(tmp_path / "train.tsv", n=40), sentiment_file(tmp_path / "dev.tsv", n=8, seed=1)
    else:  # the loss is over labelled tokens: micro-batches of unequal token counts must still add up to the mean
        train, dev = conll_file(tmp_path / "train.txt", n=40), conll_file(tmp_path / "dev.txt", n=8, seed=1)
    for steps in (1, 3):
        finetune(
            train,
            dev,
            task=task,
            output_dir=tmp_path / f"a{steps}",
            model=no_dropout,
            args=tiny_args(num_train_epochs=2, batch_size=8, gradient_accumulation_steps=steps),
        )
    assert_same_weights(tmp_path / "a1", tmp_path / "a3", atol=2e-5)
    record = json.loads((tmp_path / "a3" / "bertkit.json").read_text())
    assert record["args"]["gradient_accumulation_steps"] == 3 and record["processes"] == 1


@pytest.mark.slow
def test_two_processes_train_as_one_with_the_same_global_batch(no_dropout, tmp_path):
    """`torchrun --nproc_per_node 2` (gloo on CPUs): each step's batch is split between the processes."""
    train, dev = sentiment_file(tmp_path / "train.tsv", n=40), sentiment_file(tmp_path / "dev.tsv", n=8, seed=1)
    command = [
        "finetune",
        str(train),
        "--dev",
        str(dev),
        "--model",
        no_dropout,
        "--epochs",
        "2",
        "--batch-size",
        "8",
        "--lr",
        "3e-3",
        "--warmup-ratio",
        "0",
        "--threads",
        "1",
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}  # torchrun leaves a folder there
    one = subprocess.run(
        [f"{BIN}/bertkit", *command, "-o", str(tmp_path / "one")],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert one.returncode == 0, one.stderr
    two = subprocess.run(
        [
            f"{BIN}/torchrun",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "bertkit",
            *command,
            "-o",
            str(tmp_path / "two"),
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    said = [line for line in two.stderr.splitlines() if "error" in line.lower() and "Traceback" not in line][:12]
    assert two.returncode == 0, "\n".join(said) + "\n" + two.stderr[-2000:]
    # one voice: only the main process checks the output, says what the run does and writes it (each process once
    # took itself for the only one, so both checked, and under load one refused the other's unfinished run)
    assert two.stderr.count("split over 2 processes") == 1 and two.stderr.count("saved ") == 1, two.stderr[-2000:]
    assert "parallel_mode" not in two.stderr and two.stderr.count("epoch 2/2:") == 1
    assert_same_weights(tmp_path / "one", tmp_path / "two", atol=2e-5)
    records = [json.loads((tmp_path / name / "bertkit.json").read_text()) for name in ("one", "two")]
    assert [r["processes"] for r in records] == [1, 2]
    assert records[0]["metrics"]["accuracy"] == records[1]["metrics"]["accuracy"]


def test_metrics_are_logged_for_tensorboard_and_kept_with_the_run(tiny_dirs, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train, dev = sentiment_file(tmp_path / "train.tsv", n=32), sentiment_file(tmp_path / "dev.tsv", n=8, seed=1)
    finetune(
        train,
        dev,
        output_dir=tmp_path / "run",
        model=str(tiny_dirs["bert_cased"]),
        args=tiny_args(num_train_epochs=2, batch_size=8, report_to=["tensorboard"]),
    )
    lines = [json.loads(line) for line in (tmp_path / "run" / "logs" / "metrics.jsonl").read_text().splitlines()]
    steps = [line for line in lines if "train/loss" in line]
    assert [line["step"] for line in steps] == list(range(1, 9))  # 32 examples / 8 = 4 steps, 2 epochs
    assert [line["epoch/dev_score"] for line in lines if "epoch/dev_score" in line] == [
        h["dev_score"] for h in json.loads((tmp_path / "run" / "bertkit.json").read_text())["training"]["history"]
    ]
    events = [p for p in (tmp_path / "run" / "logs").rglob("events.out.tfevents.*")]
    assert events, list((tmp_path / "run" / "logs").rglob("*"))
    accumulator = EventAccumulator(str(events[0].parent)).Reload()
    losses = accumulator.Scalars("train/loss")
    assert [event.step for event in losses] == list(range(1, 9))
    assert [round(event.value, 5) for event in losses] == [round(line["train/loss"], 5) for line in steps]


def _warmup_as_transformers_4(self, num_training_steps):
    """transformers 4.46-4.57's reading: `warmup_steps` (any value above 0) is a count of steps, else the ratio."""
    ratio = getattr(self, "warmup_ratio", 0.0)
    return self.warmup_steps if self.warmup_steps > 0 else math.ceil(num_training_steps * ratio)


@pytest.mark.parametrize("reading", ["installed", "transformers 4"])
def test_the_learning_rate_warms_up_over_its_share_of_the_steps(tiny_dirs, tmp_path, monkeypatch, reading):
    """warmup_ratio=0.25 of 8 steps: 2 steps of warm-up (each step logs the rate it ran at), then linear decay."""
    from transformers import TrainingArguments

    if reading == "transformers 4":
        monkeypatch.setattr(TrainingArguments, "get_warmup_steps", _warmup_as_transformers_4)
    train, dev = sentiment_file(tmp_path / "train.tsv", n=32), sentiment_file(tmp_path / "dev.tsv", n=8, seed=1)
    args = tiny_args(num_train_epochs=2, batch_size=8, learning_rate=1e-3, warmup_ratio=0.25, early_stopping_patience=2)
    finetune(train, dev, output_dir=tmp_path / "run", model=str(tiny_dirs["bert_cased"]), args=args)
    lines = (tmp_path / "run" / "logs" / "metrics.jsonl").read_text().splitlines()
    rates = [json.loads(line)["train/learning_rate"] for line in lines if "train/learning_rate" in line]
    assert rates == pytest.approx([1e-3 * share for share in (0, 0.5, 1, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6)])


def test_bf16_mixed_precision_trains_where_the_cpu_has_bf16(tiny_dirs, tmp_path):
    train, dev = sentiment_file(tmp_path / "train.tsv", n=32), sentiment_file(tmp_path / "dev.tsv", n=8, seed=1)
    options = dict(output_dir=tmp_path / "run", model=str(tiny_dirs["bert_cased"]), device="cpu")
    with pytest.raises(InputError, match="mixed_precision=.fp16. runs on a GPU"):
        finetune(train, dev, args=tiny_args(mixed_precision="fp16"), **options)
    if not fast_bf16_cpu():
        with pytest.raises(InputError, match="no native bf16"):
            finetune(train, dev, args=tiny_args(mixed_precision="bf16"), **options)
        return
    tuned = finetune(train, dev, args=tiny_args(num_train_epochs=2, mixed_precision="bf16"), **options)
    record = json.loads((tmp_path / "run" / "bertkit.json").read_text())
    assert record["args"]["mixed_precision"] == "bf16" and record["device"] == "cpu"
    assert all(p.dtype == torch.float32 for p in tuned.model.parameters())  # master weights stay fp32


def test_a_device_the_machine_lacks_is_one_line(tiny_dirs, tmp_path, monkeypatch, capsys):
    from conftest import run_cli

    train = sentiment_file(tmp_path / "train.tsv", n=16)
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    code, _, err = run_cli(
        monkeypatch,
        capsys,
        "finetune",
        train,
        "-o",
        tmp_path / "run",
        "--device",
        "cuda",
        "--model",
        tiny_dirs["bert_cased"],
    )
    assert code == 2 and err.strip().splitlines()[-1].startswith("error: --device cuda: this machine has no CUDA GPU")
    assert not (tmp_path / "run").exists()


def test_a_batch_pads_each_kind_of_label_to_the_input_width():
    from bertkit.tasks.finetune.examples import Example, collate

    tags = [Example([101, 7, 8, 102], [0] * 4, [-100, 3, -100]), Example([101, 9, 102], [0] * 3, [-100, 2])]
    batch = collate(tags, pad_token_id=0, with_type_ids=False)
    assert batch["input_ids"].tolist() == [[101, 7, 8, 102], [101, 9, 102, 0]]
    assert batch["labels"].tolist() == [[-100, 3, -100, -100], [-100, 2, -100, -100]]  # as wide as the inputs
    assert batch["labels"].dtype == torch.int64 and "token_type_ids" not in batch
    classes = collate([Example([101, 102], [0, 0], 1), Example([101, 5, 102], [0, 0, 0], 0)], 0, True)
    assert classes["labels"].tolist() == [1, 0] and classes["labels"].dtype == torch.int64
    assert classes["token_type_ids"].shape == (2, 3)
    scores = collate([Example([101, 102], [0, 0], 0.5)], 0, False)
    assert scores["labels"].dtype == torch.float32 and scores["labels"].tolist() == [0.5]


def test_finetune_arguments_are_training_arguments_checked_where_they_are_made(tmp_path):
    from transformers import TrainingArguments

    from bertkit import FinetuneArguments

    args = FinetuneArguments(num_train_epochs=2, batch_size=16)
    assert isinstance(args, TrainingArguments) and args.eval_strategy == "epoch" and args.seed == 0
    assert args.record()["batch_size"] == 16 and args.get_warmup_steps(95) == 10
    for bad, message in [
        (dict(num_train_epochs=0), "num_train_epochs=0"),
        (dict(warmup_ratio=1.5), "warmup_ratio=1.5"),
        (dict(task="tokens"), "task=.tokens.: valid values are text, pair, token, qa"),
        (dict(regression=True, multi_label=True), "exclude each other"),
        (dict(task="text", doc_stride=64), "doc_stride=64 is for the qa task"),
    ]:
        with pytest.raises(InputError, match=message):
            FinetuneArguments(**bad)
    with pytest.raises(InputError, match="unknown setting 'epochs'"):  # bertkit 0.2's name
        finetune(tmp_path / "missing.tsv", output_dir=tmp_path / "run", epochs=1)
