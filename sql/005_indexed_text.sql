-- 005: one definition of each source's indexed text, and a content hash of exactly that text.
--
-- mp_task_text, mp_learning_text, mp_capability_text and mp_fragment_text build the text a row is
-- embedded and keyword-indexed by (its words plus the context a question would name: type, status,
-- project, speaker, date). vocabulary.INDEXED reads rows through them, ingest asks them for the texts of
-- a memory's chunks before embedding, and the triggers below hash them: `content_hash` is md5 of the
-- indexed text, so any change of the text (a task's status, a project's name...) makes the row pending
-- for the embedding backfill and the keyword refresh. Before, the hash covered the title and the body
-- only (md5 of the content for fragments), and a status change was never re-embedded.
--
-- The functions are STABLE only because to_char is; the result depends on the arguments alone
-- ('YYYY-MM-DD' reads no locale). As plain SQL expressions of STABLE functions they are inlined into
-- the queries that call them, so reading a row's text costs what the spelled-out expression cost.
--
-- Existing rows: every hash is recomputed. A row keeps its embedding (embedded_hash set to the new hash)
-- when it was current under the old hash and was not updated after it was embedded (updated_at of the
-- row, of the memory for a fragment), i.e. its text then was its text now; otherwise it becomes pending.
-- The same holds for its keyword-index entry (indexed_at). A project's updated_at is not consulted: every
-- ingest touches it, and nothing renames a project without this migration's triggers.
-- The HNSW indexes of the rewritten tables are dropped for the update (each row version would be
-- inserted into the graph one by one) and built again at the end.

CREATE OR REPLACE FUNCTION mp_day(ts timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD') $$;

CREATE OR REPLACE FUNCTION mp_task_text(
    title text, description text, task_type text, status text, project_key text, created_at timestamptz
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT title || E'\n' || description || E'\n[task · ' || coalesce(task_type, '-') || ' · ' || status
       || coalesce(' · ' || project_key, '') || ' · ' || mp_day(created_at) || ']'
$$;

CREATE OR REPLACE FUNCTION mp_learning_text(
    title text, content text, task_type text, failure_class text, category text, created_at timestamptz
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT title || E'\n' || content || E'\n[learning · ' || coalesce(task_type, '-')
       || coalesce(' · ' || failure_class, '') || coalesce(' · ' || category, '')
       || ' · ' || mp_day(created_at) || ']'
$$;

CREATE OR REPLACE FUNCTION mp_capability_text(name text, description text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT name || E'\n' || description $$;

CREATE OR REPLACE FUNCTION mp_fragment_text(
    speaker text, content text, project_name text, content_type text, created_at timestamptz
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT coalesce(speaker || ': ', '') || content || E'\n[' || project_name || ' · ' || content_type
       || ' · ' || mp_day(created_at) || ']'
$$;

-- Plain columns from now on (DROP EXPRESSION keeps the stored values and rewrites nothing).
ALTER TABLE tasks ALTER COLUMN content_hash DROP EXPRESSION IF EXISTS;
ALTER TABLE learnings ALTER COLUMN content_hash DROP EXPRESSION IF EXISTS;
ALTER TABLE capabilities ALTER COLUMN content_hash DROP EXPRESSION IF EXISTS;
ALTER TABLE fragments ALTER COLUMN content_hash DROP EXPRESSION IF EXISTS;

SET LOCAL maintenance_work_mem = '512MB';
DROP INDEX IF EXISTS tasks_embedding_hnsw;
DROP INDEX IF EXISTS learnings_embedding_hnsw;
DROP INDEX IF EXISTS fragments_embedding_hnsw;

-- Tasks ------------------------------------------------------------------------------------------------------
-- keyword_docs first: it compares with the row's hash before the row's is recomputed.
UPDATE keyword_docs kd
SET content_hash = md5(mp_task_text(t.title, t.description, t.task_type, t.status, t.project_key, t.created_at))
FROM tasks t
WHERE kd.source = 'task' AND kd.item_id = t.id::text
  AND kd.content_hash = t.content_hash AND kd.indexed_at >= t.updated_at;

UPDATE tasks t
SET content_hash = h.hash,
    embedded_hash = CASE WHEN t.embedded_hash = t.content_hash AND t.embedded_at >= t.updated_at
                         THEN h.hash ELSE t.embedded_hash END
FROM (SELECT id, md5(mp_task_text(title, description, task_type, status, project_key, created_at)) AS hash
      FROM tasks) h
WHERE h.id = t.id AND t.content_hash IS DISTINCT FROM h.hash;

-- Learnings --------------------------------------------------------------------------------------------------
UPDATE keyword_docs kd
SET content_hash = md5(mp_learning_text(t.title, t.content, t.task_type, t.failure_class, t.category,
                                        t.created_at))
FROM learnings t
WHERE kd.source = 'learning' AND kd.item_id = t.id::text
  AND kd.content_hash = t.content_hash AND kd.indexed_at >= t.updated_at;

UPDATE learnings t
SET content_hash = h.hash,
    embedded_hash = CASE WHEN t.embedded_hash = t.content_hash AND t.embedded_at >= t.updated_at
                         THEN h.hash ELSE t.embedded_hash END
FROM (SELECT id, md5(mp_learning_text(title, content, task_type, failure_class, category, created_at)) AS hash
      FROM learnings) h
WHERE h.id = t.id AND t.content_hash IS DISTINCT FROM h.hash;

-- Capabilities: the text was already what the old hash covered (name, description); recomputed all the same.
UPDATE capabilities t
SET content_hash = md5(mp_capability_text(t.name, t.description))
WHERE t.content_hash IS DISTINCT FROM md5(mp_capability_text(t.name, t.description));

-- Fragments (the text reads the memory's speaker, type and date and the project's name) ---------------------
UPDATE keyword_docs kd
SET content_hash = md5(mp_fragment_text(m.speaker, f.content, p.project_name, m.content_type, m.created_at))
FROM fragments f
JOIN memories m ON m.id = f.memory_id
JOIN projects p ON p.id = m.project_id
WHERE kd.source = 'fragment' AND kd.item_id = f.id
  AND kd.content_hash = f.content_hash AND kd.indexed_at >= m.updated_at;

UPDATE fragments f
SET content_hash = h.hash,
    embedded_hash = CASE WHEN f.embedded_hash = f.content_hash AND f.embedded_at >= h.updated_at
                         THEN h.hash ELSE f.embedded_hash END
FROM (SELECT f2.id, m.updated_at,
             md5(mp_fragment_text(m.speaker, f2.content, p.project_name, m.content_type, m.created_at)) AS hash
      FROM fragments f2
      JOIN memories m ON m.id = f2.memory_id
      JOIN projects p ON p.id = m.project_id) h
WHERE h.id = f.id AND f.content_hash IS DISTINCT FROM h.hash;

CREATE INDEX IF NOT EXISTS tasks_embedding_hnsw ON tasks USING hnsw (embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS learnings_embedding_hnsw ON learnings USING hnsw (embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS fragments_embedding_hnsw ON fragments USING hnsw (embedding vector_cosine_ops);

-- Triggers: the hash follows every write of a column the text reads -------------------------------------------
-- A trigger also fires when content_hash itself is written, so the column cannot be set to anything else.

CREATE OR REPLACE FUNCTION mp_task_hash() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.content_hash := md5(mp_task_text(NEW.title, NEW.description, NEW.task_type, NEW.status,
                                         NEW.project_key, NEW.created_at));
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER tasks_content_hash
BEFORE INSERT OR UPDATE OF title, description, task_type, status, project_key, created_at, content_hash ON tasks
FOR EACH ROW EXECUTE FUNCTION mp_task_hash();

CREATE OR REPLACE FUNCTION mp_learning_hash() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.content_hash := md5(mp_learning_text(NEW.title, NEW.content, NEW.task_type, NEW.failure_class,
                                             NEW.category, NEW.created_at));
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER learnings_content_hash
BEFORE INSERT OR UPDATE OF title, content, task_type, failure_class, category, created_at, content_hash
ON learnings
FOR EACH ROW EXECUTE FUNCTION mp_learning_hash();

CREATE OR REPLACE FUNCTION mp_capability_hash() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.content_hash := md5(mp_capability_text(NEW.name, NEW.description));
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER capabilities_content_hash
BEFORE INSERT OR UPDATE OF name, description, content_hash ON capabilities
FOR EACH ROW EXECUTE FUNCTION mp_capability_hash();

-- A fragment's hash reads its memory and project (NULL when the memory is missing: the foreign key then
-- refuses the row).
CREATE OR REPLACE FUNCTION mp_fragment_hash() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.content_hash := (
        SELECT md5(mp_fragment_text(m.speaker, NEW.content, p.project_name, m.content_type, m.created_at))
        FROM memories m JOIN projects p ON p.id = m.project_id
        WHERE m.id = NEW.memory_id);
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER fragments_content_hash
BEFORE INSERT OR UPDATE OF content, memory_id, content_hash ON fragments
FOR EACH ROW EXECUTE FUNCTION mp_fragment_hash();

-- A change of what a fragment's text reads from its memory or project rewrites the fragments' hashes
-- (writing content_hash fires fragments_content_hash, which recomputes it).
CREATE OR REPLACE FUNCTION mp_memory_fragments_hash() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE fragments SET content_hash = NULL WHERE memory_id = NEW.id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER memories_fragments_hash
AFTER UPDATE OF speaker, content_type, created_at, project_id ON memories
FOR EACH ROW
WHEN (OLD.speaker IS DISTINCT FROM NEW.speaker OR OLD.content_type IS DISTINCT FROM NEW.content_type
      OR OLD.created_at IS DISTINCT FROM NEW.created_at OR OLD.project_id IS DISTINCT FROM NEW.project_id)
EXECUTE FUNCTION mp_memory_fragments_hash();

CREATE OR REPLACE FUNCTION mp_project_fragments_hash() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE fragments SET content_hash = NULL
    WHERE memory_id IN (SELECT id FROM memories WHERE project_id = NEW.id);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER projects_fragments_hash
AFTER UPDATE OF project_name ON projects
FOR EACH ROW
WHEN (OLD.project_name IS DISTINCT FROM NEW.project_name)
EXECUTE FUNCTION mp_project_fragments_hash();
