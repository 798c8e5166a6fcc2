"""`FinetuneArguments`: transformers' `TrainingArguments` with bertkit's settings."""

from __future__ import annotations

import math
from dataclasses import dataclass

from transformers import TrainingArguments

from ...encoder.models import quiet_transformers
from .settings import FinetuneSettings


@dataclass
class FinetuneArguments(FinetuneSettings, TrainingArguments):
    """Fine-tuning arguments: `TrainingArguments` with bertkit's settings (`FinetuneSettings`) and defaults.

    Every epoch is scored on dev and the best one kept (`load_best_model_at_end`); `finetune` sets what depends on
    the run (`output_dir`, the per-device batch, the device, `fp16`/`bf16` from `mixed_precision`). Settings are
    checked once, here.

    Examples
    --------
    >>> from bertkit import FinetuneArguments
    >>> FinetuneArguments(num_train_epochs=1, batch_size=16).record()["batch_size"]
    16
    """

    output_dir: str | None = None
    eval_strategy: str = "epoch"
    save_strategy: str = "epoch"
    save_total_limit: int | None = 2  # the newest and the best
    load_best_model_at_end: bool = True
    metric_for_best_model: str | None = "score"
    greater_is_better: bool | None = True
    logging_strategy: str = "steps"
    logging_steps: float = 1
    remove_unused_columns: bool = False

    def __post_init__(self) -> None:
        self.fill_task_defaults()
        self.check()
        chosen = self.mixed_precision
        with quiet_transformers():  # its device set-up warns of processes `finetune` sets up on the run's device
            super().__post_init__()
        self.mixed_precision = chosen  # TrainingArguments (5.x) sets its own from fp16/bf16, which `finetune` sets

    def get_warmup_steps(self, num_training_steps: int) -> int:
        """Return the warm-up steps, `warmup_ratio` of `num_training_steps` (rounded up) in every transformers."""
        return math.ceil(num_training_steps * self.warmup_ratio)
