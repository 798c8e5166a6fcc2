"""Fine-tuning, split by job.

Arguments, data preparation, transformers' Trainer with bertkit's hooks, the run directory, and `finetune()` tying
them.

`finetune` is imported on first use: `tasks.finetuned` (a saved run, at prediction time) imports this package's
`examples`, and must not pull in the training loop, which imports `tasks.finetuned` back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .arguments import FinetuneArguments

if TYPE_CHECKING:
    from .run import finetune

__all__ = ["FinetuneArguments", "finetune"]


def __getattr__(name: str) -> Any:
    if name == "finetune":
        from .run import finetune

        return finetune
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
