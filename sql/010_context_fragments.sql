-- 010: a conversational memory's context lives in a fragment of its own.
--
-- 008 put the previous turn into the indexed text of every fragment of a memory with a session. On
-- locomo_dev (one speaker's turn per memory) that lifted hybrid recall@10 from 0.71 to 0.78, but on
-- memorybank_cross_dev, whose memories are whole exchanges, the previous exchange diluted each vector and
-- semantic recall@10 fell from 0.89 to 0.67. Now the memory's own fragments are indexed by its own words
-- (as without a session) and one more fragment, `with_context`, holds its first chunk indexed with the
-- previous turn. A memory scores by its best fragment in both channels, so a turn that means little alone
-- is found through its context and a self-contained one through its own words. The memory vector (conflict
-- detection, MMR) is the mean of its own fragments only.
--
-- Existing memories with a context: their fragments' texts lose the context (they become pending for the
-- embedding backfill and the keyword refresh) and the context fragment is added, pending too.

ALTER TABLE fragments ADD COLUMN IF NOT EXISTS with_context boolean NOT NULL DEFAULT false;

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

-- Rewrite the hashes of existing conversational memories' fragments, then add their context fragments.
UPDATE fragments f SET content_hash = NULL
FROM memories m WHERE m.id = f.memory_id AND m.context IS NOT NULL;

INSERT INTO fragments (id, memory_id, owner_id, chunk_index, content, ts, with_context)
SELECT f.memory_id || '_ctx', f.memory_id, f.owner_id,
       (SELECT count(*) FROM fragments g WHERE g.memory_id = f.memory_id), f.content, f.ts, true
FROM fragments f JOIN memories m ON m.id = f.memory_id
WHERE m.context IS NOT NULL AND f.chunk_index = 0 AND NOT f.with_context
ON CONFLICT (id) DO NOTHING;

UPDATE memories m SET embedding_status = 'pending'
WHERE m.context IS NOT NULL AND m.embedding_status = 'done';
