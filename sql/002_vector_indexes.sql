-- 002: HNSW indexes (cosine) on every vector column that search reads.
-- Bulk backfills may drop and rebuild these (memory_pipelines.indexing) rather than pay per-row inserts.
CREATE INDEX IF NOT EXISTS tasks_embedding_hnsw ON tasks USING hnsw (embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS learnings_embedding_hnsw ON learnings USING hnsw (embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS capabilities_embedding_hnsw ON capabilities USING hnsw (embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS fragments_embedding_hnsw ON fragments USING hnsw (embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS memories_avg_embedding_hnsw ON memories USING hnsw (avg_embedding vector_cosine_ops);
