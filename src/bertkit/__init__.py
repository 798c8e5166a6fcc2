"""bertkit: pre-trained BERT-family encoders for tokenization, embeddings, classification and fine-tuning."""

from .encoder.encode import EmbedReport, Encoder, ForwardOutput, TokenEmbedding
from .encoder.layers import LayerSelection, parse_layers
from .encoder.tokenize import Batch
from .errors import BertkitError, InputError, ModelLoadError
from .io.conll import read_tagged
from .tasks.classify import TextClassifier
from .tasks.finetune import FinetuneArguments, finetune
from .tasks.finetuned import FineTunedClassifier, FineTunedTagger
from .tasks.load import load_run
from .tasks.probe import probe_text, probe_token
from .tasks.tagging import Entity, entity_scores
from .tasks.vectorizer import BertVectorizer

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
