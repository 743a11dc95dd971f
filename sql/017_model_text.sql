-- 017: the embedding model reads an indexed text without its closing day (index/vectors.model_text): the
-- keyword index and the date prior still read the day; in the model it only moved similarities between
-- texts of different days (docs/retrieval-quality.md, step 10).
--
-- Every vector of a text that ends with a day (tasks, learnings, memory fragments) was made with it. Each
-- row's embedded hash is made to differ from its hash, so the row is pending for the embedding backfill
-- (`memory-pipelines embed`, the Dagster embedding assets, the background worker of `serve` and `mcp`;
-- `status` counts them), which embeds it again; a memory's vector follows its fragments'. Until then search
-- reads the old vectors, as before. Capabilities and events have no day in their text and are untouched, and
-- so are the keyword index and the hashes.
--
-- The owners' vector graphs of these tables go first (each row version would be inserted into them one by
-- one); an owner is scanned exactly until the next `migrate`, `embed` or `vector_indexes` run builds hers.

DO $$
DECLARE ix text;
BEGIN
    FOR ix IN SELECT indexname FROM pg_indexes
              WHERE schemaname = current_schema()
                AND (indexname LIKE 'tasks\_owner\_hnsw\_%' OR indexname LIKE 'learnings\_owner\_hnsw\_%'
                     OR indexname LIKE 'fragments\_owner\_hnsw\_%')
    LOOP
        EXECUTE format('DROP INDEX IF EXISTS %I', ix);
    END LOOP;
END
$$;

UPDATE tasks SET embedded_hash = 'dated:' || embedded_hash WHERE embedded_hash IS NOT NULL;
UPDATE learnings SET embedded_hash = 'dated:' || embedded_hash WHERE embedded_hash IS NOT NULL;
UPDATE fragments SET embedded_hash = 'dated:' || embedded_hash WHERE embedded_hash IS NOT NULL;
