"""Fine-tuning settings (`FinetuneArguments`): transformers' `TrainingArguments` names where bertkit means the same."""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field

from ...errors import InputError

LOGS = "logs"  # metrics.jsonl and the trackers' files (TensorBoard, ...), kept in the finished run
# max_length by task (token: the model's maximum); pair: a query and a passage; qa: run_qa's max_seq_length
MAX_LENGTHS = {"text": 128, "pair": 256, "qa": 384}
TASKS = ("text", "pair", "token", "qa")
MIXED_PRECISIONS = ("no", "fp16", "bf16")
RENAMED = {"epochs": "num_train_epochs", "patience": "early_stopping_patience"}  # bertkit 0.2 -> transformers


@dataclass
class FinetuneArguments:
    """Training settings; the defaults are the ones measured in benchmarks/finetune.py.

    The names are `transformers.TrainingArguments`' where they mean the same (`num_train_epochs`, `learning_rate`,
    `weight_decay`, `warmup_ratio`, `max_grad_norm`, `seed`, `gradient_accumulation_steps`, `report_to`) and
    `EarlyStoppingCallback`'s for `early_stopping_patience`. Three are bertkit's: `batch_size` is the batch of one
    optimizer step, whatever the processes and accumulation steps (TrainingArguments counts per device);
    `mixed_precision` is accelerate's one option ('no', 'fp16', 'bf16') for TrainingArguments' two flags;
    `max_length` is the tokenizer's name. `epochs` and `patience` (bertkit 0.2) still work, with a warning.
    """

    task: str | None = None  # "text", "pair", "token" or "qa"; None: the `task` given to finetune(), else "text"
    num_train_epochs: int = 3
    learning_rate: float = 1e-4
    batch_size: int = 32
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    early_stopping_patience: int = 2  # stop after this many epochs without a better dev score
    seed: int = 0
    max_length: int | None = None  # text: 128; pair: 256; qa: 384; token: the model's maximum (each at most that)
    doc_stride: int | None = None  # qa: tokens two windows of a long context share (None: 128, at most half a window)
    regression: bool = False  # text and pair tasks: one output, mean squared error (numbers with decimals imply it)
    multi_label: bool = False  # text and pair tasks: several labels per row, a sigmoid each, a threshold from dev
    gradient_accumulation_steps: int = 1  # micro-batches per step: the same updates in less memory
    mixed_precision: str = "no"  # "no" | "fp16" (CUDA, with a gradient scaler) | "bf16" (autocast)
    report_to: list[str] = field(default_factory=list)  # trackers: "tensorboard", "mlflow", "wandb", ...
    epochs: InitVar[int | None] = None
    patience: InitVar[int | None] = None

    def __post_init__(self, epochs: int | None, patience: int | None) -> None:
        for old, value in (("epochs", epochs), ("patience", patience)):
            if value is not None:
                setattr(self, renamed_argument(old), value)

    def check(self) -> None:
        """Refuse impossible settings (an unknown task, epochs below 1, ...) with one `InputError` line each."""
        if self.task not in TASKS:
            raise InputError(f"task {self.task!r}: valid tasks are {', '.join(TASKS)}.")
        for name in ("num_train_epochs", "batch_size", "early_stopping_patience"):
            if getattr(self, name) < 1:
                raise InputError(f"{name}={getattr(self, name)}: give 1 or more.")
        if not self.learning_rate > 0:
            raise InputError(f"learning_rate={self.learning_rate}: give a positive number such as 5e-5.")
        if self.max_length is not None and self.max_length < 8:
            raise InputError(f"max_length={self.max_length}: give at least 8 tokens (special tokens included).")
        if self.regression and self.multi_label:
            raise InputError("regression and multi_label exclude each other: a score, or several labels.")
        if self.task in ("token", "qa") and (self.regression or self.multi_label):
            raise InputError(f"regression and multi_label are for the text and pair tasks, not {self.task!r}.")
        if self.doc_stride is not None and (self.task != "qa" or self.doc_stride < 0):
            raise InputError(f"doc_stride={self.doc_stride}: give 0 or more tokens, for the qa task only.")
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


def renamed_argument(name: str) -> str:
    """Return `name`; its bertkit 0.2 name is refused with today's (no deprecation shims before 1.0)."""
    if name in RENAMED:
        raise InputError(f"{name}= is now {RENAMED[name]}= (transformers' name).")
    return name
