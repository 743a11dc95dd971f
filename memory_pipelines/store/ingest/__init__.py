"""agent-mem's write path: a memory checked, chunked, embedded, judged and written (`write`); the half deferred
while the provider is down or the caller does not wait (`deferred`), and the server's thread that runs it
(`worker`)."""

from .deferred import finish_deferred
from .write import IngestResult, conflict_threshold_for, ingest_memory, validate_owner

__all__ = ["IngestResult", "conflict_threshold_for", "finish_deferred", "ingest_memory", "validate_owner"]
