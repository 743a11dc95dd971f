"""agent-mem's write path, in one place: what a write carries, checked once (`inputs.MemoryInput`); the live
write (`write.ingest_memory`) and the rows it touches (`rows`); the half deferred while the provider is down or
the caller does not wait (`deferred.finish_deferred`), and the server's thread that runs it (`worker`)."""

from .deferred import finish_deferred
from .inputs import MemoryInput, validate_owner
from .write import IngestResult, conflict_threshold_for, ingest_memory

__all__ = ["IngestResult", "MemoryInput", "conflict_threshold_for", "finish_deferred", "ingest_memory",
           "validate_owner"]
