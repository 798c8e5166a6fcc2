"""The feature-classifier command: train (frozen-encoder vectors → a scikit-learn classifier)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..encoder.defaults import DEFAULT_FEATURE_LAYERS, DEFAULT_FEATURE_POOLING
from ..encoder.options import EmbedOptions
from ..errors import InputError
from ..io.readers import column_spec
from .common import app, cache_option, existing_text_file, options_for, running_on, say
from .options import (
    BatchSize,
    C,
    CacheDir,
    Dev,
    Device,
    Generated,
    Header,
    LabelColumn,
    Limit,
    MaxLength,
    Model,
    NoCache,
    Output,
    Overwrite,
    Precision,
    Seed,
    TextColumn,
    Threads,
    from_fields,
)


@app.command()
@from_fields(
    EmbedOptions,
    "options",
    only=("layers", "pooling"),
    defaults={"layers": DEFAULT_FEATURE_LAYERS, "pooling": DEFAULT_FEATURE_POOLING},
)
def train(
    ctx: typer.Context,
    train_file: Annotated[
        Path, typer.Argument(callback=existing_text_file, help="Training data: TSV/CSV (text, label) or JSONL.")
    ],
    output: Output,
    dev: Dev = None,
    test_size: Annotated[float, typer.Option(help="Share held out for evaluation when there is no --dev.")] = 0.25,
    text_column: TextColumn = None,
    label_column: LabelColumn = None,
    header: Header = None,
    options: Generated = None,
    classifier: Annotated[str, typer.Option(help="logreg | linear-svm | mlp")] = "logreg",
    c_value: C = None,
    cv: Annotated[int, typer.Option(help="Cross-validation folds for choosing C.")] = 5,
    scale: Annotated[bool, typer.Option("--scale/--no-scale", help="Standardise features first.")] = True,
    seed: Seed = 0,
    limit: Limit = None,
    report: Annotated[Path | None, typer.Option(help="Write metrics.json, confusion.png and pca.png here.")] = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    batch_size: BatchSize = None,
    max_length: MaxLength = None,
    overwrite: Overwrite = False,
    model: Model = None,
    threads: Threads = None,
    precision: Precision = None,
    device: Device = "auto",
) -> None:
    """Embed texts with the frozen encoder and train a classifier on the vectors (the visual guide's pipeline).

    -o: the run directory to create (config, classifier, metrics).
    """
    from ..io.writers import check_output

    check_output(output, overwrite, [train_file, dev, model])  # before the heavy imports
    if report is not None:
        from ..tasks.report import check_report_directory

        check_report_directory(report, overwrite)
    from ..io.readers import read_labelled
    from ..io.text_files import file_sha256
    from ..tasks.classify import TextClassifier
    from ..tasks.heads import check_training_labels, named_classifier
    from ..tasks.labels import check_known_labels, split_holdout
    from ..tasks.report import classification_metrics, format_metrics, write_report
    from ..tasks.vectorizer import BertVectorizer

    if options.token_vectors:
        raise InputError("--pooling none gives token vectors; a classifier reads one vector a text: give cls or mean.")
    columns = column_spec(text_column), column_spec(label_column)
    data = read_labelled(train_file, *columns, header=header)
    texts, labels = data.texts[:limit], data.labels[:limit]
    if dev is not None:
        dev_data = read_labelled(dev, *columns, header=header)
        dev_texts, dev_labels, dev_source = dev_data.texts, dev_data.labels, str(dev.resolve())
        check_known_labels(dev, dev_labels, labels, train_file)
    else:
        texts, dev_texts, labels, dev_labels = split_holdout(texts, labels, test_size, seed)
        dev_source = f"{test_size:.0%} stratified split of {train_file} (seed {seed})"
    cache = cache_option(no_cache, cache_dir)
    vectorizer = BertVectorizer(**options_for(ctx, BertVectorizer, cache=cache, precision=precision or "fp32"))
    head = named_classifier(classifier, c_value, cv=cv, n_samples=len(texts), random_state=seed)
    estimator = TextClassifier(vectorizer, head, scale=scale, cv=cv, random_state=seed)
    check_training_labels(labels, head, cv)
    say(
        f"training on {len(texts)} texts ({len(set(map(str, labels)))} classes), evaluating on {len(dev_texts)}: "
        f"{dev_source}"
    )
    estimator.fit(texts, labels)
    fitted = estimator.vectorizer_
    stats = fitted.cache_.stats if fitted.cache_ is not None else None
    say(
        f"features: layers={fitted.layers} pooling={fitted.pooling} → {fitted.n_features_out_} dims; embedding "
        f"{estimator.embed_seconds_:.1f}s on {running_on(fitted.encoder_)}" + (f" ({stats})" if stats else "")
    )
    if estimator.cv_scores_:
        scores = ", ".join(f"{c:g}: {s:.4f}" for c, s in estimator.cv_scores_.items())
        say(f"C chosen by {estimator.cv_folds_}-fold cross-validation: C={estimator.C_:g}   (CV accuracy {scores})")
    say(f"classifier {classifier} fitted in {estimator.fit_seconds_:.1f}s")
    predictions = estimator.predict(dev_texts)
    metrics = classification_metrics(dev_labels, predictions, estimator.classes_, estimator.majority_class_)
    typer.echo(format_metrics(metrics))
    # the training file's absolute path: found from any folder (answers show names, never paths)
    data = {"train": str(train_file.resolve()), "train_rows": len(texts), "dev": dev_source, "dev_rows": len(dev_texts)}
    data["train_sha256"] = file_sha256(train_file)  # `evaluate` says so when it is given this same file
    data.update(text_column=text_column, label_column=label_column, header=header)
    estimator.save_pretrained(output, metrics=metrics, extra={"data": data}, overwrite=overwrite)
    say(f"saved {output}")
    if report is not None:
        vectors = fitted.transform(dev_texts)
        title = f"{options.layers} / {options.pooling} / {classifier}"
        for path in write_report(report, metrics, vectors, dev_labels, title=title, overwrite=overwrite):
            say(f"wrote {path}")
