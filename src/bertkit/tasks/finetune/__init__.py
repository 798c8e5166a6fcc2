"""Fine-tuning, split by job: arguments, data preparation, the training loop, checkpoints, and `finetune()` tying them."""

from .arguments import FinetuneArguments, TrainingState
from .run import finetune

__all__ = ["FinetuneArguments", "TrainingState", "finetune"]
