"""bertkit: use pre-trained BERT-family encoders — tokenize, embed from any layer with any pooling, classify, fine-tune."""

from .classify import TextClassifier
from .encode import EmbedReport, Encoder, ForwardOutput, TokenEmbedding
from .errors import BertkitError, InputError, ModelLoadError
from .layers import LayerSelection, parse_layers
from .tokenize import Batch
from .vectorizer import BertVectorizer

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "BertVectorizer",
    "BertkitError",
    "EmbedReport",
    "Encoder",
    "ForwardOutput",
    "InputError",
    "LayerSelection",
    "ModelLoadError",
    "TextClassifier",
    "TokenEmbedding",
    "parse_layers",
]
