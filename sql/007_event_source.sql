-- 007: events are an indexed source, and scoring configs carry the parameters of a bounded score.
--
-- mp_event_text is the one definition of an event's indexed text: `[type] value | value | …`, the
-- payload's non-empty values without their keys (keys like "error" would make every event look relevant
-- to every query about errors), cut to 200 characters, as the context builder showed events before.
-- Events are embedded and keyword-indexed like tasks and learnings (vocabulary.INDEXED["event"]): the
-- backfill and the keyword refresh read them through this function, and `content_hash` (kept by a
-- trigger) is md5 of exactly that text, so a rewritten payload makes the row pending again. Only the
-- event types a context build reads (vocabulary.EVENT_TYPES) are indexed; the build log's own events
-- (memory_retrieval, one per build) are not.
--
-- scoring_configs.params holds the parameters beyond half-lives and mode weights (relevance floors,
-- decay floor, weight bounds, per-source weights); a version stored before has '{}' and reads the
-- defaults of context/scoring.py.

CREATE OR REPLACE FUNCTION mp_event_values(payload jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT coalesce(string_agg(CASE jsonb_typeof(e.value) WHEN 'string' THEN e.value #>> '{}' ELSE e.value::text END,
                           ' | ' ORDER BY e.ord), '')
FROM jsonb_each(CASE jsonb_typeof(payload) WHEN 'object' THEN payload ELSE '{}'::jsonb END)
     WITH ORDINALITY AS e(key, value, ord)
WHERE e.value NOT IN ('null'::jsonb, '""'::jsonb, '[]'::jsonb, '{}'::jsonb)
$$;

CREATE OR REPLACE FUNCTION mp_event_text(type text, payload jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT '[' || type || '] ' || left(mp_event_values(payload), 200) $$;

ALTER TABLE events ADD COLUMN IF NOT EXISTS content_hash text;
ALTER TABLE events ADD COLUMN IF NOT EXISTS embedded_hash text;
ALTER TABLE events ADD COLUMN IF NOT EXISTS embedded_at timestamptz;

UPDATE events SET content_hash = md5(mp_event_text(type, payload));

CREATE OR REPLACE FUNCTION mp_event_hash() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.content_hash := md5(mp_event_text(NEW.type, NEW.payload));
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER events_content_hash
BEFORE INSERT OR UPDATE OF type, payload, content_hash ON events
FOR EACH ROW EXECUTE FUNCTION mp_event_hash();

CREATE INDEX IF NOT EXISTS events_embedding_hnsw ON events USING hnsw (embedding vector_cosine_ops);

ALTER TABLE scoring_configs ADD COLUMN IF NOT EXISTS params jsonb NOT NULL DEFAULT '{}'::jsonb;
