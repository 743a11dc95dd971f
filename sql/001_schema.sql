-- 001: the whole data model of DESIGN.md.
-- {{EMBED_DIM}} is replaced by the configured model's dimension (an integer checked by the runner);
-- the dimension is recorded in meta so that a later start with another model stops with a clear message.

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- Semantic sources -----------------------------------------------------------------------------------------

CREATE TABLE tasks (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_id        text NOT NULL CHECK (owner_id <> ''),
    title           text NOT NULL CHECK (title <> ''),
    description     text NOT NULL DEFAULT '',
    task_type       text CHECK (task_type IN ('dev', 'review', 'qa', 'audit', 'research', 'talk', 'data')),
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'in_progress', 'completed', 'failed', 'cancelled')),
    project_key     text,
    metadata        jsonb NOT NULL DEFAULT '{}'::jsonb,
    is_active       boolean NOT NULL DEFAULT true,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    content_hash    text GENERATED ALWAYS AS (md5(title || E'\n' || description)) STORED,
    embedding       vector({{EMBED_DIM}}),
    embedding_model text,
    embedded_hash   text,
    embedded_at     timestamptz
);
CREATE INDEX tasks_owner_created ON tasks (owner_id, created_at DESC);
CREATE INDEX tasks_owner_type ON tasks (owner_id, task_type);
CREATE INDEX tasks_owner_status ON tasks (owner_id, status);
CREATE INDEX tasks_pending_embedding ON tasks (id) WHERE embedding IS NULL;

CREATE TABLE learnings (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_id        text NOT NULL CHECK (owner_id <> ''),
    title           text NOT NULL CHECK (title <> ''),
    content         text NOT NULL DEFAULT '',
    task_type       text CHECK (task_type IN ('dev', 'review', 'qa', 'audit', 'research', 'talk', 'data')),
    failure_class   text CHECK (failure_class ~ '^[A-Z][A-Z0-9_]*$'),
    trigger_event   text CHECK (trigger_event ~ '^[a-z][a-z0-9_]*$'),
    category        text CHECK (category IN ('failure_pattern', 'best_practice', 'optimization', 'insight')),
    metadata        jsonb NOT NULL DEFAULT '{}'::jsonb,
    is_active       boolean NOT NULL DEFAULT true,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    content_hash    text GENERATED ALWAYS AS (md5(title || E'\n' || content)) STORED,
    embedding       vector({{EMBED_DIM}}),
    embedding_model text,
    embedded_hash   text,
    embedded_at     timestamptz
);
CREATE INDEX learnings_owner_created ON learnings (owner_id, created_at DESC);
CREATE INDEX learnings_owner_type ON learnings (owner_id, task_type);
CREATE INDEX learnings_owner_failure ON learnings (owner_id, failure_class);
CREATE INDEX learnings_owner_trigger ON learnings (owner_id, trigger_event);
CREATE INDEX learnings_owner_category ON learnings (owner_id, category);
CREATE INDEX learnings_pending_embedding ON learnings (id) WHERE embedding IS NULL;

CREATE TABLE capabilities (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_id        text NOT NULL CHECK (owner_id <> ''),
    name            text NOT NULL CHECK (name <> ''),
    description     text NOT NULL DEFAULT '',
    metadata        jsonb NOT NULL DEFAULT '{}'::jsonb,
    is_active       boolean NOT NULL DEFAULT true,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    content_hash    text GENERATED ALWAYS AS (md5(name || E'\n' || description)) STORED,
    embedding       vector({{EMBED_DIM}}),
    embedding_model text,
    embedded_hash   text,
    embedded_at     timestamptz,
    UNIQUE (owner_id, name)
);
CREATE INDEX capabilities_pending_embedding ON capabilities (id) WHERE embedding IS NULL;

-- Profile and episodic sources --------------------------------------------------------------------------------

CREATE TABLE goals (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_id    text NOT NULL CHECK (owner_id <> ''),
    title       text NOT NULL CHECK (title <> ''),
    description text NOT NULL DEFAULT '',
    status      text NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'in_progress', 'completed', 'cancelled')),
    priority    smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 0 AND 9),
    progress    smallint NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 100),
    metadata    jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX goals_owner_status ON goals (owner_id, status, priority, progress DESC);

CREATE TABLE events (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_id        text NOT NULL CHECK (owner_id <> ''),
    type            text NOT NULL CHECK (type ~ '^[a-z][a-z0-9_]*$'),
    payload         jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    embedding       vector({{EMBED_DIM}}),
    embedding_model text
);
CREATE INDEX events_owner_type_created ON events (owner_id, type, created_at DESC);
CREATE INDEX events_owner_created ON events (owner_id, created_at DESC);

-- agent-mem: projects, memories, fragments, versions, arbitrations ------------------------------------------

CREATE TABLE projects (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_id     text NOT NULL CHECK (owner_id <> ''),
    project_key  text NOT NULL CHECK (project_key <> ''),
    project_name text NOT NULL CHECK (project_name <> ''),
    machine_name text,
    project_path text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (owner_id, project_key)
);

CREATE TABLE memories (
    id                 text PRIMARY KEY,
    owner_id           text NOT NULL CHECK (owner_id <> ''),
    project_id         uuid NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    content_type       text NOT NULL
                       CHECK (content_type IN ('requirement', 'plan', 'development', 'testing', 'insight')),
    content            text NOT NULL CHECK (content <> ''),
    content_hash       text NOT NULL,
    ts                 bigint NOT NULL,
    speaker            text,
    metadata           jsonb NOT NULL DEFAULT '{}'::jsonb,
    summary            text,
    tags               jsonb NOT NULL DEFAULT '[]'::jsonb,
    chunk_count        integer NOT NULL DEFAULT 0,
    embedding_status   text NOT NULL DEFAULT 'pending' CHECK (embedding_status IN ('pending', 'done', 'failed')),
    arbitration_status text NOT NULL DEFAULT 'done' CHECK (arbitration_status IN ('pending', 'done')),
    is_active          boolean NOT NULL DEFAULT true,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    avg_embedding      vector({{EMBED_DIM}}),
    embedding_model    text,
    embedded_hash      text,
    embedded_at        timestamptz
);
CREATE INDEX memories_owner_project_type ON memories (owner_id, project_id, content_type, created_at DESC)
    WHERE is_active;
CREATE INDEX memories_owner_created ON memories (owner_id, created_at DESC) WHERE is_active;
CREATE INDEX memories_pending ON memories (id) WHERE embedding_status <> 'done' OR arbitration_status <> 'done';

CREATE TABLE fragments (
    id              text PRIMARY KEY,
    memory_id       text NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    owner_id        text NOT NULL CHECK (owner_id <> ''),
    chunk_index     integer NOT NULL CHECK (chunk_index >= 0),
    content         text NOT NULL,
    content_hash    text GENERATED ALWAYS AS (md5(content)) STORED,
    ts              timestamptz NOT NULL DEFAULT now(),
    embedding       vector({{EMBED_DIM}}),
    embedding_model text,
    embedded_hash   text,
    embedded_at     timestamptz,
    UNIQUE (memory_id, chunk_index)
);
CREATE INDEX fragments_owner ON fragments (owner_id);
CREATE INDEX fragments_pending_embedding ON fragments (id) WHERE embedding IS NULL;

CREATE TABLE memory_versions (
    id            bigserial PRIMARY KEY,
    memory_id     text NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    owner_id      text NOT NULL,
    project_id    uuid NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    version       integer NOT NULL,
    content_type  text NOT NULL,
    content       text NOT NULL,
    content_hash  text,
    ts            bigint NOT NULL,
    summary       text,
    tags          jsonb,
    chunk_count   integer,
    avg_embedding vector({{EMBED_DIM}}),
    created_at    timestamptz,
    replaced_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (memory_id, version)
);
CREATE INDEX memory_versions_owner_memory ON memory_versions (owner_id, memory_id);

CREATE TABLE memory_arbitrations (
    id                  bigserial PRIMARY KEY,
    owner_id            text NOT NULL,
    project_id          uuid NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    candidate_memory_id text,
    new_memory_id       text,
    action              text NOT NULL CHECK (action IN ('REPLACE', 'KEEP_BOTH', 'SKIP', 'CREATE', 'DEFERRED')),
    similarity          double precision,
    old_summary         text,
    new_summary         text,
    model               text,
    reason              text,
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memory_arbitrations_owner_project ON memory_arbitrations (owner_id, project_id, created_at DESC);

-- Keyword index (one table for every source) -----------------------------------------------------------------

CREATE TABLE keyword_docs (
    source       text NOT NULL CHECK (source IN ('task', 'learning', 'capability', 'fragment', 'event')),
    item_id      text NOT NULL,
    owner_id     text NOT NULL,
    doc_len      integer NOT NULL,
    content_hash text NOT NULL,
    indexed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, item_id)
);
CREATE INDEX keyword_docs_owner ON keyword_docs (owner_id, source);

CREATE TABLE keywords (
    source   text NOT NULL,
    item_id  text NOT NULL,
    owner_id text NOT NULL,
    keyword  text NOT NULL,
    tf       integer NOT NULL CHECK (tf > 0),
    weight   real NOT NULL DEFAULT 1.0,
    PRIMARY KEY (source, item_id, keyword),
    FOREIGN KEY (source, item_id) REFERENCES keyword_docs (source, item_id) ON DELETE CASCADE
);
CREATE INDEX keywords_owner_keyword ON keywords (owner_id, keyword, source);

-- Scoring configs and the retrieval log ----------------------------------------------------------------------

CREATE TABLE scoring_configs (
    version      serial PRIMARY KEY,
    half_lives   jsonb NOT NULL,
    mode_weights jsonb NOT NULL,
    is_active    boolean NOT NULL DEFAULT false,
    fitted_on    jsonb NOT NULL DEFAULT '{}'::jsonb,
    evaluation   jsonb NOT NULL DEFAULT '{}'::jsonb,
    note         text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    activated_at timestamptz
);
CREATE UNIQUE INDEX scoring_configs_one_active ON scoring_configs (is_active) WHERE is_active;

-- Seed 001's half-lives (days; null = no decay) and MODE_WEIGHT as version 1. Capabilities and memories
-- are not in the seed's table: they get the task weights (capability) and 1.0 (memory).
INSERT INTO scoring_configs (half_lives, mode_weights, is_active, note, activated_at) VALUES (
    '{"task": 30, "learning": 90, "event": 1, "okr": null, "capability": null, "memory": null}',
    '{"task":       {"plan": 1.0, "execute": 1.2, "debug": 1.0, "chat": 0.8},
      "learning":   {"plan": 0.8, "execute": 1.0, "debug": 1.5, "chat": 0.6},
      "event":      {"plan": 0.5, "execute": 0.8, "debug": 1.5, "chat": 0.3},
      "okr":        {"plan": 1.5, "execute": 0.5, "debug": 0.3, "chat": 1.0},
      "capability": {"plan": 1.0, "execute": 1.2, "debug": 1.0, "chat": 0.8},
      "memory":     {"plan": 1.0, "execute": 1.0, "debug": 1.0, "chat": 1.0}}',
    true, 'seed 001 defaults', now()
);

CREATE TABLE retrievals (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_id         text NOT NULL,
    query            text NOT NULL,
    mode             text NOT NULL CHECK (mode IN ('plan', 'execute', 'debug', 'chat')),
    token_budget     integer NOT NULL CHECK (token_budget > 0),
    token_used       integer NOT NULL,
    candidates_count integer NOT NULL,
    injected_count   integer NOT NULL,
    injected_sources jsonb NOT NULL DEFAULT '[]'::jsonb,
    config_version   integer REFERENCES scoring_configs (version),
    degraded         text,
    randomized       boolean NOT NULL DEFAULT false,
    as_of            timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    feedback_at      timestamptz
);
CREATE INDEX retrievals_owner_created ON retrievals (owner_id, created_at DESC);
CREATE INDEX retrievals_created ON retrievals (created_at);

CREATE TABLE retrieval_candidates (
    retrieval_id uuid NOT NULL REFERENCES retrievals (id) ON DELETE CASCADE,
    owner_id     text NOT NULL,
    source       text NOT NULL,
    item_id      text NOT NULL,
    relevance    double precision NOT NULL,
    age_days     double precision,
    mode         text NOT NULL,
    decay        double precision NOT NULL,
    mode_weight  double precision NOT NULL,
    score        double precision NOT NULL,
    rank         integer NOT NULL,
    mmr_rank     integer,
    tokens       integer,
    injected     boolean NOT NULL,
    used         boolean NOT NULL DEFAULT false,
    PRIMARY KEY (retrieval_id, source, item_id)
);
CREATE INDEX retrieval_candidates_owner ON retrieval_candidates (owner_id);

-- API keys (sha-256 of the key; the key itself is shown once) ----------------------------------------------

CREATE TABLE api_keys (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_id   text NOT NULL CHECK (owner_id <> ''),
    key_hash   text NOT NULL UNIQUE,
    prefix     text NOT NULL,
    name       text,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    last_used_at timestamptz
);
CREATE INDEX api_keys_owner ON api_keys (owner_id);
