"""The settings bertkit puts on transformers' `TrainingArguments`, with their help: the `finetune` command's flags.

Light (no transformers): the command line reads these fields for `bertkit finetune --help`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...encoder.defaults import check_fields, option_field
from ...errors import InputError, check_whole

LOGS = "logs"  # metrics.jsonl and the trackers' files (TensorBoard, ...), kept in the finished run
# max_length by task (token: the model's maximum); pair: a query and a passage; qa: run_qa's max_seq_length
MAX_LENGTHS = {"text": 128, "pair": 256, "qa": 384}
TASKS = ("text", "pair", "token", "qa")
# the step settings left out, by task and size (benchmarks/qa_defaults.py: qa's dev F1 87.3, not 64.0, at 1,000
# questions; 46.9 against "no answer"'s 27.8, not 25.7, at 300, where 3 epochs learned nothing; docs/how-to/qa.md)
STEP_DEFAULTS = {"batch_size": 32, "learning_rate": 1e-4, "num_train_epochs": 3, "early_stopping_patience": 2}
TASK_STEP_DEFAULTS = {"qa": {"batch_size": 16, "learning_rate": 2e-4}}
SMALL_QA = 800  # training questions: fewer train longer at a lower rate, with no early stop before the tenth epoch
SMALL_QA_STEPS = {"learning_rate": 1e-4, "num_train_epochs": 10, "early_stopping_patience": 10}
MIXED_PRECISIONS = ("no", "fp16", "bf16")


@dataclass
class FinetuneSettings:
    """bertkit's fine-tuning settings; the defaults are the ones measured in benchmarks/finetune.py.

    The names are `TrainingArguments`' where they mean the same, `EarlyStoppingCallback`'s for
    `early_stopping_patience`. bertkit's own: `task`; `batch_size`, the batch of one optimizer step whatever the
    processes and accumulation steps (TrainingArguments counts per device); `max_length`, `doc_stride`, `regression`,
    `multi_label`; `mixed_precision`, accelerate's one option for TrainingArguments' `fp16` and `bf16`.
    """

    task: str | None = option_field(
        None,
        "text (sentences; the default) | pair (sentence pairs: NLI, paraphrase, STS, relevance) | token (tagging, e.g. "
        "NER) | qa (extractive question answering: SQuAD JSON or JSONL).",
        choices=TASKS,
    )
    num_train_epochs: int | None = option_field(
        None,
        "Epochs to train, fewer when the dev score stops improving (3; qa on under 800 questions: 10).",
        flag="--epochs",
        low=1,
    )
    learning_rate: float | None = option_field(
        None, "Peak learning rate, warmed up then decayed (1e-4; qa: 2e-4, on under 800 questions 1e-4).", flag="--lr"
    )
    batch_size: int | None = option_field(
        None, "Examples per optimizer step, split between processes (32; qa: 16).", low=1
    )
    weight_decay: float = option_field(0.01, "AdamW's weight decay.")
    warmup_ratio: float = option_field(0.1, "Share of the steps the learning rate warms up over (0 to 1).")
    max_grad_norm: float = option_field(1.0, "Clip the gradients' norm to this.")
    early_stopping_patience: int | None = option_field(
        None,
        "Stop after this many epochs without a better dev score (2; qa on under 800 questions: 10).",
        flag="--patience",
        low=1,
    )
    seed: int = option_field(0, "Seed of the head's weights, the split and the batches' order.")
    max_length: int | None = option_field(
        None, "Tokens per example (text: 128; pair: 256; qa: 384; token: the model's maximum).", low=8
    )
    doc_stride: int | None = option_field(
        None, "qa: tokens two windows of a long context share (default 128, at most half).", low=0
    )
    regression: bool = option_field(
        False, "Text/pair: learn a score (one output, mean squared error); labels with decimals imply it."
    )
    multi_label: bool = option_field(
        False, "Text/pair: several labels a row (separated by --label-separator; JSONL: a list)."
    )
    gradient_accumulation_steps: int = option_field(
        1, "Split each step's batch into this many micro-batches (less memory, the same updates).", low=1
    )
    mixed_precision: str = option_field(
        "no", "no | fp16 (CUDA) | bf16 (CUDA, or a CPU with native bf16).", choices=MIXED_PRECISIONS
    )
    report_to: list[str] = option_field(
        [], "Experiment trackers, comma-separated: tensorboard, mlflow, wandb, ... (logs in OUTPUT/logs)."
    )

    def fill_task_defaults(self, questions: int | None = None) -> None:
        """Give the step settings left out the task's defaults, once it is known; qa's wait for its data's size.

        Parameters
        ----------
        questions : int, optional
            The qa task's training questions: under `SMALL_QA`, the small-data schedule (`SMALL_QA_STEPS`).
        """
        if self.task is None:
            return
        defaults = STEP_DEFAULTS | TASK_STEP_DEFAULTS.get(self.task, {})
        if self.task == "qa":
            defaults = {"batch_size": defaults["batch_size"]} if questions is None else defaults
            defaults |= SMALL_QA_STEPS if questions is not None and questions < SMALL_QA else {}
        for name, value in defaults.items():
            if getattr(self, name) is None:
                setattr(self, name, value)

    def check(self) -> None:
        """Refuse an impossible setting in one `InputError` line; a task-bound one once the task is known."""
        check_fields(self, FinetuneSettings)  # its own fields: TrainingArguments checks the rest
        check_whole("batch_size", self.batch_size, 1, allow_none=self.task is None)  # the task's default, once known
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise InputError(f"learning_rate={self.learning_rate}: give a positive number such as 5e-5.")
        if not 0 <= self.warmup_ratio < 1:
            raise InputError(f"warmup_ratio={self.warmup_ratio}: give a share between 0 and 1.")
        if self.gradient_accumulation_steps > (self.batch_size or self.gradient_accumulation_steps):
            raise InputError(
                f"gradient_accumulation_steps={self.gradient_accumulation_steps}: give 1 to batch_size "
                f"({self.batch_size}); each step's batch is split into that many micro-batches."
            )
        if self.regression and self.multi_label:
            raise InputError("regression and multi_label exclude each other: a score, or several labels.")
        if self.task in ("token", "qa") and (self.regression or self.multi_label):
            raise InputError(f"regression and multi_label are for the text and pair tasks, not {self.task!r}.")
        if self.doc_stride is not None and self.task not in (None, "qa"):
            raise InputError(f"doc_stride={self.doc_stride} is for the qa task only.")

    def record(self) -> dict[str, Any]:
        """Return these settings as the run's bertkit.json records them."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(FinetuneSettings)}
