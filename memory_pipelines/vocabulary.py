"""What every layer must agree on: sources, modes, content types, limits and advisory-lock keys.

API models, MCP schemas, CLI choices, SQL CHECKs (by migration), scoring and search read from here, so a
concept is spelled once. Adding a source is one `Source` entry here plus its migration.

Two kinds of source:
- *indexed texts* (`INDEXED`): rows whose words are embedded and keyword-indexed (`task`, `learning`,
  `capability`, `event`, and `fragment`, the chunks of agent-mem memories);
- *scored sources* (`SOURCES`): what search and the context builder rank (`task`, `learning`, `capability`,
  `memory`, `event`, `okr`); `memory` is reached through its fragments' index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

# -- modes and content types ---------------------------------------------------------------------------------

ContextMode = Literal["plan", "execute", "debug", "chat"]
CONTEXT_MODES: tuple[str, ...] = get_args(ContextMode)
"""What a context block is for; each weighs the sources differently (the context-builder spec: MODE_WEIGHT)."""

SearchMode = Literal["semantic", "keyword", "hybrid"]
SEARCH_MODES: tuple[str, ...] = get_args(SearchMode)
"""How search ranks: vectors, BM25 keywords, or both fused."""

ContentType = Literal["requirement", "plan", "development", "testing", "insight"]
CONTENT_TYPES: tuple[str, ...] = get_args(ContentType)
"""The kinds of agent-mem memory (also a CHECK on memories.content_type)."""

Scope = Literal["all", "requirement", "plan", "development", "testing", "insight"]
"""A content type, or all of them."""

CONTENT_TYPES_TEXT = (
    "content_type is exactly one of five: 'requirement' (requirements and constraints), 'plan' (plans, "
    "schedules, milestones), 'development' (implementation, code details, architecture), 'testing' "
    "(tests, verification, regressions), 'insight' (lessons, patterns, decisions)."
)

# -- limits (every surface validates with these) ---------------------------------------------------------------

MAX_QUERY = 2_000
"""Characters of a search or context query."""
MAX_CONTENT = 100_000
"""Characters of one memory (about 25k-50k tokens: a long design document); larger input is refused."""
MAX_NAME = 200
"""Characters of project_key, project_name, owner, speaker."""
MAX_PATH = 1_000
"""Characters of machine_name, project_path."""
MAX_ID = 200
"""Characters of one item id."""
MAX_IDS = 100
"""Ids per get request."""
MAX_SEARCH_LIMIT = 100
MAX_TIMELINE_LIMIT = 200
MAX_TOP_K = 100
"""Matches of a progressive-disclosure search or related call."""
MIN_TS = 946_684_800
"""2000-01-01T00:00:00Z: the earliest memory timestamp accepted."""
MAX_TS = 32_503_680_000
"""3000-01-01T00:00:00Z: the schema's upper bound of a Unix timestamp."""
TS_FUTURE_SLACK = 86_400
"""A memory's ts may be at most one day ahead of the server clock."""
DEFAULT_BUDGET = 800
MIN_BUDGET, MAX_BUDGET = 50, 32_000
"""Token budget of a context block."""
MAX_KEY_CHARS = 200
"""Characters of an API key as sent; longer is rejected before any lookup."""
MAX_BUILDS = 100
"""Context builds in one page of an owner's build history."""
MAX_HISTORY_DAYS = 366
"""Days a hit-rate series reaches back."""
MAX_OUTPUT = 100_000
"""Characters of an agent's output posted as implicit feedback (an answer, summary, diff or tool calls)."""
MAX_BODY_BYTES = 2_097_152
"""Bytes of one HTTP request body; a larger one is a 413 (the longest content, 100 000 characters, is
at most 1.2 MB as escaped JSON)."""

# -- advisory locks: (namespace, key) pairs; each namespace means one thing ------------------------------------

LOCK_MIGRATE = 7_245_001
"""pg_advisory_lock(LOCK_MIGRATE): one process applies migrations at a time."""
LOCK_PROJECT = 7_245_002
"""pg_advisory_xact_lock(LOCK_PROJECT, hashtext(project_id)): one ingest per project at a time."""
LOCK_INDEX = 7_245_003
"""pg_advisory_lock(LOCK_INDEX, n): bulk loaders of the n-th vector column share, the index builder excludes."""
LOCK_DEMO_LOG = 7_245_004
"""pg_advisory_lock(LOCK_DEMO_LOG): one loader of the demo corpus's simulated agent sessions at a time."""
LOCK_DAGSTER = 7_245_005
"""pg_advisory_lock(LOCK_DAGSTER): one process creates Dagster's postgres storage tables at a time."""
LOCK_PREWARM = 7_245_006
"""pg_try_advisory_lock(LOCK_PREWARM): one process reads the database's files into the page cache at a time."""
LOCK_KEYWORD_STATS = 7_245_007
"""pg_advisory_xact_lock(LOCK_KEYWORD_STATS, hashtext('source:owner')): one item write at a time keeps an owner's
stored BM25 statistics of a source."""
LOCK_PROJECT_NAMES = 7_245_008
"""pg_advisory_xact_lock(LOCK_PROJECT_NAMES, hashtext(owner)): one new project or rename per owner at a time, so
no two of her projects answer to one name."""

# -- vector search ------------------------------------------------------------------------------------------------

EXACT_SCAN_MAX_ROWS = 10_000
"""At or below this many filtered rows, vector search scans exactly; an owner with more embedded rows of a table
gets an HNSW index of her own there (index/owner_indexes.py), and is scanned exactly until it is built.
An exact scan costs ~2 µs a row with the rows in shared buffers, so the cap's owner is answered exactly in
about the time an index scan of a shared graph takes for a worse recall (bench/filtered_recall.py,
docs/performance.md)."""

# -- partitions ---------------------------------------------------------------------------------------------------

BUCKETS = 8
"""Embedding work is split into this many static hash buckets of the row id."""


def bucket_sql(alias: str = "t") -> str:
    """The bucket of a row: `abs(hashtext(id::text)::bigint) % buckets` (bigint: no overflow).

    Use with a `%(buckets)s` parameter; the one spelling of the expression for SQL everywhere."""
    return f"abs(hashtext({alias}.id::text)::bigint) %% %(buckets)s"


# -- sources -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexedText:
    """A table whose rows are embedded and keyword-indexed, and the one definition of their text.

    `text_sql` is the indexed text (the item's words plus the context a question would name: type,
    status, project, speaker, date): a call of the table's SQL function (`mp_<name>_text`,
    sql/005_indexed_text.sql), the one definition of that text. The table's `content_hash` is md5 of
    exactly that text, kept by triggers, so any change of the text makes the row pending again.
    """

    name: str
    table: str
    id_type: str
    from_sql: str
    text_sql: str
    active_sql: str = "t.is_active"
    vector_column: str = "embedding"


@dataclass(frozen=True)
class Source:
    """A kind of item that search or the context builder ranks, and the SQL that reads it.

    The `*_sql` projections read alias `t` (the row) from `from_sql`; search and progressive disclosure
    build their queries from them, so a new searchable source needs no code of its own there.
    """

    name: str
    table: str
    id_type: str
    half_life_days: float | None
    mode_weights: dict[str, float]
    indexed_as: str | None = None
    """The `INDEXED` entry whose vectors and keywords reach it (None: not searched, e.g. okr)."""
    searchable: bool = False
    """Reached by search (semantic + keyword), hence a candidate of a context build's semantic retrieval."""
    chunked: bool = False
    """Indexed through its chunks (fragments): scored by its best chunk, its vector the chunks' mean."""
    from_sql: str = ""
    title_sql: str = ""
    body_sql: str = ""
    extra_sql: str = "'{}'::jsonb"
    project_sql: str | None = None
    """The project key column, for the project filter (None: the source has no project)."""
    vector_sql: str = "t.embedding"
    detail_sql: str = ""
    """The full record by id and owner: id, title, body, status, metadata, created_at, vector, active (progressive
    disclosure's detail and related layers; empty: no id of the source opens there)."""
    active_sql: str = "t.is_active"
    """Which rows of the table are live (ranked and indexed)."""
    active_counted: bool = False
    """Whether the count that chooses a vector scan's plan reads only live rows (`active_sql`, which an index
    answers): for events, whose build-log memory_retrieval events, never ranked, grow with every context
    build. Else the owner's rows are counted (an index-only read; few are inactive)."""


EVENT_TYPES: tuple[str, ...] = ("task_failed", "task_completed", "alert", "layer2_health", "escalation")
"""The event types a context build reads as recent events (the context-builder spec)."""
LOG_EVENT_TYPE = "memory_retrieval"
"""The build log's own event type (context/log.py writes one per build; the export puts them with the log):
reserved, a caller's event may not take it."""
FORGOTTEN_PREFIX = "forgotten:"
"""A scrubbed log row's item id: this prefix and a random uuid (the build keeps its counts, not the item)."""
EVENT_WINDOW_HOURS = {"default": 24, "debug": 72}
EVENT_ACTIVE_SQL = "t.is_active AND t.type IN (" + ", ".join(f"'{t}'" for t in EVENT_TYPES) + ")"
"""The events that are indexed and ranked: active ones of EVENT_TYPES (not the build log's memory_retrieval)."""


INDEXED: dict[str, IndexedText] = {
    "task": IndexedText(
        name="task",
        table="tasks",
        id_type="uuid",
        from_sql="tasks t",
        text_sql="mp_task_text(t.title, t.description, t.task_type, t.status, t.project_key, t.created_at)",
    ),
    "learning": IndexedText(
        name="learning",
        table="learnings",
        id_type="uuid",
        from_sql="learnings t",
        text_sql="mp_learning_text(t.title, t.content, t.task_type, t.failure_class, t.category, t.created_at)",
    ),
    "capability": IndexedText(
        name="capability",
        table="capabilities",
        id_type="uuid",
        from_sql="capabilities t",
        text_sql="mp_capability_text(t.name, t.description)",
    ),
    "fragment": IndexedText(
        name="fragment",
        table="fragments",
        id_type="text",
        from_sql="fragments t JOIN memories m ON m.id = t.memory_id JOIN projects p ON p.id = m.project_id",
        text_sql=(
            "mp_fragment_text(m.speaker, t.content, p.project_name, m.content_type, m.created_at,"
            " CASE WHEN t.with_context THEN m.context END)"
        ),
        active_sql="m.is_active",
    ),
    "event": IndexedText(
        name="event",
        table="events",
        id_type="uuid",
        from_sql="events t",
        text_sql="mp_event_text(t.type, t.payload)",
        active_sql=EVENT_ACTIVE_SQL,
    ),
}

SOURCES: dict[str, Source] = {
    "task": Source(
        "task", "tasks", "uuid", 30, {"plan": 1.0, "execute": 1.2, "debug": 1.0, "chat": 0.8},
        indexed_as="task", searchable=True, from_sql="tasks t", title_sql="t.title", body_sql="t.description",
        extra_sql="jsonb_build_object('status', t.status, 'task_type', t.task_type,"
        " 'project_key', t.project_key, 'metadata', t.metadata)",
        project_sql="t.project_key",
        detail_sql="SELECT id::text, title, description, status, metadata || jsonb_build_object('task_type',"
        " task_type, 'project_key', project_key), created_at, embedding, is_active FROM tasks"
        " WHERE id = %s AND owner_id = %s",
    ),
    "learning": Source(
        "learning", "learnings", "uuid", 90, {"plan": 0.8, "execute": 1.0, "debug": 1.5, "chat": 0.6},
        indexed_as="learning", searchable=True, from_sql="learnings t", title_sql="t.title", body_sql="t.content",
        extra_sql="jsonb_build_object('task_type', t.task_type, 'failure_class',"
        " t.failure_class, 'trigger_event', t.trigger_event, 'category', t.category)",
        detail_sql="SELECT id::text, title, content, NULL, metadata || jsonb_build_object('task_type', task_type,"
        " 'failure_class', failure_class, 'trigger_event', trigger_event, 'category', category),"
        " created_at, embedding, is_active FROM learnings WHERE id = %s AND owner_id = %s",
    ),
    "capability": Source(
        "capability", "capabilities", "uuid", None, {"plan": 1.0, "execute": 1.2, "debug": 1.0, "chat": 0.8},
        indexed_as="capability", searchable=True, from_sql="capabilities t", title_sql="t.name",
        body_sql="t.description",
        detail_sql="SELECT id::text, name, description, NULL, metadata, created_at, embedding, is_active"
        " FROM capabilities WHERE id = %s AND owner_id = %s",
    ),
    "memory": Source(
        "memory", "memories", "text", None, {"plan": 1.0, "execute": 1.0, "debug": 1.0, "chat": 1.0},
        indexed_as="fragment", searchable=True, chunked=True,
        from_sql="memories t JOIN projects p ON p.id = t.project_id",
        title_sql="coalesce(t.summary, left(t.content, 80))", body_sql="t.content",
        extra_sql="jsonb_build_object('content_type', t.content_type, 'project_key', p.project_key,"
        " 'speaker', t.speaker, 'tags', t.tags, 'session', t.session)",
        project_sql="p.project_key", vector_sql="t.avg_embedding",
        detail_sql="SELECT m.id, coalesce(m.summary, left(m.content, 80)), m.content, NULL, m.metadata"
        " || jsonb_build_object('content_type', m.content_type, 'project_key', p.project_key, 'tags', m.tags,"
        " 'speaker', m.speaker), m.created_at, m.avg_embedding, m.is_active FROM memories m"
        " JOIN projects p ON p.id = m.project_id WHERE m.id = %s AND m.owner_id = %s AND m.is_active",
    ),
    "event": Source(
        "event", "events", "uuid", 1, {"plan": 0.5, "execute": 0.8, "debug": 1.5, "chat": 0.3},
        indexed_as="event", from_sql="events t", title_sql="'[' || t.type || ']'",
        body_sql="left(mp_event_values(t.payload), 200)", extra_sql="jsonb_build_object('type', t.type)",
        active_sql=EVENT_ACTIVE_SQL, active_counted=True,
        detail_sql="SELECT id::text, '[' || type || ']', mp_event_values(payload), NULL, jsonb_build_object('type',"
        " type, 'payload', payload), created_at, embedding, is_active FROM events WHERE id = %s AND owner_id = %s",
    ),
    "okr": Source(
        "okr", "goals", "uuid", None, {"plan": 1.5, "execute": 0.5, "debug": 0.3, "chat": 1.0}, title_sql="t.title",
        detail_sql="SELECT id::text, title, description, status, metadata || jsonb_build_object('priority',"
        " priority, 'progress', progress), created_at, NULL::vector, is_active FROM goals"
        " WHERE id = %s AND owner_id = %s",
    ),
}

SOURCE_NAMES: tuple[str, ...] = tuple(SOURCES)
SEARCH_SOURCES: tuple[str, ...] = tuple(n for n, s in SOURCES.items() if s.searchable)
DETAIL_SOURCES: tuple[str, ...] = tuple(n for n, s in SOURCES.items() if s.detail_sql)
"""Sources whose ids progressive disclosure opens: every id a search or a context build hands out (a build's
events and profile goals too)."""
RANKED_SOURCES: tuple[str, ...] = tuple(n for n, s in SOURCES.items() if s.indexed_as)
"""Sources search can rank when asked (SEARCH_SOURCES, the default, plus events: the context builder's
recent events, searched within their window)."""
INDEXED_NAMES: tuple[str, ...] = tuple(INDEXED)
KEYWORD_SOURCE_OF: dict[str, str] = {n: s.indexed_as for n, s in SOURCES.items() if s.indexed_as}
"""Scored source → the keyword-table source that indexes it (memory → fragment)."""

VECTOR_COLUMNS: list[tuple[str, str, str | None]] = [
    *((i.table, i.vector_column, None) for i in INDEXED.values()),
    ("memories", "avg_embedding", "memories_avg_embedding_hnsw"),
    ("memory_versions", "avg_embedding", None),
]
"""Every vector column, with its table-wide HNSW index if it has one (recreated when the dimension changes). The
searched tables (INDEXED) have none: each owner over EXACT_SCAN_MAX_ROWS has a graph of her own rows there
(index/owner_indexes.py, sql/012). A column's position n is its loader lock (LOCK_INDEX, n)."""



def a_source(source: str) -> str:
    """The source's name with its article: "a task", "an event"."""
    return f"{'an' if source[:1] in 'aeiou' else 'a'} {source}"


def seed_half_lives() -> dict[str, float | None]:
    """Default half-life (days, None = no decay) per scored source."""
    return {n: s.half_life_days for n, s in SOURCES.items()}


def seed_mode_weights() -> dict[str, dict[str, float]]:
    """Default mode weights per scored source."""
    return {n: dict(s.mode_weights) for n, s in SOURCES.items()}


# -- the write contract of the item sources ------------------------------------------------------------------------
# What a caller may write into tasks, learnings, capabilities, goals and events: every surface (HTTP models, MCP
# schemas, CLI, import) reads its fields, enums and limits from here, and store/items.py validates against it.

WRITABLE_SOURCES: tuple[str, ...] = ("task", "learning", "capability", "goal", "event")
WRITE_TABLES: dict[str, str] = {"task": "tasks", "learning": "learnings", "capability": "capabilities",
                                "goal": "goals", "event": "events"}
"""The table each writable source is stored in."""

MAX_BATCH = 1_000
"""Items in one HTTP batch request (above it a 422 naming `items`); the library's `write_items` takes any number."""
MAX_ITEM_KEY = 200
"""Characters of a caller's stable key of an item (unique per owner and source)."""
EXPORTED_ID_KEY = "id:"
"""The key an export gives an item written without one (`id:<its id>`); a write of that key to the same owner
is that item."""
DOWNLOAD_IDLE_SECONDS = 300
"""A streamed export whose reader takes nothing for this long is cut: its database session ends (releasing its
snapshot) and a server closes the connection (operations/export.py, the HTTP export route)."""
MAX_TITLE = 1_000
"""Characters of a title or a capability's name."""
MAX_ITEM_TEXT = MAX_CONTENT
"""Characters of a description or a learning's content."""
MAX_LABEL = 200
"""Characters of a project, failure class, trigger event or event type."""
MAX_OBJECT_CHARS = 100_000
"""Characters of a metadata or payload object written as compact JSON."""
ITEM_TIME_TEXT = "ISO 8601 (UTC when it has no zone) or Unix seconds, from 2000-01-01 to one day from now"

TASK_TYPES: tuple[str, ...] = ("dev", "review", "qa", "audit", "research", "talk", "data")
TASK_STATUSES: tuple[str, ...] = ("pending", "in_progress", "completed", "failed", "cancelled")
LEARNING_CATEGORIES: tuple[str, ...] = ("failure_pattern", "best_practice", "optimization", "insight")
GOAL_STATUSES: tuple[str, ...] = ("pending", "in_progress", "completed", "cancelled")
"""The CHECK constraints of sql/001_schema.sql."""
FAILURE_CLASS_PATTERN = r"^[A-Z][A-Z0-9_]*$"
SNAKE_PATTERN = r"^[a-z][a-z0-9_]*$"
"""An event type or a learning's trigger event (a CHECK of sql/001_schema.sql)."""


@dataclass(frozen=True)
class FieldSpec:
    """One field of a writable source as callers spell it.

    kind: "text" (a string; `max_chars`, `pattern`), "enum" (one of `choices`), "int" (`min`..`max`),
    "object" (a JSON object; `max_chars` of its compact JSON), "bool", or "time" (`ITEM_TIME_TEXT`).
    A field that is not `required` may be left out (then `default`) or be null when `nullable`.
    `column` is its column when it is not spelled the same.
    """

    name: str
    kind: str
    required: bool = False
    max_chars: int | None = None
    choices: tuple[str, ...] = ()
    min: int | None = None
    max: int | None = None
    doc: str = ""
    pattern: str | None = None
    default: object = None
    nullable: bool = False
    column: str | None = None
    reserved: tuple[str, ...] = ()
    """Text values no caller may write (the store writes them itself)."""

    @property
    def db_column(self) -> str:
        return self.column or self.name


COMMON_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("key", "text", max_chars=MAX_ITEM_KEY, nullable=True,
              doc="Your stable id of the item, unique per owner and source: writing the same key again updates it."),
    FieldSpec("at", "time", nullable=True, column="created_at",
              doc=f"When it happened: {ITEM_TIME_TEXT}; default now (an update keeps the stored time)."),
    FieldSpec("active", "bool", default=True, column="is_active",
              doc="false deactivates it: it leaves search and context (and comes back with true)."),
)
"""Fields every writable source has (the last three of each contract)."""

_METADATA = FieldSpec("metadata", "object", max_chars=MAX_OBJECT_CHARS, default={},
                      doc="Anything else about it, as a JSON object (stored, not indexed).")

WRITE_CONTRACTS: dict[str, tuple[FieldSpec, ...]] = {
    "task": (
        FieldSpec("title", "text", required=True, max_chars=MAX_TITLE, doc="What the task is."),
        FieldSpec("description", "text", max_chars=MAX_ITEM_TEXT, default="", doc="Details, outcome."),
        FieldSpec("task_type", "enum", choices=TASK_TYPES, nullable=True, doc="The kind of work."),
        FieldSpec("status", "enum", choices=TASK_STATUSES, default="pending", doc="Where it stands."),
        FieldSpec("project", "text", max_chars=MAX_LABEL, nullable=True, column="project_key",
                  doc="The project key it belongs to."),
        _METADATA,
        *COMMON_FIELDS,
    ),
    "learning": (
        FieldSpec("title", "text", required=True, max_chars=MAX_TITLE, doc="The lesson in one line."),
        FieldSpec("content", "text", max_chars=MAX_ITEM_TEXT, default="", doc="The lesson in full."),
        FieldSpec("task_type", "enum", choices=TASK_TYPES, nullable=True, doc="The kind of work it applies to."),
        FieldSpec("failure_class", "text", max_chars=MAX_LABEL, pattern=FAILURE_CLASS_PATTERN, nullable=True,
                  doc="The failure it is about, UPPER_SNAKE (e.g. TIMEOUT)."),
        FieldSpec("trigger_event", "text", max_chars=MAX_LABEL, pattern=SNAKE_PATTERN, nullable=True,
                  doc="The event type it answers, lower_snake (e.g. task_failed)."),
        FieldSpec("category", "enum", choices=LEARNING_CATEGORIES, nullable=True, doc="The kind of lesson."),
        _METADATA,
        *COMMON_FIELDS,
    ),
    "capability": (
        FieldSpec("name", "text", required=True, max_chars=MAX_TITLE,
                  doc="What the agent can do; unique per owner (a write without key updates the same name)."),
        FieldSpec("description", "text", max_chars=MAX_ITEM_TEXT, default="", doc="How, with what."),
        *COMMON_FIELDS,
    ),
    "goal": (
        FieldSpec("title", "text", required=True, max_chars=MAX_TITLE, doc="The objective."),
        FieldSpec("description", "text", max_chars=MAX_ITEM_TEXT, default="", doc="Key results, details."),
        FieldSpec("status", "enum", choices=GOAL_STATUSES, default="pending",
                  doc="pending and in_progress goals are the context's profile."),
        FieldSpec("priority", "int", min=0, max=9, default=2, doc="0 is the most important."),
        FieldSpec("progress", "int", min=0, max=100, default=0, doc="Percent done."),
        *COMMON_FIELDS,
    ),
    "event": (
        FieldSpec("type", "text", required=True, max_chars=MAX_LABEL, pattern=SNAKE_PATTERN,
                  reserved=(LOG_EVENT_TYPE,),
                  doc="lower_snake; a context build reads recent events of types " + ", ".join(EVENT_TYPES)
                      + f"; {LOG_EVENT_TYPE} is reserved for the build log."),
        FieldSpec("payload", "object", required=True, max_chars=MAX_OBJECT_CHARS,
                  doc="What happened, as a JSON object; its values are the event's indexed text."),
        *COMMON_FIELDS,
    ),
}
"""The fields of each writable source: `title`-like fields are required and not blank; enums are exactly the
table's CHECK constraints; a field outside its contract is refused."""
