"""bertkit: use pre-trained BERT-family encoders — tokenize, embed from any layer with any pooling, classify, fine-tune."""

from .encode import EmbedReport, Encoder, ForwardOutput, TokenEmbedding
from .errors import BertkitError, InputError, ModelLoadError
from .layers import LayerSelection, parse_layers
from .tokenize import Batch

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "BertkitError",
    "EmbedReport",
    "Encoder",
    "ForwardOutput",
    "InputError",
    "LayerSelection",
    "ModelLoadError",
    "TokenEmbedding",
    "parse_layers",
]
