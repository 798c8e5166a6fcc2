"""Corpus-scale embedding on Ray Data (level 4: may import encoder, io and tasks; `import ray` here is the Ray library).

`embed_dataset(ds, column="text", layers=..., pooling=...)` adds a vector column to any Ray Dataset;
`embed_files(...)` is `bertkit embed --engine ray`: files in, one Parquet folder per file out, resumable per file.
"""

from ..errors import InputError

try:
    import pyarrow  # noqa: F401
    import ray.data  # noqa: F401
except ImportError:
    raise InputError("the Ray engine needs Ray Data: `pip install 'bertkit[ray]'`.") from None

from .dataset import Resources, embed_dataset, plan_resources, vector_array
from .files import RunSummary, embed_files, expand_inputs

__all__ = ["Resources", "RunSummary", "embed_dataset", "embed_files", "expand_inputs", "plan_resources", "vector_array"]
