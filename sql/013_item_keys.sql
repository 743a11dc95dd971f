-- 013: tasks, learnings, capabilities, goals and events can be written by their callers (store/items.py).
--
-- `key` is the caller's own stable id of an item, unique per owner within a table: writing the same key again
-- updates that row in place (INSERT ... ON CONFLICT (owner_id, key) WHERE key IS NOT NULL). Rows without a
-- key (the demo loader's, older rows) are untouched by it.
--
-- Goals and events get `is_active` (an item can be deactivated: it leaves search, the keyword index and the
-- context), events `updated_at`. vocabulary.EVENT_ACTIVE_SQL now reads `is_active`; `events_live` answers it
-- for one owner (the count that chooses a vector scan's plan, the recent-events window).
--
-- `<table>_unembedded` lists the live rows whose indexed text has no current embedding (their content_hash
-- differs from embedded_hash): the background worker finds what a write left pending by reading this small
-- index, not by scanning the table.
--
-- keyword_stats.added counts the documents an owner gained since her statistics were last rewritten
-- (index/keywords.py refresh_stats recreates the row, so it starts at 0 again): a write keeps n and total_len
-- current by adding to them and rewrites the statistics once the owner has grown by half since.

ALTER TABLE tasks ADD COLUMN IF NOT EXISTS key text CHECK (key <> '');
ALTER TABLE learnings ADD COLUMN IF NOT EXISTS key text CHECK (key <> '');
ALTER TABLE capabilities ADD COLUMN IF NOT EXISTS key text CHECK (key <> '');
ALTER TABLE goals ADD COLUMN IF NOT EXISTS key text CHECK (key <> '');
ALTER TABLE events ADD COLUMN IF NOT EXISTS key text CHECK (key <> '');

CREATE UNIQUE INDEX IF NOT EXISTS tasks_owner_key ON tasks (owner_id, key) WHERE key IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS learnings_owner_key ON learnings (owner_id, key) WHERE key IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS capabilities_owner_key ON capabilities (owner_id, key) WHERE key IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS goals_owner_key ON goals (owner_id, key) WHERE key IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS events_owner_key ON events (owner_id, key) WHERE key IS NOT NULL;

ALTER TABLE goals ADD COLUMN IF NOT EXISTS is_active boolean NOT NULL DEFAULT true;
ALTER TABLE events ADD COLUMN IF NOT EXISTS is_active boolean NOT NULL DEFAULT true;
ALTER TABLE events ADD COLUMN IF NOT EXISTS updated_at timestamptz NOT NULL DEFAULT now();

CREATE INDEX IF NOT EXISTS events_live ON events (owner_id, created_at DESC)
    WHERE is_active AND type IN ('task_failed', 'task_completed', 'alert', 'layer2_health', 'escalation');

CREATE INDEX IF NOT EXISTS tasks_unembedded ON tasks (id)
    WHERE is_active AND embedded_hash IS DISTINCT FROM content_hash;
CREATE INDEX IF NOT EXISTS learnings_unembedded ON learnings (id)
    WHERE is_active AND embedded_hash IS DISTINCT FROM content_hash;
CREATE INDEX IF NOT EXISTS capabilities_unembedded ON capabilities (id)
    WHERE is_active AND embedded_hash IS DISTINCT FROM content_hash;
CREATE INDEX IF NOT EXISTS events_unembedded ON events (id)
    WHERE is_active AND type IN ('task_failed', 'task_completed', 'alert', 'layer2_health', 'escalation')
      AND embedded_hash IS DISTINCT FROM content_hash;

ALTER TABLE keyword_stats ADD COLUMN IF NOT EXISTS added integer NOT NULL DEFAULT 0;

-- Keyword postings: deleting a document deletes its postings through one statement-level trigger instead of the
-- foreign key's ON DELETE CASCADE. The foreign key checked every posting inserted against its document, one
-- lookup a posting (about half of the COPY of new postings, ~40 a document: measured with and without it); the
-- indexer writes a document before its postings in the same transaction, so the check guarded nothing.
ALTER TABLE keywords DROP CONSTRAINT IF EXISTS keywords_source_item_id_fkey;

CREATE OR REPLACE FUNCTION mp_keyword_docs_deleted() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    DELETE FROM keywords k USING gone g WHERE k.source = g.source AND k.item_id = g.item_id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER keyword_docs_deleted
AFTER DELETE ON keyword_docs REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT EXECUTE FUNCTION mp_keyword_docs_deleted();

CREATE OR REPLACE FUNCTION mp_keyword_docs_truncated() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    TRUNCATE keywords;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER keyword_docs_truncated
AFTER TRUNCATE ON keyword_docs
FOR EACH STATEMENT EXECUTE FUNCTION mp_keyword_docs_truncated();
