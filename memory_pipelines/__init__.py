"""memory_pipelines: long-term memory for AI agents on PostgreSQL + pgvector.

`Memory` (in `face.py`) is the public face: `Memory.open()` then ingest, search, get, timeline, related,
context, feedback, projects and keys. It is imported lazily, so `import memory_pipelines.vocabulary`
(or any other submodule) does not load the whole library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Memory", "__version__"]

if TYPE_CHECKING:
    from .face import Memory


def __getattr__(name: str) -> Any:
    if name == "Memory":
        from .face import Memory

        return Memory
    raise AttributeError(f"module 'memory_pipelines' has no attribute {name!r}")
