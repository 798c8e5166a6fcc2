"""Evaluation metrics, their text rendering, and the report files (metrics.json, confusion matrix, PCA map)."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.figure import Figure
from sklearn.decomposition import PCA
from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

from ..errors import InputError
from ..io.writers import atomic_path, check_output, write_json
from ..records import new_record

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def classification_metrics(
    y_true: Sequence, y_pred: Sequence, classes: Sequence, majority_class: object = None
) -> dict:
    """Accuracy, macro-F1, per-class P/R/F1/support, confusion matrix, and the majority-class baseline."""
    classes = list(classes)
    true, pred = [str(v) for v in y_true], [str(v) for v in y_pred]
    names = [str(c) for c in classes]
    per_class = _per_label(names, true, pred, labels=names)
    majority = str(majority_class) if majority_class is not None else Counter(true).most_common(1)[0][0]
    return {
        "n": len(true),
        "accuracy": float(accuracy_score(true, pred)),
        "macro_f1": float(np.mean([row["f1"] for row in per_class.values()])),
        "majority_class": majority,
        "majority_baseline_accuracy": float(np.mean([t == majority for t in true])) if true else 0.0,
        "per_class": per_class,
        "labels": names,
        "confusion_matrix": confusion_matrix(true, pred, labels=names).tolist(),
    }


def regression_metrics(y_true: Sequence[float], y_pred: Sequence[float]) -> dict:
    """n, Pearson and Spearman correlation (0 where either side is constant), mean squared and absolute error."""
    from scipy.stats import pearsonr, spearmanr

    true, pred = np.asarray(y_true, dtype=np.float64), np.asarray(y_pred, dtype=np.float64)
    varied = len(true) > 1 and np.ptp(true) > 0 and np.ptp(pred) > 0
    return {
        "n": len(true),
        "pearson": float(pearsonr(true, pred)[0]) if varied else 0.0,
        "spearman": float(spearmanr(true, pred)[0]) if varied else 0.0,
        "mse": float(np.mean((true - pred) ** 2)) if len(true) else 0.0,
        "mae": float(np.mean(np.abs(true - pred))) if len(true) else 0.0,
    }


THRESHOLDS = tuple(np.round(np.arange(0.05, 0.96, 0.05), 2))


def multi_label_metrics(
    y_true: Sequence[Sequence[str]], probabilities: np.ndarray, labels: Sequence[str], threshold: float | None = None
) -> dict:
    """Score (n, labels) probabilities: micro/macro-F1, exact match and per-label P/R/F1 at `threshold`.

    Without a threshold, the one (0.05 to 0.95) that gives the best micro-F1.
    """
    from sklearn.metrics import f1_score
    from sklearn.preprocessing import MultiLabelBinarizer

    gold = MultiLabelBinarizer(classes=list(labels)).fit_transform(y_true)
    probabilities = np.asarray(probabilities)
    candidates = [threshold] if threshold is not None else THRESHOLDS
    scores = [f1_score(gold, probabilities >= t, average="micro", zero_division=0) for t in candidates]
    best = float(candidates[int(np.argmax(scores))])
    predicted = probabilities >= best
    return {
        "n": len(gold),
        "threshold": best,
        "micro_f1": float(max(scores)),
        "macro_f1": float(f1_score(gold, predicted, average="macro", zero_division=0)),
        "exact_match": float(accuracy_score(gold, predicted)),
        "per_label": _per_label(labels, gold, predicted),
    }


def _per_label(names: Sequence[str], gold: Any, predicted: Any, **options: Any) -> dict:
    """Return {name: {precision, recall, f1, support}} by scikit-learn's `precision_recall_fscore_support`."""
    return {
        name: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
        for name, p, r, f, s in zip(
            names, *precision_recall_fscore_support(gold, predicted, zero_division=0, **options)
        )
    }


def format_regression_metrics(metrics: dict) -> str:
    """One line: Spearman and Pearson correlation, mean squared and absolute error, and n."""
    return (
        f"spearman {metrics['spearman']:.4f}   pearson {metrics['pearson']:.4f}   mse {metrics['mse']:.4f}   "
        f"mae {metrics['mae']:.4f}   n={metrics['n']}"
    )


def format_multi_label_metrics(metrics: dict) -> str:
    """Micro/macro-F1 at the threshold, exact matches, and a per-label P/R/F1 table."""
    lines = [
        f"micro-F1 {metrics['micro_f1']:.4f}   macro-F1 {metrics['macro_f1']:.4f}   exact match "
        f"{metrics['exact_match']:.4f}   threshold {metrics['threshold']:g}   n={metrics['n']}",
        "",
    ]
    width = max([len("label")] + [len(n) for n in metrics["per_label"]])
    lines.append(f"{'label'.ljust(width)}  precision  recall  f1      support")
    for name, row in metrics["per_label"].items():
        lines.append(
            f"{name.ljust(width)}  {row['precision']:.4f}     {row['recall']:.4f}  {row['f1']:.4f}  {row['support']}"
        )
    return "\n".join(lines)


def format_metrics(metrics: dict) -> str:
    """Plain-text summary: the headline numbers, `classification_report`'s per-class table, the confusion matrix."""
    names = metrics["labels"]
    width = max([len("class")] + [len(name) for name in metrics["per_class"]])
    lines = [
        f"accuracy {metrics['accuracy']:.4f}   macro-F1 {metrics['macro_f1']:.4f}   n={metrics['n']}   "
        f"majority-class baseline {metrics['majority_baseline_accuracy']:.4f} (always {metrics['majority_class']!r})",
        "",
        f"{'class':>{width}} {'precision':>9} {'recall':>9} {'f1-score':>9} {'support':>9}",
        "",
        *(
            f"{name:>{width}} {v['precision']:9.4f} {v['recall']:9.4f} {v['f1']:9.4f} {v['support']:9d}"
            for name, v in metrics["per_class"].items()
        ),
        "",
        "confusion matrix (rows: true, columns: predicted)",
    ]
    cells = [[str(v) for v in row] for row in metrics["confusion_matrix"]]
    column = max([len(n) for n in names] + [len(c) for row in cells for c in row])
    lines.append(" " * (width + 2) + " ".join(n.rjust(column) for n in names))
    lines += [f"{name.ljust(width)}  " + " ".join(c.rjust(column) for c in row) for name, row in zip(names, cells)]
    return "\n".join(lines)


def write_report(
    directory: str | Path,
    metrics: dict,
    vectors: np.ndarray | None = None,
    labels: Sequence | None = None,
    title: str = "",
    overwrite: bool = False,
) -> list[Path]:
    """Write metrics.json, confusion.png and (given vectors) pca.png, the 2-D map of sentence vectors by label."""
    directory = check_report_directory(directory, overwrite)
    directory.mkdir(parents=True, exist_ok=True)
    written = [write_json(directory / "metrics.json", new_record("metrics", **metrics))]
    written += [_save_figure(confusion_figure(metrics, title), directory / "confusion.png")]

    if vectors is not None and labels is not None and len(vectors) >= 2:
        points = PCA(n_components=2, random_state=0).fit_transform(vectors)
        figure, axes = _figure(6.5, 5.5)
        labels = [str(v) for v in labels]
        for name in metrics["labels"]:
            mask = np.array([v == name for v in labels])
            if mask.any():
                axes.scatter(points[mask, 0], points[mask, 1], s=8, alpha=0.6, label=name)
        axes.legend(title="label", markerscale=2)
        axes.set_title(f"{title}\nPCA of sentence vectors, coloured by true label".strip())
        axes.set_xlabel("PC 1")
        axes.set_ylabel("PC 2")
        figure.tight_layout()
        written.append(_save_figure(figure, directory / "pca.png"))
    return written


def confusion_figure(metrics: dict, title: str = "") -> Figure:
    """Draw the confusion matrix of `classification_metrics` by scikit-learn's `ConfusionMatrixDisplay`."""
    from sklearn.metrics import ConfusionMatrixDisplay

    names = metrics["labels"]
    figure, axes = _figure(1.2 * len(names) + 3, 1.2 * len(names) + 2.5)
    display = ConfusionMatrixDisplay(np.array(metrics["confusion_matrix"]), display_labels=names)
    display.plot(ax=axes, cmap="Blues", colorbar=False)
    axes.set_title(f"{title}\naccuracy {metrics['accuracy']:.3f}, macro-F1 {metrics['macro_f1']:.3f}".strip())
    figure.tight_layout()
    return figure


class EvaluationReport(dict):
    """Evaluation metrics: a plain dict, printed as `bertkit evaluate` prints them, drawn in Jupyter.

    `kind` is 'classification', 'regression', 'multi_label' or 'entities' (a tagger's entity scores).
    """

    def __init__(self, metrics: dict, kind: str = "classification") -> None:
        super().__init__(metrics)
        self.kind = kind

    def text(self) -> str:
        """Return the plain-text table `bertkit evaluate` prints."""
        if self.kind == "entities":
            from .tagging import format_entity_scores

            return format_entity_scores(self)
        formatter = {"regression": format_regression_metrics, "multi_label": format_multi_label_metrics}
        return formatter.get(self.kind, format_metrics)(self)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        import html

        return f"<div><pre>{html.escape(self.text())}</pre>{png_html(self._repr_png_())}</div>"

    def _repr_png_(self) -> bytes | None:
        if "confusion_matrix" not in self:
            return None
        buffer = io.BytesIO()
        confusion_figure(self).savefig(buffer, dpi=80, format="png")
        return buffer.getvalue()


def png_html(picture: bytes | None) -> str:
    """Return an <img> of PNG bytes inlined as base64 ("" without a picture): a Jupyter view's figure."""
    import base64

    return f"<img src='data:image/png;base64,{base64.b64encode(picture).decode()}'/>" if picture else ""


def _figure(width: float, height: float) -> tuple[Figure, Axes]:
    """Make a standalone `Figure` (no pyplot, no global backend switch): bertkit never changes the user's matplotlib."""
    figure = Figure(figsize=(width, height))
    return figure, figure.subplots()


def _save_figure(figure: Figure, path: Path) -> Path:
    with atomic_path(path) as temporary:
        figure.savefig(temporary, dpi=110, format="png")
    return path


REPORT_FILES = ("metrics.json", "confusion.png", "pca.png")


def check_report_directory(directory: str | Path, overwrite: bool = False) -> Path:
    """Before any work: the report's files must not exist yet, unless `overwrite`."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError(f"--report {directory} is a file; give a folder for metrics.json, confusion.png and pca.png.")
    for name in REPORT_FILES:
        check_output(directory / name, overwrite)
    return directory


def probe_files(result: Any, title: str = "") -> dict[str, str | bytes]:  # a ProbeResult (probe.py imports this)
    """probe.md, probe.csv, probe.json and probe.png (score by layer choice, one line per pooling) as file contents."""
    table = result.table()
    columns = list(table[0])
    facts = result.facts
    markdown = [
        f"# Layer probe: {title}".rstrip(": "),
        "",
        f"model {facts.get('model')} ({facts.get('architecture')}, {facts.get('hidden_states')} hidden states); "
        f"train {facts.get('train')} ({facts.get('train_rows')} rows); dev {facts.get('dev')} ({facts.get('dev_rows')} "
        f"rows); seed {facts.get('seed')}",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    markdown += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in table]
    mixes = [r for r in result.rows if r.layer_weights]
    if mixes:
        markdown += ["", "Learned mix weights (h0 … hL):"]
        markdown += [f"- {r.pooling}: {', '.join(f'{w:.3f}' for w in r.layer_weights)}" for r in mixes]
    if facts.get("note"):
        markdown += ["", f"Note: {facts['note']}."]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["pooling", "choice", "dim", "score", "secondary", "fit_seconds", "C"])
    writer.writerows(
        [r.pooling, r.choice, r.dim, f"{r.score:.4f}", f"{r.secondary:.4f}", f"{r.fit_seconds:.2f}", r.C]
        for r in result.rows
    )

    figure, axes = _figure(10, 5)
    poolings = list(dict.fromkeys(r.pooling for r in result.rows))
    choices = list(dict.fromkeys(r.choice for r in result.rows if not r.choice.startswith("pooler(")))
    for pooling in poolings:
        rows = {r.choice: r for r in result.rows if r.pooling == pooling}
        if pooling == "pooler":
            only = next(iter(rows.values()))
            axes.axhline(100 * only.score, linestyle=":", color="grey", label=f"pooler ({100 * only.score:.1f})")
            continue
        points = [(i, 100 * rows[c].score) for i, c in enumerate(choices) if c in rows]
        singles = [(i, s) for i, s in points if choices[i].startswith("h")]
        combos = [(i, s) for i, s in points if not choices[i].startswith("h")]
        line = axes.plot(*zip(*singles), marker="o", label=pooling)[0]
        axes.scatter(*zip(*combos), marker="s", s=60, color=line.get_color())
    axes.set_xticks(range(len(choices)), [c.replace(" (", "\n(") for c in choices], rotation=45, ha="right", fontsize=8)
    axes.set_ylabel(f"dev {result.metric.replace('_f1', ' F1').replace('_', ' ')} (%)")
    axes.set_title(f"{title}\nsingle layers (line) and combinations (squares)".strip())
    axes.grid(axis="y", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, dpi=110, format="png")
    fields = {name: getattr(result, name) for name in ("task", "metric", "secondary_metric")}
    record = new_record("probe", **fields, facts=facts, rows=[asdict(r) for r in result.rows])
    return {
        "probe.md": "\n".join(markdown) + "\n",
        "probe.csv": buffer.getvalue(),
        "probe.json": json.dumps(record, indent=2),
        "probe.png": image.getvalue(),
    }
