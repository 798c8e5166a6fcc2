"""Fine-tuning speed: examples/s of one training epoch on the same SST-2 sentences, three ways, in one run.

    python benchmarks/finetune_speed.py [--rows 1280] [--repeats 3]

- tutorial loop: every sentence padded to the longest in the set, dataset order, torch AdamW (default foreach);
- transformers Trainer: train_sampling_strategy='group_by_length', its default optimizer, no evaluation or
  saving;
- bertkit: `finetune()` — transformers' Trainer underneath with bertkit's length-grouped batches and per-batch
  padding (dev scoring excluded); once more with each step's batch in 2 micro-batches (gradient accumulation: same
  updates). Run it with `PYTHONPATH=<old tree>/src` to measure an older bertkit's own loop the same way.
Same model (the packaged default + a sequence-classification head), batch 32, lr 1e-4, linear schedule.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
BATCH, LR = 32, 1e-4


def load_rows(rows: int):
    from bertkit.io.readers import read_labelled

    data = read_labelled(DATA / "sst2" / "train.tsv")
    return data.texts[:rows], [int(v) for v in data.labels[:rows]]


def fresh_model():
    from transformers import AutoModelForSequenceClassification

    from bertkit.encoder.models import default_model_dir, quiet_transformers

    torch.manual_seed(0)
    with quiet_transformers():
        return AutoModelForSequenceClassification.from_pretrained(default_model_dir(), num_labels=2)


def tutorial_loop(texts, labels) -> float:
    from transformers import AutoTokenizer, get_linear_schedule_with_warmup

    from bertkit.encoder.models import default_model_dir

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    model = fresh_model().train()
    encoded = tokenizer(texts, padding="longest", return_tensors="pt")
    target = torch.tensor(labels)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    steps = -(-len(texts) // BATCH)
    scheduler = get_linear_schedule_with_warmup(optimizer, steps // 10, steps)
    started = time.perf_counter()
    for start in range(0, len(texts), BATCH):
        batch = {k: v[start : start + BATCH] for k, v in encoded.items()}
        loss = model(**batch, labels=target[start : start + BATCH]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return len(texts) / (time.perf_counter() - started)


def hf_trainer(texts, labels) -> float | None:
    try:
        import accelerate  # noqa: F401
    except ImportError:
        return None
    from transformers import (
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    from bertkit.encoder.models import default_model_dir, quiet_transformers

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    rows = [{**tokenizer(t, truncation=True, max_length=128), "labels": y} for t, y in zip(texts, labels)]
    with tempfile.TemporaryDirectory() as output, quiet_transformers():
        args = TrainingArguments(
            output_dir=output,
            per_device_train_batch_size=BATCH,
            learning_rate=LR,
            weight_decay=0.01,
            warmup_steps=0.1,
            num_train_epochs=1,
            train_sampling_strategy="group_by_length",
            save_strategy="no",
            eval_strategy="no",
            logging_strategy="no",
            report_to=[],
            disable_tqdm=True,
            use_cpu=True,
            seed=0,
        )
        trainer = Trainer(
            model=fresh_model(),
            args=args,
            train_dataset=rows,
            processing_class=tokenizer,
            data_collator=DataCollatorWithPadding(tokenizer),
        )
        started = time.perf_counter()
        trainer.train()
        return len(texts) / (time.perf_counter() - started)


def bertkit_finetune(texts, labels, accumulation: int = 1) -> float:
    import json

    from bertkit.tasks.finetune import FinetuneArguments, finetune

    with tempfile.TemporaryDirectory() as folder:
        train = Path(folder) / "train.tsv"
        train.write_text("".join(f"{t}\t{y}\n" for t, y in zip(texts, labels)), encoding="utf-8")
        dev = Path(folder) / "dev.tsv"
        dev.write_text("".join(f"{t}\t{y}\n" for t, y in zip(texts[:64], labels[:64])), encoding="utf-8")
        finetune(
            train,
            dev,
            output_dir=Path(folder) / "run",
            progress=False,
            args=FinetuneArguments(num_train_epochs=1, learning_rate=LR, gradient_accumulation_steps=accumulation),
        )
        history = json.loads((Path(folder) / "run" / "bertkit.json").read_text())["training"]["history"]
    return history[0]["examples_per_second"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1280)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    if not (DATA / "sst2" / "train.tsv").is_file():
        sys.exit(f"{DATA / 'sst2' / 'train.tsv'} is missing: set BERTKIT_DATA.")
    texts, labels = load_rows(options.rows)
    ways = {
        "tutorial loop (pad to longest, dataset order)": tutorial_loop,
        "transformers Trainer (group_by_length)": hf_trainer,
        "bertkit finetune": bertkit_finetune,
        "bertkit finetune, 2 micro-batches a step": lambda t, y: bertkit_finetune(t, y, accumulation=2),
    }
    results: dict[str, list[float]] = {name: [] for name in ways}
    for repeat in range(options.repeats):
        for name, way in ways.items():
            rate = way(texts, labels)
            if rate is not None:
                results[name].append(rate)
            print(f"repeat {repeat + 1}: {name}: {rate if rate is None else f'{rate:.1f}'} examples/s", file=sys.stderr)
    medians = {name: statistics.median(r) for name, r in results.items() if r}
    naive = medians[next(iter(ways))]
    peer = medians.get("transformers Trainer (group_by_length)")
    print(
        f"\nSST-2, first {len(texts)} training sentences, one epoch, batch {BATCH}, {torch.get_num_threads()} threads, "
        f"median of {options.repeats}"
    )
    print(f"{'way':<48} {'examples/s':>10} {'range':>13} {'× tutorial':>10} {'× Trainer':>9}")
    for name, rates in results.items():
        if not rates:
            print(f"{name:<48} {'skipped (pip install accelerate)':>10}")
            continue
        median = medians[name]
        ratio = f"{median / peer:.2f}" if peer else "–"
        print(f"{name:<48} {median:>10.1f} {min(rates):>6.1f}–{max(rates):<6.1f} {median / naive:>10.2f} {ratio:>9}")


if __name__ == "__main__":
    main()
