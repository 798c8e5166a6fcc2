"""bertkit on a GPU against the GPU peers, in one run on one device: embedding throughput and fine-tuning speed.

    python benchmarks/gpu.py                          # CUDA: all of SST-2 train and a 100k-text corpus
    python benchmarks/gpu.py --device cpu --quick     # the same code at CI size (tests/test_benchmark_scripts.py)

Embedding, sentences/s (median of --repeats after a warm-up) with the device's peak memory beside each row, for
the packaged default and a BERT-base-shaped model (12 layers, hidden 768, 12 heads, random weights: speed does not
depend on their values), on two corpora: SST-2 train (short sentences) and --synthetic texts built from it (2 to 6
SST-2 sentences joined: paragraph-long inputs, a different length mix):
- naive transformers loop: AutoModel in fp32, batches of 32 in dataset order padded to their longest, mean pooling;
- sentence-transformers `encode` at its fastest settings: the model in fp16 (`.half()`), batch 128 (fp32 on a CPU);
- bertkit `Encoder.embed` in fp32, fp16 and bf16 (autocast; each where the device runs it), its default batching.
`min cos` is the smallest cosine of a row's vectors to bertkit fp32's: the rows compute the same thing.

Fine-tuning, examples/s of one epoch and SST-2 dev accuracy, the packaged default with a classification head,
batch 32, lr 1e-4, linear schedule: transformers `Trainer` (fp16 on CUDA, group_by_length) against bertkit
`finetune` (mixed_precision fp16 on CUDA). Targets (issue 25): embedding >= 1.3x sentence-transformers at cosine
>= 0.999; fine-tuning >= 1.0x Trainer at the same dev accuracy (+-0.3 points).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
NAIVE_BATCH, PEER_BATCH, TRAIN_BATCH, LR = 32, 128, 32, 1e-4


# ---- corpora and models ------------------------------------------------------------------------------------------
def sst2(split: str) -> tuple[list[str], list[int]]:
    from bertkit.io.readers import read_labelled

    data = read_labelled(DATA / "sst2" / f"{split}.tsv")
    return list(data.texts), [int(v) for v in data.labels]


def synthetic_corpus(sentences: list[str], size: int, seed: int = 0) -> list[str]:
    """`size` texts of 2 to 6 SST-2 sentences each, drawn with a fixed seed."""
    pick = random.Random(seed)
    return [" ".join(pick.choices(sentences, k=pick.randint(2, 6))) for _ in range(size)]


def base_shaped_model(folder: Path, layers: int = 12) -> Path:
    """A BERT-base-shaped model (hidden 768, 12 heads, feed-forward 3072) with random weights and the default's
    tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from bertkit.encoder.models import default_model_dir

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522, hidden_size=768, num_hidden_layers=layers, num_attention_heads=12, intermediate_size=3072
    )
    BertModel(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(default_model_dir()).save_pretrained(folder)
    return folder


# ---- the ways ----------------------------------------------------------------------------------------------------
def naive_loop(path: str, device: torch.device) -> Callable[[list[str]], np.ndarray]:
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).to(device).eval()

    def embed(texts: list[str]) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), NAIVE_BATCH):
                inputs = tokenizer(
                    texts[start : start + NAIVE_BATCH], padding=True, truncation=True, return_tensors="pt"
                ).to(device)
                states = model(**inputs).last_hidden_state
                mask = inputs["attention_mask"].unsqueeze(-1).to(states.dtype)
                out.append(((states * mask).sum(1) / mask.sum(1)).float().cpu().numpy())
        return np.concatenate(out)

    return embed


def sentence_transformers_encode(path: str, device: torch.device) -> Callable[[list[str]], np.ndarray]:
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Pooling, Transformer

    transformer = Transformer(path)
    dimension = getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension
    model = SentenceTransformer(modules=[transformer, Pooling(dimension(), "mean")], device=str(device))
    if device.type == "cuda":
        model.half()  # its documented fastest GPU setting

    def embed(texts: list[str]) -> np.ndarray:
        return model.encode(texts, batch_size=PEER_BATCH, convert_to_numpy=True, show_progress_bar=False)

    return embed


def bertkit_embed(path: str, device: torch.device, precision: str) -> Callable[[list[str]], np.ndarray] | str:
    from bertkit import Encoder, InputError

    try:
        encoder = Encoder.from_pretrained(path, device=device, precision=precision)
    except InputError as exc:
        return f"refused here: {exc}"
    return lambda texts: encoder.embed(texts, progress=False, warn=False)


# ---- measuring ---------------------------------------------------------------------------------------------------
def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(embed: Callable[[list[str]], np.ndarray], texts: list[str], repeats: int, device: torch.device) -> dict:
    """Warm up on the first texts, then time `repeats` passes over all of them; peak device memory of those."""
    embed(texts[: min(len(texts), 2048)])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rates = []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        vectors = np.asarray(embed(texts), dtype=np.float32)
        synchronize(device)
        rates.append(len(texts) / (time.perf_counter() - started))
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return {"rates": rates, "vectors": vectors, "peak_gib": peak}


def min_cosine(reference: np.ndarray, vectors: np.ndarray) -> float:
    dots = (reference * vectors).sum(1)
    norms = np.linalg.norm(reference, axis=1) * np.linalg.norm(vectors, axis=1)
    return float((dots / np.maximum(norms, 1e-12)).min())


def embedding_table(name: str, path: str, corpora: dict[str, list[str]], device, repeats: int) -> list[dict]:
    ways: dict[str, Callable | str] = {
        "naive transformers loop (fp32, batch 32)": naive_loop(path, device),
        f"sentence-transformers encode ({'fp16' if device.type == 'cuda' else 'fp32'}, batch {PEER_BATCH})": (
            sentence_transformers_encode(path, device)
        ),
    }
    for precision in ("fp32", "fp16", "bf16"):
        ways[f"bertkit {precision}"] = bertkit_embed(path, device, precision)
    rows = []
    for corpus, texts in corpora.items():
        results = {}
        for way, embed in ways.items():
            if isinstance(embed, str):
                results[way] = {"note": embed}
                continue
            results[way] = timed(embed, texts, repeats, device)
            print(f"  {name} / {corpus} / {way}: {statistics.median(results[way]['rates']):.0f}/s", file=sys.stderr)
        reference = results["bertkit fp32"]["vectors"]
        peer = next(statistics.median(r["rates"]) for w, r in results.items() if w.startswith("sentence"))
        naive = statistics.median(results["naive transformers loop (fp32, batch 32)"]["rates"])
        for way, result in results.items():
            row = {"model": name, "corpus": corpus, "way": way}
            if "note" in result:
                rows.append({**row, "note": result["note"]})
                continue
            median = statistics.median(result["rates"])
            rows.append(
                {
                    **row,
                    "per_second": median,
                    "range": (min(result["rates"]), max(result["rates"])),
                    "x_peer": median / peer,
                    "x_naive": median / naive,
                    "min_cos": min_cosine(reference, result["vectors"]),
                    "peak_gib": result["peak_gib"],
                }
            )
    return rows


def trainer_epoch(train, dev, device: torch.device, folder: Path) -> dict:
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    from bertkit.encoder.models import default_model_dir, quiet_transformers

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    rows = [{**tokenizer(t, truncation=True, max_length=128), "labels": y} for t, y in zip(*train)]
    dev_rows = [{**tokenizer(t, truncation=True, max_length=128), "labels": y} for t, y in zip(*dev)]
    torch.manual_seed(0)
    with quiet_transformers():
        model = AutoModelForSequenceClassification.from_pretrained(default_model_dir(), num_labels=2)
        args = TrainingArguments(
            output_dir=str(folder),
            per_device_train_batch_size=TRAIN_BATCH,
            per_device_eval_batch_size=128,
            learning_rate=LR,
            weight_decay=0.01,
            warmup_steps=0.1,
            num_train_epochs=1,
            train_sampling_strategy="group_by_length",
            fp16=device.type == "cuda",
            save_strategy="no",
            eval_strategy="no",
            logging_strategy="no",
            report_to=[],
            disable_tqdm=True,
            use_cpu=device.type == "cpu",
            seed=0,
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=rows,
            processing_class=tokenizer,
            data_collator=DataCollatorWithPadding(tokenizer),
        )
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        synchronize(device)
        started = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # the Trainer prints its own summary line
            trainer.train()
        synchronize(device)
        seconds = time.perf_counter() - started
        predictions = trainer.predict(dev_rows).predictions.argmax(-1)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return {
        "per_second": len(rows) / seconds,
        "accuracy": float((predictions == np.asarray(dev[1])).mean()),
        "peak_gib": peak,
    }


def bertkit_epoch(train, dev, device: torch.device, folder: Path) -> dict:
    from bertkit.tasks.finetune import FinetuneArguments, finetune

    for name, (texts, labels) in (("train", train), ("dev", dev)):
        (folder / f"{name}.tsv").write_text("".join(f"{t}\t{y}\n" for t, y in zip(texts, labels)), encoding="utf-8")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    tuned = finetune(
        folder / "train.tsv",
        folder / "dev.tsv",
        output_dir=folder / "run",
        device=str(device),
        progress=False,
        args=FinetuneArguments(
            num_train_epochs=1,
            learning_rate=LR,
            batch_size=TRAIN_BATCH,
            mixed_precision="fp16" if device.type == "cuda" else "no",
        ),
    )
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    history = json.loads((folder / "run" / "bertkit.json").read_text())["training"]["history"]
    predictions = tuned.predict(dev[0])
    accuracy = float(np.mean([str(p) == str(y) for p, y in zip(predictions, dev[1])]))
    return {"per_second": history[0]["examples_per_second"], "accuracy": accuracy, "peak_gib": peak}


def finetune_table(train, dev, device, repeats: int) -> list[dict]:
    rows = []
    for way, run in (("transformers Trainer", trainer_epoch), ("bertkit finetune", bertkit_epoch)):
        results = []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as folder:
                results.append(run(train, dev, device, Path(folder)))
            print(f"  fine-tuning / {way}: {results[-1]['per_second']:.0f} examples/s", file=sys.stderr)
        rates = [r["per_second"] for r in results]
        rows.append(
            {
                "way": way + (" (fp16)" if device.type == "cuda" else " (fp32)"),
                "per_second": statistics.median(rates),
                "range": (min(rates), max(rates)),
                "accuracy": statistics.median(r["accuracy"] for r in results),
                "peak_gib": max((r["peak_gib"] or 0.0) for r in results) if device.type == "cuda" else None,
            }
        )
    for row in rows:
        row["x_peer"] = row["per_second"] / rows[0]["per_second"]
    return rows


# ---- report ------------------------------------------------------------------------------------------------------
def memory(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_report(device, embedding: list[dict], finetuning: list[dict], facts: str) -> None:
    print(f"\n{facts}")
    print(
        f"\n{'model / corpus / way':<88} {'texts/s':>8} {'range':>15} {'x ST':>5} {'x naive':>7} {'min cos':>8} "
        f"{'GiB':>6}"
    )
    for row in embedding:
        label = f"{row['model']} / {row['corpus']} / {row['way']}"
        if "note" in row:
            print(f"{label:<88} {row['note'][:90]}")
            continue
        low, high = row["range"]
        print(
            f"{label:<88} {row['per_second']:>8.0f} {low:>7.0f}-{high:<7.0f} {row['x_peer']:>5.2f} "
            f"{row['x_naive']:>7.2f} {row['min_cos']:>8.5f} {memory(row['peak_gib']):>6}"
        )
    print(
        f"\n{'fine-tuning (one epoch)':<40} {'examples/s':>10} {'range':>15} {'x Trainer':>9} {'dev acc':>8} {'GiB':>6}"
    )
    for row in finetuning:
        low, high = row["range"]
        print(
            f"{row['way']:<40} {row['per_second']:>10.1f} {low:>7.1f}-{high:<7.1f} {row['x_peer']:>9.2f} "
            f"{row['accuracy']:>8.4f} {memory(row['peak_gib']):>6}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (the CI-sized check)")
    parser.add_argument("--rows", type=int, default=0, help="SST-2 train sentences to embed (0: all 67,349)")
    parser.add_argument("--synthetic", type=int, default=100_000, help="texts in the synthetic corpus")
    parser.add_argument("--finetune-rows", type=int, default=0, help="SST-2 train sentences to fine-tune on (0: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--base-layers", type=int, default=12, help="layers of the BERT-base-shaped model")
    parser.add_argument("--quick", action="store_true", help="CI size: 24 texts, 1 repeat, a 1-layer base shape")
    options = parser.parse_args(argv)
    if options.quick:
        options.rows, options.synthetic, options.finetune_rows, options.repeats, options.base_layers = 24, 24, 32, 1, 1
    if not (DATA / "sst2" / "train.tsv").is_file():
        sys.exit(f"{DATA / 'sst2' / 'train.tsv'} is missing: set BERTKIT_DATA to the folder holding sst2/.")

    from bertkit.encoder.devices import describe, resolve_device
    from bertkit.encoder.models import default_model_dir

    device = resolve_device(options.device)
    train = sst2("train")
    dev = sst2("dev")
    sentences = train[0][: options.rows or None]
    corpora = {
        f"SST-2 train ({len(sentences)})": sentences,
        f"synthetic ({options.synthetic})": synthetic_corpus(train[0], options.synthetic),
    }
    if options.quick:
        dev = (dev[0][:32], dev[1][:32])
    with tempfile.TemporaryDirectory() as folder:
        base = str(base_shaped_model(Path(folder) / "base", options.base_layers))
        embedding = embedding_table("default (6x384)", str(default_model_dir()), corpora, device, options.repeats)
        embedding += embedding_table(f"base-shaped ({options.base_layers}x768)", base, corpora, device, options.repeats)
    limit = options.finetune_rows or None
    finetuning = finetune_table((train[0][:limit], train[1][:limit]), dev, device, options.repeats)
    import sentence_transformers
    import transformers

    facts = (
        f"device {describe(device)}; torch {torch.__version__}, transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}; median of {options.repeats}; "
        f"fine-tuning on {len(train[0][:limit])} SST-2 sentences, dev {len(dev[0])}"
    )
    print_report(device, embedding, finetuning, facts)


if __name__ == "__main__":
    main()
