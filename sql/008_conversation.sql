-- 008: conversation-aware memories.
--
-- A memory can belong to a conversation session (`session`, given at ingest). Within one owner, project and
-- session its `turn` orders it (a global sequence, so later ingests come later; turns with the same
-- timestamp, as a whole session often has, keep the order they were written in). `context` is the
-- previous turn of the same session when it is another party's ("speaker: words", cut to 300 characters).
--
-- A memory with a context gets one more fragment, `with_context`: its first chunk, indexed and embedded with
-- that previous turn, so a turn like "Yes, it was amazing!" is found through what it answers. Its own
-- fragments stay indexed by its own words and a memory scores by its best fragment in both channels.
-- Putting the context into every fragment's text instead diluted self-contained memories: on
-- memorybank_cross_dev (whole User/AI exchanges) semantic recall@10 fell from 0.889 to 0.669. The memory
-- vector (conflict detection, MMR) is the mean of its own fragments only. Search lifts the neighbouring
-- turns of a strong hit (retrieval/neighbours.py).
--
-- A memory without a session has no context, so its indexed text, and its hash, are unchanged: nothing
-- already embedded becomes pending.

ALTER TABLE memories ADD COLUMN IF NOT EXISTS session text;
ALTER TABLE memories ADD COLUMN IF NOT EXISTS turn bigint;
ALTER TABLE memories ADD COLUMN IF NOT EXISTS context text;
CREATE SEQUENCE IF NOT EXISTS memory_turns;
CREATE INDEX IF NOT EXISTS memories_session_turn ON memories (owner_id, project_id, session, turn)
    WHERE session IS NOT NULL;
ALTER TABLE fragments ADD COLUMN IF NOT EXISTS with_context boolean NOT NULL DEFAULT false;

CREATE OR REPLACE FUNCTION mp_fragment_text(
    speaker text, content text, project_name text, content_type text, created_at timestamptz, context text
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT coalesce(context || E'\n', '') || coalesce(speaker || ': ', '') || content || E'\n[' || project_name
       || ' · ' || content_type || ' · ' || mp_day(created_at) || ']'
$$;

-- The five-argument form (005) stays, for a memory with no context.
CREATE OR REPLACE FUNCTION mp_fragment_text(
    speaker text, content text, project_name text, content_type text, created_at timestamptz
) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT mp_fragment_text(speaker, content, project_name, content_type, created_at, NULL::text) $$;

CREATE OR REPLACE FUNCTION mp_fragment_hash() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.content_hash := (
        SELECT md5(mp_fragment_text(m.speaker, NEW.content, p.project_name, m.content_type, m.created_at,
                                    CASE WHEN NEW.with_context THEN m.context END))
        FROM memories m JOIN projects p ON p.id = m.project_id
        WHERE m.id = NEW.memory_id);
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS fragments_content_hash ON fragments;
CREATE TRIGGER fragments_content_hash
BEFORE INSERT OR UPDATE OF content, memory_id, content_hash, with_context ON fragments
FOR EACH ROW EXECUTE FUNCTION mp_fragment_hash();

DROP TRIGGER IF EXISTS memories_fragments_hash ON memories;
CREATE TRIGGER memories_fragments_hash
AFTER UPDATE OF speaker, content_type, created_at, project_id, context ON memories
FOR EACH ROW
WHEN (OLD.speaker IS DISTINCT FROM NEW.speaker OR OLD.content_type IS DISTINCT FROM NEW.content_type
      OR OLD.created_at IS DISTINCT FROM NEW.created_at OR OLD.project_id IS DISTINCT FROM NEW.project_id
      OR OLD.context IS DISTINCT FROM NEW.context)
EXECUTE FUNCTION mp_memory_fragments_hash();
