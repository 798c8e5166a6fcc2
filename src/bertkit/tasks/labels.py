"""Label checks shared by every trainer (present, enough classes, dev labels known to train) and the held-out split."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sklearn.model_selection import train_test_split

from ..errors import InputError


def check_labels(y: Sequence, where: str = "labels", lines: Sequence[int] | None = None) -> list:
    """Labels must be present: None, NaN or an empty string is an error naming the row (or file line)."""
    labels = list(y)
    for row, label in enumerate(labels):
        missing = (
            label is None
            or (isinstance(label, float) and math.isnan(label))
            or (isinstance(label, str) and not label.strip())
        )
        if missing:
            place = f"line {lines[row]}" if lines is not None else f"row {row}"
            raise InputError(f"{where}, {place}: the label is empty; every example needs a label.")
    return labels


def check_class_counts(classes: np.ndarray, codes: np.ndarray, folds: int) -> None:
    """At least two classes; with cross-validation (`folds` > 0), at least two examples of each."""
    classes = classes.tolist()
    if len(classes) < 2:
        raise InputError(
            f"the training data has one class only ({classes[0]!r} × {len(codes)}); a classifier needs at least two."
            if len(classes)
            else "the training data is empty."
        )
    counts = np.bincount(codes)
    if folds and counts.min() < 2:
        rare = [f"{classes[i]!r} ({counts[i]})" for i in np.flatnonzero(counts < 2)]
        raise InputError(
            f"class {', '.join(rare)} has fewer than 2 examples, too few to choose C by cross-validation. "
            "Add examples, drop the class, or fix C (C=1.0 in Python, --C 1.0 on the command line)."
        )


def check_known_labels(
    where: str | Path, labels: Sequence, known: Sequence, train: str | Path = "the training data"
) -> None:
    """Every evaluation label (or tag) must occur in training, or the model could never predict it."""
    unseen = sorted({str(label) for label in labels} - {str(label) for label in known})
    if unseen:
        raise InputError(
            f"{where}: labels {unseen} never occur in {train} (known: {sorted(set(map(str, known)))}); "
            "the model cannot predict them. Check the label column or the file."
        )


def split_holdout(
    items: Sequence, labels: Sequence, share: float, seed: int, stratify: bool = True
) -> tuple[list, list, list, list]:
    """Hold out a seeded `share` for evaluation: (train items, dev items, train labels, dev labels).

    stratify=True keeps each class's share (every class needs two examples); tag sequences pass stratify=False.
    """
    if not 0 < share < 1:
        raise InputError(f"held-out share {share}: give a share between 0 and 1 (e.g. 0.25), or give a dev file.")
    strata = None
    if stratify:
        counts = Counter(str(label) for label in labels)
        if len(counts) < 2:
            raise InputError(
                f"the training data has one class only ({next(iter(counts))!r}); a classifier needs at least two."
            )
        rare = sorted(k for k, v in counts.items() if v < 2)
        if rare:
            raise InputError(
                f"class {rare} has a single example; a stratified split needs at least 2 per class (or give a dev "
                "file)."
            )
        strata = [str(label) for label in labels]
    if len(items) < 4:
        raise InputError(f"only {len(items)} training examples: too few to hold out a dev set; give a dev file.")
    if strata is not None:
        classes, held = len(set(strata)), math.ceil(share * len(items))
        if min(held, len(items) - held) < classes:
            raise InputError(
                f"{len(items)} examples of {classes} classes: holding out {share:.0%} leaves {held} for dev and "
                f"{len(items) - held} for training, too few for one of each class on both sides; give a dev file "
                "(--dev) or more examples."
            )
    train_items, dev_items, train_labels, dev_labels = train_test_split(
        list(items), list(labels), test_size=share, random_state=seed, stratify=strata
    )
    return train_items, dev_items, train_labels, dev_labels
