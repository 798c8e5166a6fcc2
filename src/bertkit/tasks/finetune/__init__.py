"""Fine-tuning: arguments, data preparation, transformers' Trainer with bertkit's hooks, the run directory.

Both names load on first use: `settings` alone stays light (the command line reads it), the rest imports transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .arguments import FinetuneArguments
    from .run import finetune

__all__ = ["FinetuneArguments", "finetune"]


def __getattr__(name: str) -> Any:
    if name == "finetune":
        from .run import finetune

        return finetune
    if name == "FinetuneArguments":
        from .arguments import FinetuneArguments

        return FinetuneArguments
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
