"""Commands on saved runs: evaluate (on labelled data), predict (texts or pairs), rerank (documents for a query)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import InputError, quoted
from ..io.readers import column_spec
from .common import (
    app,
    cache_option,
    check_attribution_flags,
    echo_attribution,
    existing_text_file,
    path_kind,
    say,
    texts_or_file,
    utf8_texts,
    write_output,
)
from .options import (
    AsText,
    Attributions,
    CacheDir,
    Device,
    Header,
    Json,
    LabelColumn,
    NoCache,
    Output,
    Overwrite,
    Pair,
    PairColumn,
    Precision,
    Run,
    TextColumn,
    Threads,
    TopK,
)


def _load(run: Path, no_cache: bool, cache_dir: Path | None, precision: str | None, device: str) -> Any:
    from ..tasks.load import load_run

    return load_run(run, cache=cache_option(no_cache, cache_dir), precision=precision, device=device)


@app.command()
def evaluate(
    run: Run,
    data_file: Annotated[
        Path,
        typer.Argument(
            callback=existing_text_file,
            help="Labelled file: TSV/CSV/JSONL for text and pair models, CoNLL / word-tag for taggers, SQuAD JSON / "
            "JSONL for question answering.",
        ),
    ],
    text_column: TextColumn = None,
    pair_column: PairColumn = None,
    label_column: LabelColumn = None,
    header: Header = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    threads: Threads = None,
    precision: Precision = None,
    device: Device = "auto",
) -> None:
    """Score a saved model on labelled data (--precision: default the run's own).

    Accuracy, macro-F1, per-class table, confusion matrix; a regressor's correlations; a multi-label model's F1 per
    label; a tagger's entity P/R/F1 per type; a question-answering run's exact match and F1 on a SQuAD file (v2:
    HasAns / NoAns and the best no-answer threshold).
    """
    from ..io.readers import read_labelled
    from ..tasks.evaluate import evaluate as evaluate_run
    from ..tasks.evaluate import warn_if_training_data
    from ..tasks.tagger import FineTunedTagger

    estimator = _load(run, no_cache, cache_dir, precision, device)
    warn_if_training_data(estimator.record_, data_file)
    if hasattr(estimator, "answer"):  # question answering: SQuAD's exact match and F1
        typer.echo(estimator.evaluate(data_file).text())
        return
    if isinstance(estimator, FineTunedTagger):
        from ..io.conll import read_tagged

        try:
            data = read_tagged(data_file)
        except InputError as exc:
            raise InputError(
                f"{run} is a tagger (fine-tuned with --task token) and is scored on a word/tag file. {exc}"
            ) from None
        typer.echo(evaluate_run(estimator, data.words, data.tags).text())
        return
    stored = estimator.record_.get("data", {})  # columns as the run recorded them, unless given
    given = dict(text_column=text_column, label_column=label_column, pair_column=pair_column, header=header)
    chosen = {name: stored.get(name) if value is None else value for name, value in given.items()}
    columns = {name: column_spec(value) for name, value in chosen.items() if name.endswith("_column")}
    problem = getattr(estimator, "problem", "single_label_classification")
    paired = getattr(estimator, "takes_pairs", False) is True
    kind = {"regression": "numeric", "multi_label_classification": "multi"}.get(problem, "categorical")
    separator = stored.get("label_separator", ",")
    data = read_labelled(
        data_file, **columns, header=chosen["header"], paired=paired, label_kind=kind, label_separator=separator
    )
    inputs = list(zip(data.texts, data.pairs)) if paired else data.texts
    typer.echo(evaluate_run(estimator, inputs, data.labels, str(data_file), str(run)).text())


@app.command()
def predict(
    run: Run,
    inputs: Annotated[
        list[str],
        typer.Argument(
            callback=utf8_texts, help="Texts to label, or one file (TSV/CSV/JSONL/text; a SQuAD file for QA)."
        ),
    ],
    pair: Pair = None,
    as_text: AsText = False,
    output: Output = None,
    column: TextColumn = None,
    pair_column: PairColumn = None,
    aggregation: Annotated[
        str | None,
        typer.Option(
            help="Taggers: none | simple | first | average | max, as transformers' token-classification pipeline "
            "defines them (default: bertkit's words, tagged at their first sub-token as in training)."
        ),
    ] = None,
    header: Header = None,
    overwrite: Overwrite = False,
    attributions: Attributions = False,
    target: Annotated[
        str | None,
        typer.Option(
            help="With --attributions: the class (a tagger: the entity's text) to explain (default: the predicted one)."
        ),
    ] = None,
    as_json: Json = False,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    threads: Threads = None,
    precision: Precision = None,
    device: Device = "auto",
) -> None:
    """Label texts, text pairs (--pair) or every row of a file with a saved model.

    Taggers print each entity with its character span; regressors their score. -o writes a TSV (label, probability,
    text; taggers: one row per entity; question answering: JSON, {id: answer}). --attributions prints, for each text
    given on the command line, which words made its prediction (--json: as JSON lines).
    """
    check_attribution_flags(attributions, as_json, output)
    if target is not None and not attributions:
        raise InputError("--target chooses what --attributions explains: add --attributions.")
    _check_table_output(output, overwrite, run, inputs)  # before the heavy imports
    from ..io.readers import read_text_pairs, read_texts
    from ..tasks.tagger import FineTunedTagger

    estimator = _load(run, no_cache, cache_dir, precision, device)
    if hasattr(estimator, "answer") and attributions:
        raise InputError("a question-answering run explains its answers with: bertkit answer --attributions.")
    if hasattr(estimator, "answer"):  # question answering: a SQuAD file's answers, {id: answer}
        from .qa import write_predictions

        write_predictions(estimator, inputs, output)
        return
    paired = getattr(estimator, "takes_pairs", False) is True
    # (texts, pairs or None): texts with --pair, or a file's columns
    source, pairs = texts_or_file(inputs, as_text), None
    if source is None:
        if paired and (pair is None or len(inputs) != 1):
            raise InputError(
                "this run scores text pairs: give one text and its pair with --pair, or a file with "
                "--text-column and --pair-column."
            )
        if not paired and pair is not None:
            raise InputError("--pair is for pair models (fine-tuned with --task pair); this one takes single texts.")
        say(f"labelling {len(inputs)} input{'s' if len(inputs) != 1 else ''} given on the command line")
        texts, pairs = list(inputs), [pair] if pair is not None else None
    elif not paired:
        texts = read_texts(source, column_spec(column), header=header)[0]
        say(f"labelling {len(texts)} rows of {source}" + (f" (column {column})" if column is not None else ""))
    else:
        texts, pairs, _ = read_text_pairs(source, column_spec(column), column_spec(pair_column), header=header)
        say(f"labelling {len(texts)} pairs of {source}")
    if attributions:
        if source is not None:
            raise InputError(
                "--attributions explains texts given on the command line (about a second each), not a file."
            )
        for k, text in enumerate(texts):
            pair_text = None if pairs is None else pairs[k]
            echo_attribution(estimator.explain(text, pair_text, target=target), as_json, text=text, pair=pair_text)
        return
    if isinstance(estimator, FineTunedTagger):
        rows = [["row", "type", "start", "end", "score", "entity"]]
        for row, entities in enumerate(estimator.predict(texts, aggregation=aggregation)):
            rows += [[row, e.type, e.char_start, e.char_end, f"{e.score:.4f}", e.text] for e in entities]
    else:
        if aggregation is not None:
            raise InputError("--aggregation is for taggers (fine-tuned with --task token).")
        rows = _prediction_rows(estimator, texts, pairs)
    _write_rows(rows, output, f"wrote predictions for {len(texts)} inputs to {output}")


def _prediction_rows(estimator: Any, texts: list[str], pairs: list[str] | None) -> list[list]:
    inputs = list(zip(texts, pairs)) if pairs is not None else texts
    shown = [list(item) for item in inputs] if pairs is not None else [[text] for text in texts]
    tail = ["text", "pair"] if pairs is not None else ["text"]
    problem = getattr(estimator, "problem", "single_label_classification")
    if problem == "regression":
        return [["score", *tail]] + [[f"{s:.4f}", *row] for s, row in zip(estimator.predict(inputs), shown)]
    if problem == "multi_label_classification":
        labels = estimator.predict(inputs)
        return [["labels", *tail]] + [[",".join(found), *row] for found, row in zip(labels, shown)]
    probabilities = estimator.predict_proba(inputs)
    rows = [["label", "probability", *tail]]
    for index, probability, row in zip(probabilities.argmax(axis=1), probabilities, shown):
        rows.append([estimator.classes_[index], f"{probability[index]:.4f}", *row])
    return rows


def _check_table_output(output: Path | None, overwrite: bool, run: Path, inputs: list[str]) -> None:
    """Before the model loads: `-o` can be written, is no input nor in the run, and is new unless `overwrite`."""
    from ..io.writers import check_output, check_writable_location

    if output is not None:
        files = [given for given in inputs if path_kind(given) == "file"]
        check_output(check_writable_location(output), overwrite, [run, *files])


def _write_rows(rows: list[list], output: Path | None, done: str) -> None:
    """Write the rows as TSV: on stdout, or atomically to `output`."""
    import csv
    import io

    buffer = io.StringIO()
    csv.writer(buffer, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_MINIMAL).writerows(rows)
    write_output(buffer.getvalue(), output, done)


@app.command()
def rerank(
    run: Run,
    documents: Annotated[
        list[str], typer.Argument(callback=utf8_texts, help="Documents to rank, or one file (text lines, or a column).")
    ],
    query: Annotated[
        str, typer.Option("--query", callback=utf8_texts, help="The query every document is scored against.")
    ],
    top_k: TopK = None,
    as_text: AsText = False,
    column: TextColumn = None,
    header: Header = None,
    output: Output = None,
    overwrite: Overwrite = False,
    threads: Threads = None,
    precision: Precision = None,
    device: Device = "auto",
) -> None:
    """Rank documents for a query with a pair model (a cross-encoder: --task pair), best first.

    Rows: rank, the document's index (0-based; its file line for a file), score, document.
    """
    from ..io.readers import read_texts

    _check_table_output(output, overwrite, run, documents)
    estimator = _load(run, True, None, precision, device)
    if not hasattr(estimator, "rank"):
        raise InputError(f"{run} is not a text-pair model; rerank needs a run fine-tuned with --task pair.")
    if top_k is not None and top_k < 1:
        raise InputError(f"--top-k {top_k}: give 1 or more.")
    source = texts_or_file(documents, as_text)
    lines = None
    if source is not None:
        documents, _, lines = read_texts(source, column_spec(column), header=header)
    ranked = estimator.rank(query, documents, top_k=top_k)
    say(f"ranked {len(documents)} documents for {quoted(query)}" + (f" (top {top_k})" if top_k else ""))
    rows = [["rank", "line" if lines is not None else "index", "score", "document"]]
    for rank, (i, score) in enumerate(ranked, start=1):
        rows.append([rank, lines[i] if lines is not None else i, f"{score:.4f}", documents[i]])
    _write_rows(rows, output, f"wrote the ranking to {output}")
