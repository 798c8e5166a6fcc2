"""Fine-tuning settings (`FinetuneArguments`) and the progress state a checkpoint saves (`TrainingState`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import InputError

CHECKPOINT = "checkpoint"
LOGS = "logs"  # metrics.jsonl and the trackers' files (TensorBoard, ...), kept in the finished run
TEXT_MAX_LENGTH = 128
PAIR_MAX_LENGTH = 256  # a query and a passage
TASKS = ("text", "pair", "token")
MIXED_PRECISIONS = ("no", "fp16", "bf16")


@dataclass
class FinetuneArguments:
    """Training settings; the defaults are the ones measured in benchmarks/finetune.py."""

    task: str | None = None  # "text", "pair" or "token"; None: the `task` given to finetune(), else "text"
    epochs: int = 3
    learning_rate: float = 1e-4
    batch_size: int = 32
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    patience: int = 2  # stop after this many epochs without a better dev score
    seed: int = 0
    max_length: int | None = None  # text: 128; pair: 256; token: the model's maximum
    regression: bool = False  # text and pair tasks: one output, mean squared error (numbers with decimals imply it)
    multi_label: bool = False  # text and pair tasks: several labels per row, a sigmoid each, a threshold from dev
    gradient_accumulation_steps: int = 1  # micro-batches per step: the same updates in less memory
    mixed_precision: str = "no"  # "no" | "fp16" (CUDA, with a gradient scaler) | "bf16" (autocast)
    report_to: list[str] = field(default_factory=list)  # accelerate trackers: "tensorboard", "mlflow", "wandb", ...

    def check(self) -> None:
        """Refuse impossible settings (an unknown task, epochs below 1, ...) with one `InputError` line each."""
        if self.task not in TASKS:
            raise InputError(f"task {self.task!r}: valid tasks are {', '.join(TASKS)}.")
        for name in ("epochs", "batch_size", "patience"):
            if getattr(self, name) < 1:
                raise InputError(f"{name}={getattr(self, name)}: give 1 or more.")
        if not self.learning_rate > 0:
            raise InputError(f"learning_rate={self.learning_rate}: give a positive number such as 5e-5.")
        if self.max_length is not None and self.max_length < 8:
            raise InputError(f"max_length={self.max_length}: give at least 8 tokens (special tokens included).")
        if self.regression and self.multi_label:
            raise InputError("regression and multi_label exclude each other: a score, or several labels.")
        if self.task == "token" and (self.regression or self.multi_label):
            raise InputError("regression and multi_label are for the text and pair tasks; a tagger has one tag a word.")
        if self.gradient_accumulation_steps < 1 or self.gradient_accumulation_steps > self.batch_size:
            raise InputError(
                f"gradient_accumulation_steps={self.gradient_accumulation_steps}: give 1 to batch_size "
                f"({self.batch_size}); each step's batch is split into that many micro-batches."
            )
        if self.mixed_precision not in MIXED_PRECISIONS:
            raise InputError(
                f"mixed_precision={self.mixed_precision!r}: valid values are {', '.join(MIXED_PRECISIONS)}."
            )
        if not 0 <= self.warmup_ratio < 1:
            raise InputError(f"warmup_ratio={self.warmup_ratio}: give a share between 0 and 1.")


@dataclass
class TrainingState:
    """Where training stands: saved with every checkpoint so a resumed run continues exactly."""

    epoch: int = 0  # epochs fully done
    step_in_epoch: int = 0  # batches done in the current epoch (non-zero only after an interruption)
    global_step: int = 0
    best_score: float | None = None
    best_epoch: int | None = None
    epochs_without_improvement: int = 0
    history: list[dict] = field(default_factory=list)
    train_seconds: float = 0.0
    finished: bool = False
