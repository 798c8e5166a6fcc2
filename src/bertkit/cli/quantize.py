"""Smaller and faster models: `bertkit quantize` (int8 calibrated on your texts), `bertkit distill` (fewer layers)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..io.readers import column_spec
from .common import app, existing_text_file, say
from .options import BatchSize, Calibration, Header, LabelColumn, Limit, Output, Overwrite, TextColumn, Threads


@app.command()
def quantize(
    model: Annotated[
        str | None, typer.Argument(help="A model directory or hub name (omit for the default), or a finetune run.")
    ] = None,
    *,
    output: Output,
    calibration: Calibration = None,
    column: TextColumn = None,
    header: Header = None,
    limit: Limit = 512,
    overwrite: Overwrite = False,
    threads: Threads = None,
    device: Annotated[str | None, typer.Option(help="Refused unless cpu: int8 runs on the CPU.")] = None,
) -> None:
    """Calibrate precision='int8' on your texts (--calibration: like the ones you will embed; --limit: 0 = all).

    -o: a new directory, a copy of MODEL with its int8 calibration; then `--model DIR --precision int8` (or the run)
    uses that calibration.
    """
    from ..errors import InputError
    from ..io.writers import check_output

    check_output(output, overwrite, [model, calibration])  # before torch loads
    from ..encoder.int8 import packaged_texts
    from ..io.readers import read_texts
    from ..tasks.quantize import quantize as quantize_model

    if device not in (None, "cpu"):
        raise InputError(
            f"--device {device}: quantize calibrates precision='int8', which runs on the CPU only (oneDNN's VNNI/AMX "
            "int8 kernels; torch has no int8 path for these layers on GPUs). Leave --device out; on a GPU use "
            "--precision fp16 or bf16 instead."
        )

    texts = packaged_texts() if calibration is None else read_texts(calibration, column_spec(column), header=header)[0]
    texts = texts[:limit] if limit else texts
    report = quantize_model(model, output, texts, overwrite=overwrite)
    say(
        f"calibrated on {report.texts} texts ({report.smoothed} groups of linear layers smoothed, strength "
        f"{report.alpha:g}); {report.fidelity}"
    )
    how = f"--model {report.output}" if report.kind == "encoder" else f"bertkit predict/evaluate {report.output}"
    typer.echo(f"wrote {report.output}: use it with --precision int8 ({how}).")


@app.command()
def distill(
    model: Annotated[
        str | None, typer.Argument(help="The teacher: a model directory or hub name (omit: default).")
    ] = None,
    *,
    output: Output,
    layers: Annotated[
        str,
        typer.Option("--layers", "-l", help="Layers to keep: a number, or best (the probe's choice; --data, --dev)."),
    ] = "best",
    data: Annotated[
        Path | None,
        typer.Option(callback=existing_text_file, help="Labelled training data the probe scores on."),
    ] = None,
    dev: Annotated[
        Path | None, typer.Option(callback=existing_text_file, help="Labelled dev data it scores on.")
    ] = None,
    tolerance: Annotated[float, typer.Option(help="best: dev accuracy the cut may lose (0.01: a point).")] = 0.01,
    texts: Annotated[
        Path | None,
        typer.Option(
            callback=existing_text_file, help="Unlabelled texts: train the cut to give the teacher's vectors."
        ),
    ] = None,
    static: Annotated[
        bool, typer.Option("--static", help="Write a static model (model2vec: a table of token vectors; no data).")
    ] = False,
    dims: Annotated[
        int | None, typer.Option(min=0, help="With --static: the table's width (PCA; omit for 256, 0 keeps all).")
    ] = None,
    epochs: Annotated[int, typer.Option(help="With --texts: passes over them.")] = 1,
    batch_size: BatchSize = None,
    lr: Annotated[float, typer.Option("--lr", help="With --texts: peak learning rate.")] = 1e-4,
    text_column: TextColumn = None,
    label_column: LabelColumn = None,
    header: Header = None,
    limit: Limit = None,
    overwrite: Overwrite = False,
    threads: Threads = None,
) -> None:
    """Write a smaller copy of MODEL that keeps its first layers (-l 3), or the fewest the layer probe finds as good.

    --texts FILE then trains the cut to reproduce MODEL's sentence vectors on those texts (any unlabelled text).
    --static writes a static model instead: one vector per token of MODEL's vocabulary, averaged (model2vec).

    -o: a transformers folder with MODEL's tokenizer and sentence-transformers modules: its vectors are those of
    layer K of MODEL (what `bertkit probe` scored); SentenceTransformer, AutoModel and every bertkit command load it.
    """
    from ..errors import InputError
    from ..io.writers import check_output

    check_output(output, overwrite, [model, data, dev, texts])  # before torch loads
    probing = {"--data": data, "--dev": dev, "--text-column": text_column, "--label-column": label_column}
    if static and (given := [flag for flag, value in {**probing, "--texts": texts}.items() if value is not None]):
        raise InputError(f"{', '.join(given)}: --static distils from MODEL's vocabulary alone; leave them out.")
    if static and layers != "best":
        raise InputError(f"-l {layers}: a static model keeps no layers; leave -l out with --static.")
    if dims is not None and not static:
        raise InputError(f"--dims {dims}: the width of a static model's table; add --static, or leave --dims out.")
    if static:
        from ..tasks.distill import distill as make

        report = make(model, output, static=static, dims=256 if dims is None else dims or None, overwrite=overwrite)
        say(f"static model: {report.reason} ({report.seconds:.0f}s)")
        typer.echo(f"wrote {report.output}: use it as a model (--model {report.output}).")
        return
    if layers != "best" and (given := [flag for flag, value in probing.items() if value is not None]):
        raise InputError(
            f"{', '.join(given)}: the probe's data, for -l best; -l {layers} keeps {layers} layers as asked."
        )
    from ..tasks.distill import check_layers
    from ..tasks.distill import distill as cut

    columns = {"text_column": column_spec(text_column), "label_column": column_spec(label_column), "header": header}
    report = cut(
        model,
        output,
        layers=check_layers(layers),
        data=data,
        dev=dev,
        tolerance=tolerance,
        overwrite=overwrite,
        texts=texts,
        epochs=epochs,
        batch_size=batch_size or 32,
        learning_rate=lr,
        **({**columns, "limit": limit} if layers == "best" else {}),
    )
    say(f"kept {report.layers} of {report.of} layers: {report.reason} ({report.seconds:.0f}s)")
    typer.echo(f"wrote {report.output}: use it as a model (--model {report.output}).")
