"""Fine-tuning benchmark: SST-2 (text) and CoNLL-2003 (token) with the packaged default model on this CPU.

    python benchmarks/finetune.py text   [--epochs 3 --lr 1e-4]
    python benchmarks/finetune.py token  [--epochs 3 --lr 1e-4 --limit N]

Prints dev accuracy / entity F1 per epoch, the best epoch, training time and examples/s (from bertkit.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
FILES = {"text": ("sst2/train.tsv", "sst2/dev.tsv"), "token": ("conll2003/train.txt", "conll2003/dev.txt")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", choices=sorted(FILES))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=None, help="Keep the run here (default: a temp dir).")
    options = parser.parse_args()

    from bertkit.tasks.finetune import FinetuneArguments, finetune

    train, dev = (DATA / name for name in FILES[options.task])
    for path in (train, dev):
        if not path.is_file():
            sys.exit(f"{path} is missing: set BERTKIT_DATA to the folder holding sst2/ and conll2003/.")
    output = options.output or Path(tempfile.mkdtemp()) / "run"
    args = FinetuneArguments(
        task=options.task,
        num_train_epochs=options.epochs,
        learning_rate=options.lr,
        batch_size=options.batch_size,
        seed=options.seed,
        early_stopping_patience=options.epochs,
    )
    started = time.perf_counter()
    finetune(
        train, dev, output_dir=output, task=options.task, args=args, limit=options.limit, overwrite=True, progress=False
    )
    wall = time.perf_counter() - started
    record = json.loads((output / "bertkit.json").read_text())
    training = record["training"]
    print(
        f"\n{options.task}: {record['data']['train_rows']} training examples, {record['data']['dev_rows']} dev; "
        f"lr {options.lr:g}, batch {options.batch_size}, {torch_threads()} threads"
    )
    print("epoch  train loss  dev score  seconds  examples/s")
    for entry in training["history"]:
        print(
            f"{entry['epoch']:>5}  {entry['train_loss']:>10.4f}  {entry['dev_score']:>9.4f}  {entry['seconds']:>7.0f}  "
            f"{entry['examples_per_second']:>10.1f}"
        )
    metric = "accuracy" if options.task == "text" else "f1"
    print(
        f"best epoch {training['best_epoch']}: dev {metric} {record['metrics'][metric]:.4f}; training "
        f"{training['train_seconds']:.0f}s "
        f"({training['examples_per_second']:.1f} examples/s), wall {wall:.0f}s including loading and dev scoring"
    )
    if options.task == "token":
        from bertkit.tasks.tagging import format_entity_scores

        print(format_entity_scores(record["metrics"]))
    if options.output is None:
        shutil.rmtree(output.parent, ignore_errors=True)


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    main()
