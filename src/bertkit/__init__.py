"""bertkit: use pre-trained BERT-family encoders — tokenize, embed from any layer with any pooling, classify, fine-tune."""

from .classify import TextClassifier
from .encode import EmbedReport, Encoder, ForwardOutput, TokenEmbedding
from .errors import BertkitError, InputError, ModelLoadError
from .finetune import FinetuneArguments, finetune
from .finetuned import FineTunedClassifier, FineTunedTagger, load_run
from .layers import LayerSelection, parse_layers
from .probe import probe_text, probe_token
from .tagging import Entity, entity_scores, read_tagged
from .tokenize import Batch
from .vectorizer import BertVectorizer

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "BertVectorizer",
    "BertkitError",
    "EmbedReport",
    "Encoder",
    "Entity",
    "FineTunedClassifier",
    "FineTunedTagger",
    "FinetuneArguments",
    "ForwardOutput",
    "InputError",
    "LayerSelection",
    "ModelLoadError",
    "TextClassifier",
    "TokenEmbedding",
    "entity_scores",
    "finetune",
    "load_run",
    "parse_layers",
    "probe_text",
    "probe_token",
    "read_tagged",
]
