"""Question answering on the command line: `bertkit answer`, and what evaluate and predict do with a QA run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import InputError
from ..tasks.answer_options import AnswerOptions
from .common import app, check_attribution_flags, echo_attribution, path_kind, texts_or_file, utf8_texts, write_output
from .options import AsText, Attributions, Device, Generated, Json, Precision, Run, Threads, from_fields

if TYPE_CHECKING:
    from ..tasks.qa import FineTunedQA


@app.command()
@from_fields(AnswerOptions, "options")
def answer(
    run: Run,
    question: Annotated[
        list[str], typer.Option("--question", metavar="TEXT", callback=utf8_texts, help="Question; repeatable.")
    ],
    context: Annotated[str, typer.Option("--context", callback=utf8_texts, help="The text, or its file.")],
    options: Generated,
    as_text: AsText = False,
    attributions: Attributions = False,
    as_json: Json = False,
    precision: Precision = None,
    threads: Threads = None,
    device: Device = "auto",
) -> None:
    """Answer questions from a context with a question-answering run (fine-tuned with --task qa).

    One JSON line per question, {answer, score, start, end} with character offsets into the context (a list of them
    with --top-k). --attributions prints which words of the question and context made each best answer (--json: its
    JSON, with the answer under "answer").
    """
    from ..tasks.load import load_run

    check_attribution_flags(attributions, as_json)
    if attributions and options != AnswerOptions():
        raise InputError("--attributions explains the answer at the default answer options; leave the others out.")
    source = texts_or_file([context], as_text)
    if source is not None:
        from ..io.text_files import decoded_lines

        context = "".join(line for _, line in decoded_lines(source))
    model = load_run(run, precision=precision, device=device)
    if not hasattr(model, "answer"):
        raise InputError(f"{run} is not a question-answering run; fine-tune one with --task qa.")
    for asked, item in zip(question, model.answer(list(question), context, options)):
        if attributions:
            echo_attribution(model.explain(asked, context), as_json, question=asked, answer=item)
        else:
            typer.echo(json.dumps(item, ensure_ascii=False))


def write_predictions(model: FineTunedQA, inputs: list[str], output: Path | None) -> None:
    """Write a SQuAD file's answers (official `{id: answer}` layout, "" for none) on stdout or to `output`."""
    from ..io.squad import read_squad

    if len(inputs) != 1 or path_kind(inputs[0]) != "file":
        raise InputError("a question-answering run predicts a SQuAD file: give one .json or .jsonl file.")
    answers = model.predictions(read_squad(inputs[0]).examples)[0]
    done = f"wrote the answers to {len(answers)} questions of {inputs[0]} to {output}"
    write_output(json.dumps(answers, ensure_ascii=False, indent=1) + "\n", output, done)
