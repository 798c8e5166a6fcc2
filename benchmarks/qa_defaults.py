"""Which fine-tuning settings learn question answering from a few hundred questions (issue 45, item 2).

    python benchmarks/qa_defaults.py [--sizes 300 1000 0] [--configs 32:1e-4 8:1e-4 16:2e-4] [--json out.json]

The CoNLL-2003 reading task of benchmarks/qa_task.py (two questions per document), the packaged model, bertkit's
epochs and patience for the size (10 and 10 under 800 training questions, else 3 and 2; --epochs and --patience set
them), the task's other defaults; the best epoch is kept. For each training size (the first N questions of
train.txt's; 0: all 1,786, of which 10% are held out to choose the epoch and the no-answer threshold) and each
`batch:learning-rate`, the dev split's SQuAD v2.0 F1 (407 questions of dev.txt, never trained or chosen on) against
always answering "no answer", with the training time. Run it with nothing else heavy on the machine; --threads
sets torch's threads (the times are for that many).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import qa_task  # noqa: E402
from qa import cpu, scores  # noqa: E402

from bertkit.io.squad import read_squad  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=qa_task.DATA)
    parser.add_argument("--work", type=Path, default=Path("/tmp/qa-defaults"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[300, 1000, 0])
    parser.add_argument("--configs", nargs="+", default=["32:1e-4", "8:1e-4", "16:2e-4"])
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default: bertkit's, by the data's size)")
    parser.add_argument("--patience", type=int, default=None, help="epochs without a better dev score (bertkit's)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args()
    if options.threads:
        torch.set_num_threads(options.threads)
    import bertkit
    from bertkit.tasks.load import load_run

    train = qa_task.write(qa_task.build(options.data / "train.txt", 0, "train-", 2), options.work / "train.jsonl")
    dev = qa_task.write(qa_task.build(options.data / "dev.txt", 0, "dev-", 2), options.work / "dev.jsonl")
    examples = read_squad(dev).examples
    rows: list[dict] = []
    result = {"cpu": cpu(), "torch_threads": torch.get_num_threads(), "epochs": options.epochs, "rows": rows}
    result["patience"] = options.patience
    result["no answer"] = scores(examples, {e.id: "" for e in examples})
    print("always no answer:", result["no answer"], flush=True)
    for size in options.sizes:
        for config in options.configs:
            batch, lr = config.split(":")
            output = options.work / f"run-{size}-{batch}-{lr}"
            started = time.perf_counter()
            bertkit.finetune(
                train,
                output_dir=output,
                task="qa",
                num_train_epochs=options.epochs,
                early_stopping_patience=options.patience,
                learning_rate=float(lr),
                batch_size=int(batch),
                limit=size or None,
                overwrite=True,
                progress=False,
            )
            seconds = time.perf_counter() - started
            run = load_run(output)
            answers, _, _ = run.predictions(examples)
            training = run.record_["training"]
            row = {
                "questions": size or "all",
                "batch_size": int(batch),
                "learning_rate": float(lr),
                "best_epoch": training.get("best_epoch"),
                "dev_f1_by_epoch": [round(h["dev_score"], 1) for h in training.get("history", [])],
                "seconds": round(seconds),
                **scores(examples, answers),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            if options.json:
                options.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
