"""The `bertkit` command line: parses options, calls the library, prints. Errors are one line, never a traceback."""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import Optional

import typer

from .defaults import DEFAULT_BATCH_SIZE
from .errors import BertkitError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Use pre-trained BERT-family encoders: inspect tokenization, extract embeddings, train classifiers, probe layers, fine-tune.",
)

ModelOption = typer.Option(None, "--model", "-m", help="Model: a local directory, a hub name, or omit for the packaged default.")
ThreadsOption = typer.Option(None, "--threads", help="Torch threads (default: torch's choice).")
HeaderOption = typer.Option(None, "--header/--no-header", help="First line is a header (default: when columns are names).")
CacheDirOption = typer.Option(None, "--cache-dir", help="Embedding cache directory (default ~/.cache/bertkit/embeddings).")
NoCacheOption = typer.Option(False, "--no-cache", help="Do not read or write the embedding cache.")
OverwriteOption = typer.Option(False, "--overwrite", help="Replace an existing output directory.")
RunArgument = typer.Argument(..., help="A run directory written by `bertkit train` or `bertkit finetune`.")


def _encoder(model: Optional[str], threads: Optional[int] = None, precision: str = "fp32"):
    from .encode import Encoder

    return Encoder.from_pretrained(model, threads=threads, precision=precision)


def _say(message: str) -> None:
    typer.echo(message, err=True)


def format_table(rows: list[dict], columns: list[str]) -> str:
    """Left-aligned plain-text table (copy-pasteable, no box drawing)."""
    cells = [[str("" if row[c] is None else row[c]) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


@app.command()
def info(model: Optional[str] = ModelOption) -> None:
    """Describe the model: architecture, layers, hidden size, max length, vocabulary, casing."""
    facts = _encoder(model).info()
    width = max(len(k) for k in facts)
    for key, value in facts.items():
        typer.echo(f"{key.ljust(width)}  {value}")


@app.command()
def tokenize(
    text: str = typer.Argument(..., help="The text to tokenize."),
    pair: Optional[str] = typer.Option(None, "--pair", help="A second sentence (token type id 1)."),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Pad to this many tokens (and truncate)."),
    model: Optional[str] = ModelOption,
) -> None:
    """Show the tutorial's table: each token with its id, attention mask and token type id."""
    encoder = _encoder(model)
    padding = "max_length" if max_length else "longest"
    batch = encoder.tokenize([text], [pair] if pair is not None else None, max_length=max_length, padding=padding)
    typer.echo(format_table(batch.table(0), ["position", "token", "id", "mask", "type_id", "word"]))
    if batch.truncated[0]:
        _say(f"note: the input was truncated to {batch.input_ids.shape[1]} tokens.")
    _say(f"vocabulary coverage: {encoder.coverage([text] + ([pair] if pair else [])).message()}")


@app.command()
def embed(
    input: Path = typer.Argument(..., help="TSV/CSV/JSONL or plain-text file (one text per line)."),
    output: Path = typer.Option(..., "--output", "-o", help="Output .npy, .npz (vectors + ids) or .parquet."),
    column: Optional[str] = typer.Option(None, "--column", "-c", help="Text column: index or name (JSONL: field; default 0 / 'text')."),
    header: Optional[bool] = typer.Option(None, "--header/--no-header", help="First line is a header (default: only when --column is a name)."),
    id_column: Optional[str] = typer.Option(None, "--id-column", help="Column whose values are stored as row ids (.npz/.parquet)."),
    layers: str = typer.Option("last", "--layers", "-l", help="e.g. last, -2, 0, last4:sum, last4:concat, all:mean, '-1,-2'."),
    pooling: str = typer.Option("mean", "--pooling", "-p", help="cls, pooler, mean, max, 'cls+mean', or none (token vectors, .npz)."),
    batch_size: int = typer.Option(DEFAULT_BATCH_SIZE, "--batch-size", "-b", help="Texts per forward pass."),
    max_length: Optional[int] = typer.Option(None, "--max-length"),
    long_text: str = typer.Option("truncate", "--long-text", help="truncate | error | window"),
    stride: Optional[int] = typer.Option(None, "--stride", help="Overlap of windows in tokens (long-text window)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Input format if the extension does not say: tsv, csv, jsonl, text."),
    model: Optional[str] = ModelOption,
    threads: Optional[int] = ThreadsOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary."),
    chunk_rows: int = typer.Option(4096, "--chunk-rows", help="Rows read, embedded and written per chunk (memory and resume granularity)."),
    precision: str = typer.Option("fp32", "--precision", help="fp32 | bf16 (bf16 only on CPUs with native bf16: AMX / AVX512-BF16)."),
) -> None:
    """Embed every text of a file and write the vectors (streamed in chunks; an interrupted run resumes)."""
    from .data import read_texts
    from .outputs import check_output_path, write_token_vectors
    from .pooling import parse_pooling
    from .stream import embed_file

    tokens_only = parse_pooling(pooling) == ("none",)
    if not tokens_only:
        check_output_path(output)
    encoder = _encoder(model, threads, precision)
    started = time.perf_counter()
    if tokens_only:
        texts, ids, _ = read_texts(input, _column(column), header=header, fmt=fmt, id_column=_column(id_column))
        result, report = encoder.embed(
            texts, layers=layers, pooling=pooling, batch_size=batch_size, max_length=max_length,
            long_text=long_text, stride=stride, progress=None if not quiet else False, return_report=True,
        )
        write_token_vectors(output, [r.tokens for r in result], [r.vectors for r in result], ids)
        rows, shape = len(texts), f"{sum(len(r.tokens) for r in result)} token vectors"
        truncated, windowed, coverage = report.n_truncated, len(report.windowed_rows), report.coverage.message()
    else:
        from tqdm.auto import tqdm

        bar = tqdm(total=None, unit="text", desc="embedding", disable=quiet or not sys.stderr.isatty(), leave=False)

        def advance(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()

        try:
            result = embed_file(
                encoder, input, output, column=_column(column), id_column=_column(id_column), header=header, fmt=fmt,
                layers=layers, pooling=pooling, batch_size=batch_size, max_length=max_length, long_text=long_text,
                stride=stride, chunk_rows=chunk_rows, on_chunk=advance,
            )
        except KeyboardInterrupt:
            bar.close()
            _say("interrupted: finished chunks are kept; run the same command again to continue.")
            raise
        bar.close()
        rows, shape = result.rows, f"{result.rows} × {result.dim}"
        truncated, windowed = result.truncated, result.windowed
        share = result.unknown_tokens / result.tokens if result.tokens else 0.0
        coverage = f"[UNK] {result.unknown_tokens} of {result.tokens} tokens ({share:.1%})"
        if result.resumed_from:
            _say(f"resumed after row {result.resumed_from} of {result.rows}")
    seconds = time.perf_counter() - started
    if not quiet:
        _say(f"wrote {output}: {shape} ({rows / max(seconds, 1e-9):.0f} texts/s)")
        if truncated:
            _say(f"{truncated} texts were truncated to {max_length or encoder.max_length} tokens; --long-text window keeps all tokens.")
        if windowed:
            _say(f"{windowed} long texts were embedded in overlapping windows.")
        _say(f"vocabulary coverage: {coverage}")


def _cache_option(no_cache: bool, cache_dir: Optional[Path]):
    from .cache import default_cache_dir

    if no_cache:
        return None
    return cache_dir or default_cache_dir()


@app.command()
def train(
    train_file: Path = typer.Argument(..., help="Training data: TSV/CSV (text, label columns) or JSONL."),
    output: Path = typer.Option(..., "--output", "-o", help="Run directory to create (config, classifier, metrics)."),
    dev: Optional[Path] = typer.Option(None, "--dev", help="Evaluation file; without it a stratified split of the training file."),
    test_size: float = typer.Option(0.25, "--test-size", help="Share held out for evaluation when there is no --dev."),
    text_column: Optional[str] = typer.Option(None, "--text-column", help="Index or name (default 0; JSONL 'text')."),
    label_column: Optional[str] = typer.Option(None, "--label-column", help="Index or name (default 1; JSONL 'label')."),
    header: Optional[bool] = HeaderOption,
    layers: str = typer.Option("all:concat", "--layers", "-l", help="Layer spec (default: every layer, concatenated)."),
    pooling: str = typer.Option("mean", "--pooling", "-p", help="cls, pooler, mean, max or a '+' combination."),
    classifier: str = typer.Option("logreg", "--classifier", help="logreg | linear-svm | mlp"),
    c_value: Optional[float] = typer.Option(None, "--C", help="Fix the regularisation C (default: chosen by cross-validation)."),
    cv: int = typer.Option(5, "--cv", help="Cross-validation folds for choosing C."),
    scale: bool = typer.Option(True, "--scale/--no-scale", help="Standardise features before the classifier."),
    seed: int = typer.Option(0, "--seed"),
    limit: Optional[int] = typer.Option(None, "--limit", help="Use only the first N training rows."),
    report: Optional[Path] = typer.Option(None, "--report", help="Write metrics.json, confusion.png and pca.png here."),
    cache_dir: Optional[Path] = CacheDirOption,
    no_cache: bool = NoCacheOption,
    batch_size: int = typer.Option(DEFAULT_BATCH_SIZE, "--batch-size", "-b", help="Texts per forward pass."),
    max_length: Optional[int] = typer.Option(None, "--max-length"),
    overwrite: bool = OverwriteOption,
    model: Optional[str] = ModelOption,
    threads: Optional[int] = ThreadsOption,
) -> None:
    """Embed texts with the frozen encoder and train a classifier on the vectors (the visual guide's pipeline)."""
    from .classify import TextClassifier
    from .data import read_labelled
    from .outputs import check_new_directory
    from .report import classification_metrics, format_metrics, write_report

    check_new_directory(output, overwrite)
    data = read_labelled(train_file, _column(text_column), _column(label_column), header=header)
    texts, labels = data.texts[:limit], data.labels[:limit]
    if dev is not None:
        dev_data = read_labelled(dev, _column(text_column), _column(label_column), header=header)
        dev_texts, dev_labels, dev_source = dev_data.texts, dev_data.labels, str(dev)
        check_known_labels(dev, dev_labels, set(map(str, labels)))
    else:
        texts, dev_texts, labels, dev_labels = split_stratified(texts, labels, test_size, seed)
        dev_source = f"{test_size:.0%} stratified split of {train_file} (seed {seed})"
    estimator = TextClassifier(
        model=model, layers=layers, pooling=pooling, classifier=classifier, C=c_value, cv=cv, scale=scale, seed=seed,
        max_length=max_length, batch_size=batch_size, cache=_cache_option(no_cache, cache_dir), threads=threads,
    )
    estimator.check_training_labels(labels)
    _say(f"training on {len(texts)} texts ({len(set(map(str, labels)))} classes), evaluating on {len(dev_texts)}: {dev_source}")
    estimator.fit(texts, labels)
    stats = estimator.vectorizer_.cache_.stats if estimator.vectorizer_.cache_ is not None else None
    _say(f"features: layers={layers} pooling={pooling} → {estimator.vectorizer_.n_features_out_} dims; "
         f"embedding {estimator.embed_seconds_:.1f}s" + (f" ({stats})" if stats else ""))
    if estimator.cv_scores_:
        scores = ", ".join(f"{c:g}: {s:.4f}" for c, s in estimator.cv_scores_.items())
        _say(f"C chosen by {min(cv, 99)}-fold cross-validation: C={estimator.C_:g}   (CV accuracy {scores})")
    _say(f"classifier {classifier} fitted in {estimator.fit_seconds_:.1f}s")
    predictions = estimator.predict(dev_texts)
    metrics = classification_metrics(dev_labels, predictions, estimator.classes_, estimator.majority_class_)
    typer.echo(format_metrics(metrics))
    extra = {"data": {"train": str(train_file), "train_rows": len(texts), "dev": dev_source, "dev_rows": len(dev_texts),
                      "text_column": text_column, "label_column": label_column, "header": header}}
    estimator.save(output, metrics=metrics, extra=extra, overwrite=overwrite)
    _say(f"saved {output}")
    if report is not None:
        vectors = estimator.vectorizer_.transform(dev_texts)
        for path in write_report(report, metrics, vectors, dev_labels, title=f"{layers} / {pooling} / {classifier}"):
            _say(f"wrote {path}")


def check_known_labels(path: Path, labels, known: set) -> None:
    from .errors import InputError

    unseen = sorted({str(label) for label in labels} - known)
    if unseen:
        raise InputError(
            f"{path}: labels {unseen} never occur in the training data (known: {sorted(known)}); "
            "the classifier cannot predict them. Check the label column or the file."
        )


def split_stratified(texts, labels, test_size: float, seed: int):
    from sklearn.model_selection import train_test_split

    from .errors import InputError

    if not 0 < test_size < 1:
        raise InputError(f"--test-size {test_size}: give a share between 0 and 1, e.g. 0.25.")
    counts = {label: list(map(str, labels)).count(str(label)) for label in set(map(str, labels))}
    if len(counts) < 2:
        raise InputError(f"the training data has one class only ({next(iter(counts))!r}); a classifier needs at least two.")
    if min(counts.values()) < 2:
        rare = [k for k, v in counts.items() if v < 2]
        raise InputError(f"class {rare} has a single example; a stratified split needs at least 2 per class (or use --dev).")
    return train_test_split(texts, labels, test_size=test_size, random_state=seed, stratify=[str(label) for label in labels])


@app.command()
def finetune(
    train_file: Path = typer.Argument(..., help="Training data: TSV/CSV/JSONL (text, label) for --task text; CoNLL or word/tag for --task token."),
    output: Path = typer.Option(..., "--output", "-o", help="Run directory: a transformers model + tokenizer + bertkit.json."),
    task: str = typer.Option("text", "--task", help="text (sentence classification) | token (tagging, e.g. NER)."),
    dev: Optional[Path] = typer.Option(None, "--dev", help="Dev file scored after every epoch; without it 10% of train is held out."),
    epochs: int = typer.Option(3, "--epochs"),
    learning_rate: float = typer.Option(1e-4, "--lr", help="Peak learning rate (linear warm-up, then linear decay)."),
    batch_size: int = typer.Option(32, "--batch-size", "-b"),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Tokens per example (text: 128; token: the model's maximum)."),
    patience: int = typer.Option(2, "--patience", help="Stop after this many epochs without a better dev score."),
    warmup_ratio: float = typer.Option(0.1, "--warmup-ratio"),
    weight_decay: float = typer.Option(0.01, "--weight-decay"),
    seed: int = typer.Option(0, "--seed"),
    limit: Optional[int] = typer.Option(None, "--limit", help="Use only the first N training examples."),
    text_column: Optional[str] = typer.Option(None, "--text-column", help="Text task: index or name (default 0; JSONL 'text')."),
    label_column: Optional[str] = typer.Option(None, "--label-column", help="Text task: index or name (default 1; JSONL 'label')."),
    header: Optional[bool] = HeaderOption,
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run from its last checkpoint."),
    overwrite: bool = OverwriteOption,
    model: Optional[str] = ModelOption,
    threads: Optional[int] = ThreadsOption,
) -> None:
    """Fine-tune the whole encoder with a classification head (sentences) or a tagging head (tokens, NER)."""
    from .finetune import FinetuneArguments
    from .finetune import finetune as run_finetune

    args = FinetuneArguments(
        task=task, epochs=epochs, learning_rate=learning_rate, batch_size=batch_size, max_length=max_length,
        patience=patience, warmup_ratio=warmup_ratio, weight_decay=weight_decay, seed=seed,
    )
    try:
        run_finetune(
            train_file, dev, output_dir=output, task=task, model=model, args=args, text_column=_column(text_column),
            label_column=_column(label_column), header=header, limit=limit, resume=resume, overwrite=overwrite,
            threads=threads, log=_say,
        )
    except KeyboardInterrupt:
        sys.exit(130)


@app.command()
def probe(
    train_file: Path = typer.Argument(..., help="Training data: TSV/CSV/JSONL (text, label) for --task text; CoNLL or word/tag for --task token."),
    dev: Path = typer.Option(..., "--dev", help="Dev file the probes are scored on."),
    output: Path = typer.Option(..., "--output", "-o", help="Directory for probe.md, probe.csv, probe.json and probe.png."),
    task: str = typer.Option("text", "--task", help="text (sentence classification) | token (tagging, e.g. NER)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Use only the first N training rows / sentences."),
    poolings: str = typer.Option(",".join(("cls", "mean", "max", "pooler")), "--poolings", help="Text task: poolings to compare."),
    subtoken_pooling: str = typer.Option("first", "--subtoken-pooling", help="Token task: first | last | mean | first_last."),
    c_value: float = typer.Option(1.0, "--C", help="Token task: regularisation of the per-word classifier (text: chosen by CV)."),
    seed: int = typer.Option(0, "--seed"),
    text_column: Optional[str] = typer.Option(None, "--text-column"),
    label_column: Optional[str] = typer.Option(None, "--label-column"),
    header: Optional[bool] = HeaderOption,
    cache_dir: Optional[Path] = CacheDirOption,
    no_cache: bool = NoCacheOption,
    overwrite: bool = OverwriteOption,
    model: Optional[str] = ModelOption,
    threads: Optional[int] = ThreadsOption,
) -> None:
    """Which layer's vectors? Score every hidden state, the paper's combinations and a learned mix with a linear probe."""
    from .classify import write_run_directory
    from .errors import InputError
    from .outputs import check_new_directory
    from .probe import probe_text, probe_token
    from .report import probe_files

    check_new_directory(output, overwrite)
    cache = "memory" if no_cache else _cache_option(no_cache, cache_dir)
    if task == "text":
        result = probe_text(train_file, dev, model=model, poolings=poolings.split(","), limit=limit, seed=seed,
                            cache=cache, threads=threads, text_column=_column(text_column),
                            label_column=_column(label_column), header=header, log=_say)
    elif task == "token":
        result = probe_token(train_file, dev, model=model, subtoken_pooling=subtoken_pooling, limit=limit, seed=seed,
                             C=c_value, cache=cache, threads=threads, log=_say)
    else:
        raise InputError(f"--task {task!r}: valid tasks are text and token.")
    typer.echo(format_table(result.table(), list(result.table()[0])))
    title = f"{result.task} probe of {result.facts['model']} on {train_file.name}"
    write_run_directory(output, probe_files(result, title), {}, overwrite)
    _say(f"wrote {output}/probe.md, probe.csv, probe.json, probe.png")


@app.command()
def evaluate(
    run: Path = RunArgument,
    data_file: Path = typer.Argument(..., help="Labelled file: TSV/CSV/JSONL for text models, CoNLL / word-tag for taggers."),
    text_column: Optional[str] = typer.Option(None, "--text-column"),
    label_column: Optional[str] = typer.Option(None, "--label-column"),
    header: Optional[bool] = HeaderOption,
    cache_dir: Optional[Path] = CacheDirOption,
    no_cache: bool = NoCacheOption,
    threads: Optional[int] = ThreadsOption,
) -> None:
    """Score a saved model: accuracy, macro-F1, per-class table, confusion matrix; taggers: entity P/R/F1 per type."""
    from .data import read_labelled
    from .errors import InputError
    from .finetuned import FineTunedTagger, load_run
    from .report import classification_metrics, format_metrics

    estimator = load_run(run, cache=_cache_option(no_cache, cache_dir), threads=threads)
    if isinstance(estimator, FineTunedTagger):
        from .tagging import entity_scores, format_entity_scores, read_tagged

        try:
            data = read_tagged(data_file)
        except InputError as exc:
            raise InputError(f"{run} is a tagger (fine-tuned with --task token) and is scored on a word/tag file. {exc}") from None
        typer.echo(format_entity_scores(entity_scores(data.tags, estimator.predict_word_tags(data.words))))
        return
    stored = estimator.record_.get("data", {})
    data = read_labelled(
        data_file,
        _column(text_column if text_column is not None else stored.get("text_column")),
        _column(label_column if label_column is not None else stored.get("label_column")),
        header=header if header is not None else stored.get("header"),
    )
    check_known_labels(data_file, data.labels, set(map(str, estimator.classes_)))
    predictions = estimator.predict(data.texts)
    majority = getattr(estimator, "majority_class_", None)
    typer.echo(format_metrics(classification_metrics(data.labels, predictions, estimator.classes_, majority)))


@app.command()
def predict(
    run: Path = RunArgument,
    inputs: list[str] = typer.Argument(..., help="Texts to label, or one file (TSV/CSV/JSONL/text)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write a TSV here (label, probability, text; taggers: one row per entity)."),
    column: Optional[str] = typer.Option(None, "--column", "-c", help="Text column of the input file."),
    header: Optional[bool] = HeaderOption,
    cache_dir: Optional[Path] = CacheDirOption,
    no_cache: bool = NoCacheOption,
    threads: Optional[int] = ThreadsOption,
) -> None:
    """Label texts (or every row of a file) with a saved model; taggers print each entity with its character span."""
    import csv
    import io

    from .data import read_texts
    from .finetuned import FineTunedTagger, load_run
    from .outputs import atomic_path

    estimator = load_run(run, cache=_cache_option(no_cache, cache_dir), threads=threads)
    if len(inputs) == 1 and Path(inputs[0]).is_file():
        texts = read_texts(inputs[0], _column(column), header=header)[0]
    else:
        texts = inputs
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    if isinstance(estimator, FineTunedTagger):
        writer.writerow(["row", "type", "start", "end", "score", "entity"])
        for row, entities in enumerate(estimator.predict(texts)):
            for entity in entities:
                writer.writerow([row, entity.type, entity.char_start, entity.char_end, f"{entity.score:.4f}", entity.text])
    else:
        probabilities = estimator.predict_proba(texts)
        writer.writerow(["label", "probability", "text"])
        for text, index, row in zip(texts, probabilities.argmax(axis=1), probabilities):
            writer.writerow([estimator.classes_[index], f"{row[index]:.4f}", text])
    if output is None:
        typer.echo(buffer.getvalue(), nl=False)
    else:
        with atomic_path(output) as temporary:
            temporary.write_text(buffer.getvalue(), encoding="utf-8")
        _say(f"wrote predictions for {len(texts)} texts to {output}")


@app.command()
def bench(
    input: Optional[Path] = typer.Argument(None, help="Texts to time (TSV/CSV/JSONL/text); default: bertkit's sample."),
    column: Optional[str] = typer.Option(None, "--column", "-c"),
    header: Optional[bool] = HeaderOption,
    limit: Optional[int] = typer.Option(2000, "--limit", help="Use the first N texts (0 = all)."),
    repeats: int = typer.Option(3, "--repeats"),
    batch_size: int = typer.Option(DEFAULT_BATCH_SIZE, "--batch-size", "-b", help="Texts per forward pass."),
    peers: bool = typer.Option(True, "--peers/--no-peers", help="Also time the tutorial loop and sentence-transformers."),
    model: Optional[str] = ModelOption,
    threads: Optional[int] = ThreadsOption,
) -> None:
    """Measure embedding throughput on your data against the naive loop and sentence-transformers."""
    from .bench import run_benchmark
    from .data import read_texts
    from .demo import sample_path

    if input is None:
        texts = read_texts(sample_path("reviews.tsv"), "text")[0]
    else:
        texts = read_texts(input, _column(column), header=header)[0]
    texts = texts[:limit] if limit else texts
    if repeats < 1:
        from .errors import InputError

        raise InputError("--repeats must be at least 1 (3 or more for a median worth reporting).")
    run_benchmark(_encoder(model, threads), texts, repeats=repeats, batch_size=batch_size, include_peers=peers,
                  echo=typer.echo)


@app.command()
def demo(model: Optional[str] = ModelOption) -> None:
    """A short tour on the packaged default model: tokenization table, embeddings and their shapes."""
    from .demo import run_demo

    run_demo(model)


def _column(value: Optional[str]):
    if value is None:
        return None
    return int(value) if value.lstrip("-").isdigit() else value


def main() -> None:
    """Console entry point: user mistakes become one 'error:' line and exit status 2."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            app()
        except BertkitError as exc:
            _say(f"error: {exc}")
            sys.exit(2)
        except KeyboardInterrupt:
            _say("interrupted.")
            sys.exit(130)
        finally:
            for warning in caught:
                if issubclass(warning.category, UserWarning):
                    _say(f"warning: {warning.message}")


if __name__ == "__main__":
    main()
