"""Fine-tuning: arguments, data preparation, transformers' Trainer with bertkit's hooks, the run directory.

`finetune` is imported on first use: the training loop imports `tasks.finetuned`, which imports `examples` from here.
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
