"""Commands that train the encoder or compare its layers: finetune, probe."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..display import text_table as format_table
from ..errors import InputError
from ..io.readers import column_spec
from ..tasks.finetune.settings import FinetuneSettings
from .common import TRAINING, app, cache_option, existing_text_file, options_for, say, verbosity
from .options import (
    C,
    CacheDir,
    Dev,
    Device,
    Generated,
    Header,
    LabelColumn,
    Limit,
    Model,
    NoCache,
    Output,
    Overwrite,
    PairColumn,
    Seed,
    TextColumn,
    Threads,
    from_fields,
)


@app.command()
@from_fields(
    FinetuneSettings,
    "args",
    build="bertkit.tasks.finetune:FinetuneArguments",
    group=TRAINING,
    lead=("task", "num_train_epochs", "learning_rate", "batch_size"),
)
def finetune(
    ctx: typer.Context,
    train_file: Annotated[Path, typer.Argument(callback=existing_text_file, help="Training data (see above).")],
    output_dir: Output,
    label_separator: Annotated[str, typer.Option(help="Multi-label: what separates a row's labels.")] = ",",
    dev: Dev = None,
    limit: Limit = None,
    text_column: TextColumn = None,
    pair_column: PairColumn = None,
    label_column: LabelColumn = None,
    header: Header = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run from its checkpoint.")] = False,
    overwrite: Overwrite = False,
    model: Model = None,
    threads: Threads = None,
    device: Device = "auto",
    args: Generated = None,
) -> None:
    """Fine-tune the whole encoder with a classification, tagging or span head.

    A classification head for sentences, a tagging head for tokens (NER), a span head for question answering. Data:
    TSV/CSV/JSONL (text, label) for --task text, (text, pair, label) for --task pair; CoNLL or word/tag for --task
    token; SQuAD JSON or JSONL (id, question, context, answers) for --task qa. -o: the run directory (a transformers
    model, its tokenizer, bertkit.json); without --dev, 10% of the training data is held out.

    Several processes (GPUs, or CPU cores with gloo): `torchrun --nproc_per_node N -m bertkit finetune ...` or
    `accelerate launch -m bertkit finetune ...`; --batch-size stays the batch of one step, split between them.
    """
    from ..tasks.finetune.checkpoint import check_output

    check_output(output_dir, resume, overwrite, [train_file, dev, model])  # before torch loads
    from ..tasks.finetune import finetune as run_finetune

    given = options_for(ctx, run_finetune)
    given |= {name: column_spec(value) for name, value in given.items() if name.endswith("_column")}
    try:
        run_finetune(train_file, **given, args=args())
    except KeyboardInterrupt:
        sys.exit(130)


@app.command()
def probe(
    ctx: typer.Context,
    train_file: Annotated[Path, typer.Argument(callback=existing_text_file, help="Training data (see above).")],
    dev: Dev,
    output: Output,
    task: Annotated[str, typer.Option(help="text | token (pair and qa: finetune).")] = "text",
    limit: Limit = None,
    poolings: Annotated[str, typer.Option(help="Text task: poolings to compare.")] = "cls,mean,max,pooler",
    subtoken_pooling: Annotated[str, typer.Option(help="Token task: first | last | mean | first_last.")] = "first",
    c_value: C = 1.0,
    seed: Seed = 0,
    text_column: TextColumn = None,
    label_column: LabelColumn = None,
    header: Header = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    overwrite: Overwrite = False,
    model: Model = None,
    threads: Threads = None,
    device: Device = "auto",
) -> None:
    """Score every hidden state, the paper's combinations and a learned mix with a linear probe.

    Which layer's vectors? Data: TSV/CSV/JSONL (text, label) for --task text; CoNLL or word/tag for --task token.
    -o: a folder for probe.md, probe.csv, probe.json and probe.png.
    """
    from ..io.writers import check_output

    check_output(output, overwrite, [train_file, dev, model])  # before the heavy imports
    from ..tasks.probe import probe_text, probe_token
    from ..tasks.report import probe_files
    from ..tasks.runs import write_run

    cache = "memory" if no_cache else cache_option(no_cache, cache_dir)
    shared = {"cache": cache, "progress": False if verbosity() == "quiet" else None}
    if task == "text":
        shared |= {"text_column": column_spec(text_column), "label_column": column_spec(label_column)}
        result = probe_text(train_file, **options_for(ctx, probe_text, poolings=poolings.split(","), **shared))
    elif task == "token":
        result = probe_token(train_file, **options_for(ctx, probe_token, C=c_value, **shared))
    else:
        raise InputError(f"--task {task!r}: valid tasks are text and token.")
    typer.echo(format_table(result.table(), list(result.table()[0])))
    title = f"{result.task} probe of {result.facts['model']} on {train_file.name}"
    write_run(output, probe_files(result, title), overwrite=overwrite)
    say(f"wrote {output}/probe.md, probe.csv, probe.json, probe.png")
    if task == "text" and "mean" in poolings.split(","):
        from ..tasks.distill import cut_choice

        cut, given = cut_choice(result), {"--text-column": text_column, "--label-column": label_column}
        reading = "".join(f" {flag} {value}" for flag, value in given.items() if value is not None)
        reading += "" if header is None else " --header" if header else " --no-header"
        source, data = f"{model} " if model else "", f"--data {train_file} --dev {dev}{reading}"
        if cut.layers == len(cut.scores):
            say(f"no smaller model: {cut.reason()}.")
        else:
            say(
                f"a smaller model: {cut.reason()}; keeping {cut.layers} of {len(cut.scores)} layers gives those "
                f"vectors:\n  bertkit distill {source}-l {cut.layers} -o {output}-{cut.layers}-layers   (or -l best "
                f"{data})"
            )
