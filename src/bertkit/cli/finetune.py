"""Commands that train the encoder or compare its layers: finetune, probe."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ..display import text_table as format_table
from ..errors import InputError
from ..io.readers import column_spec
from .common import (
    CacheDirOption,
    DeviceOption,
    HeaderOption,
    ModelOption,
    NoCacheOption,
    OverwriteOption,
    ThreadsOption,
    app,
    cache_option,
    existing_text_file,
    options_for,
    say,
)


@app.command()
def finetune(
    ctx: typer.Context,
    train_file: Path = typer.Argument(
        ...,
        callback=existing_text_file,
        help="Training data: TSV/CSV/JSONL (text, label) for --task text, (text, pair, label) for --task pair; "
        "CoNLL or word/tag for --task token; SQuAD JSON or JSONL (id, question, context, answers) for --task qa.",
    ),
    output_dir: Path = typer.Option(
        ..., "--output", "-o", help="Run directory: a transformers model + tokenizer + bertkit.json."
    ),
    task: str = typer.Option(
        "text",
        "--task",
        help="text (sentences) | pair (sentence pairs: NLI, paraphrase, STS, relevance) | token (tagging, e.g. NER) "
        "| qa (extractive question answering: SQuAD JSON or JSONL).",
    ),
    regression: bool = typer.Option(
        False,
        "--regression",
        help="Text/pair: learn a score (one output, mean squared error); labels with decimals imply it.",
    ),
    multi_label: bool = typer.Option(
        False, "--multi-label", help="Text/pair: several labels a row (separated by --label-separator; JSONL: a list)."
    ),
    label_separator: str = typer.Option(",", "--label-separator", help="Multi-label: what separates a row's labels."),
    dev: Path | None = typer.Option(
        None,
        "--dev",
        callback=existing_text_file,
        help="Dev file scored after every epoch; without it 10% of train is held out.",
    ),
    num_train_epochs: int = typer.Option(3, "--epochs"),
    learning_rate: float = typer.Option(1e-4, "--lr", help="Peak learning rate (linear warm-up, then linear decay)."),
    batch_size: int = typer.Option(32, "--batch-size", "-b"),
    max_length: int | None = typer.Option(
        None, "--max-length", help="Tokens per example (text: 128; pair: 256; qa: 384; token: the model's maximum)."
    ),
    doc_stride: int | None = typer.Option(
        None, "--doc-stride", help="qa: tokens two windows of a long context share (default 128, at most half)."
    ),
    early_stopping_patience: int = typer.Option(
        2, "--patience", help="Stop after this many epochs without a better dev score."
    ),
    warmup_ratio: float = typer.Option(0.1, "--warmup-ratio"),
    weight_decay: float = typer.Option(0.01, "--weight-decay"),
    seed: int = typer.Option(0, "--seed"),
    limit: int | None = typer.Option(None, "--limit", help="Use only the first N training examples."),
    text_column: str | None = typer.Option(
        None, "--text-column", "--column", help="Text/pair: index or name (default 0; JSONL 'text')."
    ),
    pair_column: str | None = typer.Option(
        None, "--pair-column", help="Pair: the second text's column (default 1; JSONL 'text_pair')."
    ),
    label_column: str | None = typer.Option(
        None, "--label-column", help="Text/pair: index or name (default: the next column; JSONL 'label')."
    ),
    header: bool | None = HeaderOption,
    gradient_accumulation_steps: int = typer.Option(
        1,
        "--gradient-accumulation-steps",
        help="Split each step's batch into this many micro-batches (less memory, the same updates).",
    ),
    mixed_precision: str = typer.Option(
        "no", "--mixed-precision", help="no | fp16 (CUDA) | bf16 (CUDA, or a CPU with native bf16)."
    ),
    report_to: str | None = typer.Option(
        None,
        "--report-to",
        help="Experiment trackers, comma-separated: tensorboard, mlflow, wandb, ... (logs in OUTPUT/logs).",
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run from its last checkpoint."),
    overwrite: bool = OverwriteOption,
    model: str | None = ModelOption,
    threads: int | None = ThreadsOption,
    device: str = DeviceOption,
) -> None:
    """Fine-tune the whole encoder with a classification, tagging or span head.

    A classification head for sentences, a tagging head for tokens (NER), a span head for question answering.

    Several processes (GPUs, or CPU cores with gloo): `torchrun --nproc_per_node N -m bertkit finetune ...` or
    `accelerate launch -m bertkit finetune ...`; --batch-size stays the batch of one step, split between them.
    """
    from ..tasks.finetune import FinetuneArguments
    from ..tasks.finetune import finetune as run_finetune

    trackers = [name.strip() for name in (report_to or "").split(",") if name.strip()]
    args = FinetuneArguments(**options_for(ctx, FinetuneArguments, report_to=trackers))
    columns = {
        name: column_spec(value) for name, value in options_for(ctx, run_finetune).items() if name.endswith("_column")
    }
    try:
        run_finetune(train_file, **options_for(ctx, run_finetune, args=args, **columns))
    except KeyboardInterrupt:
        sys.exit(130)


@app.command()
def probe(
    ctx: typer.Context,
    train_file: Path = typer.Argument(
        ...,
        callback=existing_text_file,
        help="Training data: TSV/CSV/JSONL (text, label) for --task text; CoNLL or word/tag for --task token.",
    ),
    dev: Path = typer.Option(..., "--dev", callback=existing_text_file, help="Dev file the probes are scored on."),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Directory for probe.md, probe.csv, probe.json and probe.png."
    ),
    task: str = typer.Option("text", "--task", help="text (sentence classification) | token (tagging, e.g. NER)."),
    limit: int | None = typer.Option(None, "--limit", help="Use only the first N training rows / sentences."),
    poolings: str = typer.Option(
        ",".join(("cls", "mean", "max", "pooler")), "--poolings", help="Text task: poolings to compare."
    ),
    subtoken_pooling: str = typer.Option(
        "first", "--subtoken-pooling", help="Token task: first | last | mean | first_last."
    ),
    c_value: float = typer.Option(
        1.0, "--C", help="Token task: regularisation of the per-word classifier (text: chosen by CV)."
    ),
    seed: int = typer.Option(0, "--seed"),
    text_column: str | None = typer.Option(None, "--text-column"),
    label_column: str | None = typer.Option(None, "--label-column"),
    header: bool | None = HeaderOption,
    cache_dir: Path | None = CacheDirOption,
    no_cache: bool = NoCacheOption,
    overwrite: bool = OverwriteOption,
    model: str | None = ModelOption,
    threads: int | None = ThreadsOption,
    device: str = DeviceOption,
) -> None:
    """Score every hidden state, the paper's combinations and a learned mix with a linear probe.

    Which layer's vectors?
    """
    from ..io.writers import check_output
    from ..tasks.probe import probe_text, probe_token
    from ..tasks.report import probe_files
    from ..tasks.runs import write_run_directory

    check_output(output, overwrite)
    cache = "memory" if no_cache else cache_option(no_cache, cache_dir)
    if task == "text":
        columns = {"text_column": column_spec(text_column), "label_column": column_spec(label_column)}
        result = probe_text(
            train_file, **options_for(ctx, probe_text, poolings=poolings.split(","), cache=cache, **columns)
        )
    elif task == "token":
        result = probe_token(train_file, **options_for(ctx, probe_token, C=c_value, cache=cache))
    else:
        raise InputError(f"--task {task!r}: valid tasks are text and token.")
    typer.echo(format_table(result.table(), list(result.table()[0])))
    title = f"{result.task} probe of {result.facts['model']} on {train_file.name}"
    write_run_directory(output, probe_files(result, title), overwrite)
    say(f"wrote {output}/probe.md, probe.csv, probe.json, probe.png")
