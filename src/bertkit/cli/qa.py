"""Question answering on the command line: `bertkit answer`, and what evaluate and predict do with a QA run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import InputError
from .common import app, path_kind, texts_or_file, utf8_texts, write_output
from .options import AsText, Device, Precision, Run, Threads, TopK

if TYPE_CHECKING:
    from ..tasks.qa import FineTunedQA


@app.command()
def answer(
    run: Run,
    question: Annotated[
        list[str], typer.Option("--question", "-q", metavar="TEXT", callback=utf8_texts, help="Question; repeatable.")
    ],
    context: Annotated[str, typer.Option("--context", "-c", callback=utf8_texts, help="The text, or its file.")],
    as_text: AsText = False,
    top_k: TopK = 1,
    max_answer_len: Annotated[int, typer.Option(help="Longest answer, in tokens.")] = 30,
    handle_impossible_answer: Annotated[
        bool | None,
        typer.Option(
            "--handle-impossible-answer/--no-handle-impossible-answer",
            help="Allow 'no answer' ({answer: '', start: 0, end: 0}); default: the run's own (on for a SQuAD v2 run).",
        ),
    ] = None,
    doc_stride: Annotated[int | None, typer.Option(help="Tokens two windows share (default: the run's).")] = None,
    precision: Precision = None,
    threads: Threads = None,
    device: Device = "auto",
) -> None:
    """Answer questions from a context with a question-answering run (fine-tuned with --task qa).

    One JSON line per question, {answer, score, start, end} with character offsets into the context (a list of them
    with --top-k).
    """
    from ..tasks.load import load_run

    source = texts_or_file([context], as_text)
    if source is not None:
        from ..io.text_files import decoded_lines

        context = "".join(line for _, line in decoded_lines(source))
    model = load_run(run, precision=precision, device=device)
    if not hasattr(model, "answer"):
        raise InputError(f"{run} is not a question-answering run; fine-tune one with --task qa.")
    found = model.answer(list(question), context, top_k, max_answer_len, handle_impossible_answer, doc_stride)
    for item in found:
        typer.echo(json.dumps(item, ensure_ascii=False))


def write_predictions(model: FineTunedQA, inputs: list[str], output: Path | None) -> None:
    """Write a SQuAD file's answers (official `{id: answer}` layout, "" for none) on stdout or to `output`."""
    from ..io.squad import read_squad

    if len(inputs) != 1 or path_kind(inputs[0]) != "file":
        raise InputError("a question-answering run predicts a SQuAD file: give one .json or .jsonl file.")
    data = read_squad(inputs[0])
    answers, _, _ = model.predictions(data.examples)
    done = f"wrote the answers to {len(answers)} questions of {inputs[0]} to {output}"
    write_output(json.dumps(answers, ensure_ascii=False, indent=1) + "\n", output, done)
