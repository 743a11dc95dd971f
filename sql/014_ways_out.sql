-- 014: ways out. An audit trail of removals, the retrieval log's daily roll-up, and the indexes that let a
-- removal or a prune find its rows without reading an owner's (or the log's) whole table.
--
-- removals                 one row per forget, project drop or owner erase: who (an API key's id, or 'cli'),
--                          what (source, item id or project key, rows removed per table), when. Never the
--                          removed content. An erase removes the owner's earlier rows here too and leaves the
--                          one row that records it.
-- retrieval_daily          context builds per owner, UTC day and mode, and how many got feedback: what the
--                          hit-rate history counts for days whose builds were pruned.
-- retrieval_daily_items    scored candidates per owner, UTC day, mode, source and age bucket (the tuner's
--                          report buckets): all of them, and in builds with feedback those injected, used, and
--                          used among the injected. Pruning adds a build's counts here in the transaction
--                          that deletes its rows, so every logged row is counted exactly once: live or rolled up.

CREATE TABLE removals (
    id       bigserial PRIMARY KEY,
    owner_id text NOT NULL CHECK (owner_id <> ''),
    actor    text NOT NULL CHECK (actor <> ''),
    action   text NOT NULL CHECK (action IN ('forget', 'drop_project', 'erase')),
    source   text,
    item_id  text,
    counts   jsonb NOT NULL DEFAULT '{}'::jsonb,
    at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX removals_owner ON removals (owner_id, id DESC);

CREATE TABLE retrieval_daily (
    owner_id      text NOT NULL,
    day           date NOT NULL,
    mode          text NOT NULL,
    builds        bigint NOT NULL DEFAULT 0,
    with_feedback bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (owner_id, day, mode)
);

CREATE TABLE retrieval_daily_items (
    owner_id         text NOT NULL,
    day              date NOT NULL,
    mode             text NOT NULL,
    source           text NOT NULL,
    age_bucket       text NOT NULL,
    candidates       bigint NOT NULL DEFAULT 0,
    injected         bigint NOT NULL DEFAULT 0,
    candidates_fb    bigint NOT NULL DEFAULT 0,
    injected_fb      bigint NOT NULL DEFAULT 0,
    used_fb          bigint NOT NULL DEFAULT 0,
    used_injected_fb bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (owner_id, day, mode, source, age_bucket)
);

-- A forgotten item's log rows are found by owner and id (ids are unique across sources); the owner-only index
-- is this one's leading column.
CREATE INDEX retrieval_candidates_owner_item ON retrieval_candidates (owner_id, item_id);
DROP INDEX IF EXISTS retrieval_candidates_owner;

-- Retention deletes events by age across owners.
CREATE INDEX events_created ON events (created_at);

-- A memory's arbitration rows, and the inactive memories folded into it (duplicate_of / merged_into).
CREATE INDEX memory_arbitrations_owner_new ON memory_arbitrations (owner_id, new_memory_id);
CREATE INDEX memory_arbitrations_owner_candidate ON memory_arbitrations (owner_id, candidate_memory_id);
CREATE INDEX memories_folded_into
    ON memories (owner_id, (coalesce(metadata ->> 'merged_into', metadata ->> 'duplicate_of'))) WHERE NOT is_active;

-- When a build's candidates were pruned (rolled up into retrieval_daily_items); the build row stays until its own
-- age runs out. The partial index is what the next prune reads: the builds whose candidates are still kept.
ALTER TABLE retrievals ADD COLUMN candidates_pruned_at timestamptz;
CREATE INDEX retrievals_candidates_kept ON retrievals (created_at) WHERE candidates_pruned_at IS NULL;

-- A removal counts the owner's documents and their length again from her entries alone (an index-only read).
CREATE INDEX keyword_docs_owner_len ON keyword_docs (owner_id, source) INCLUDE (doc_len);
DROP INDEX IF EXISTS keyword_docs_owner;
