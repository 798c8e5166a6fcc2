"""Fine-tuning: arguments, data preparation, transformers' Trainer with bertkit's hooks, the run directory.

Both names load on first use: `settings` alone stays light (the command line reads it), the rest imports transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .arguments import FinetuneArguments
    from .run import finetune

__all__ = ["FinetuneArguments", "finetune"]
_HOMES = {"FinetuneArguments": ".arguments", "finetune": ".run"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name], __name__), name)
