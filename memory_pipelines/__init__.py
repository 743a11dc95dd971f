"""memory_pipelines: long-term memory for AI agents on PostgreSQL + pgvector."""

__version__ = "0.1.0"
