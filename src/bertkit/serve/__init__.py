"""The serve wing: the HTTP service (app factory, micro-batcher, request schemas, metrics, auth, served runs).

May import: `bertkit.errors`, `bertkit.encoder`, `bertkit.io`, `bertkit.tasks`, `bertkit.explain`.
"""

from .app import create_app
from .settings import ServeSettings

__all__ = ["ServeSettings", "create_app"]
