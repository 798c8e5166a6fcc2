"""The serve wing: the HTTP service (app factory, micro-batcher, request schemas, metrics, auth, served runs).

May import: `bertkit.errors`, `bertkit.encoder`, `bertkit.io`, `bertkit.tasks`, `bertkit.explain`.
"""

from typing import TYPE_CHECKING, Any

from .settings import ServeSettings

if TYPE_CHECKING:
    from .app import create_app as create_app

__all__ = ["ServeSettings", "create_app"]


def __getattr__(name: str) -> Any:
    """`create_app` is imported when asked for: `bertkit serve` reads `ServeSettings` before torch loads."""
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
