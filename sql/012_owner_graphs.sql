-- Every vector search is scoped to one owner: an owner with at most EXACT_SCAN_MAX_ROWS embedded rows of a table
-- is scanned exactly, a larger one searches an HNSW index of her own rows (index/owner_indexes.py). The tables'
-- graphs of all their rows served only an owner holding more than half of a table, yet every write paid an
-- insert into them and every bulk load their rebuild. They go; that owner gets her own graph like the others
-- (built by the next `migrate`, `embed` or `vector_indexes` run; she is scanned exactly until then).
DROP INDEX IF EXISTS tasks_embedding_hnsw;
DROP INDEX IF EXISTS learnings_embedding_hnsw;
DROP INDEX IF EXISTS capabilities_embedding_hnsw;
DROP INDEX IF EXISTS fragments_embedding_hnsw;
DROP INDEX IF EXISTS events_embedding_hnsw;
