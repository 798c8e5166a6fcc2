"""`bertkit quantize`: int8 calibrated on your own texts, written as a copy of the model or fine-tuned run."""

from __future__ import annotations

from typing import Annotated

import typer

from ..io.readers import column_spec
from .common import app, say
from .options import Calibration, Header, Limit, Output, Overwrite, TextColumn, Threads


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
