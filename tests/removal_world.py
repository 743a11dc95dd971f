"""A store holding items of every source for several owners, written the way users write them, and what the
removal tests read back from it: every read surface, the keyword tables, and a scan of every table's rows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from psycopg import sql

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.context.history import build_detail, hit_rates, recent_builds
from memory_pipelines.context.log import record_feedback
from memory_pipelines.index.keywords import STORED_DF_MIN, index_all
from memory_pipelines.index.vectors import embed_all
from memory_pipelines.infra.errors import NotFoundError
from memory_pipelines.infra.llm import ChatLLM
from memory_pipelines.retrieval.disclosure import detail, related, summary_search
from memory_pipelines.retrieval.search import search
from memory_pipelines.store.ingest import finish_deferred, ingest_memory
from memory_pipelines.store.read import get_memories, list_projects, memory_versions, search_memories, timeline
from tests.factories import add_capability, add_event, add_goal, add_learning, add_task
from tests.fake_openai import FakeOpenAI

T = 0.5  # conflict threshold for the bag-of-words test embedder


@dataclass
class Owned:
    """One owner's items: source -> {name: id}, and each item's unique marker word."""

    owner: str
    ids: dict[str, dict[str, str]] = field(default_factory=dict)
    markers: dict[str, str] = field(default_factory=dict)  # item id -> a word only that item holds

    def add(self, source: str, name: str, item_id: str, marker: str) -> str:
        self.ids.setdefault(source, {})[name] = item_id
        self.markers[item_id] = marker
        return item_id


def marker(owner: str, name: str) -> str:
    return f"zq{owner}{name}".replace("_", "")


def _llm(server: FakeOpenAI) -> ChatLLM:
    return ChatLLM(api_key="test", model="fake-chat", base_url=server.base_url, sleep=lambda _s: None, max_retries=1)


def _answer(server: FakeOpenAI, summary: str, action: str | None = None, target: str | None = None) -> None:
    server.chat_responses.append(json.dumps({"summary": summary, "tags": ["memory"]}))
    if action:
        server.chat_responses.append(json.dumps({"action": action, "reason": "test", "target_id": target}))


def write_owner(pool, embedder, server: FakeOpenAI, owner: str, *, common: int = 55) -> Owned:
    """Items of every source for `owner`: tasks (enough sharing a word for a stored df), learnings, capabilities,
    goals, events, memories in two projects (one replaced twice: versions; a conversation of three turns; a
    deferred duplicate folded into another)."""
    o = Owned(owner)
    llm = _llm(server)
    with pool.connection() as conn:
        for i in range(common):
            add_task(conn, owner, f"deploy pipeline step {i}", f"routine deploy work number {i}", days=2)
        for name in ("t1", "t2", "t3"):
            m = marker(owner, name)
            o.add("task", name, add_task(conn, owner, f"deploy {m} release", f"the {m} deploy checklist"), m)
        for name in ("l1", "l2"):
            m = marker(owner, name)
            o.add("learning", name, add_learning(conn, owner, f"lesson {m}", f"retry the {m} deploy",
                                                 failure_class="TIMEOUT"), m)
        for name in ("c1", "c2"):
            m = marker(owner, name)
            o.add("capability", name, add_capability(conn, owner, f"can {m}", f"knows how to {m} deploy"), m)
        for name in ("g1", "g2"):
            m = marker(owner, name)
            o.add("goal", name, add_goal(conn, owner, f"goal {m} shipped"), m)
        for name in ("e1", "e2"):
            m = marker(owner, name)
            o.add("event", name, add_event(conn, owner, "task_failed", {"error": f"{m} deploy timeout"}), m)

    def ingest(content: str, project: str = "Agent Mem", **kw: Any):
        kw.setdefault("content_type", "development")
        return ingest_memory(pool, embedder, kw.pop("llm", None), owner, content=content, project_name=project,
                             conflict_threshold=T, **kw)

    m1 = marker(owner, "m1")
    _answer(server, f"{m1} vectors")
    first = ingest(f"Decision {m1}: memory vectors live in PostgreSQL with pgvector and an HNSW index.", llm=llm)
    for step, word in enumerate(("ivfflat", "tuned")):
        _answer(server, f"{m1} update {step}", "REPLACE", first.id)
        again = ingest(f"Decision {m1}: memory vectors live in PostgreSQL with pgvector, {word} HNSW index.", llm=llm)
        assert again.id == first.id and again.action == "REPLACE"
    o.add("memory", "m1", first.id, m1)
    m2 = marker(owner, "m2")
    o.add("memory", "m2", ingest(f"Requirement {m2}: the login page supports dark mode.", "Web App",
                                 content_type="requirement").id, m2)
    for i, speaker in enumerate(("Ann", "Bo", "Cy")):  # a conversation: each reply indexed with the turn before
        m = marker(owner, f"s{i}")
        o.add("memory", f"s{i}", ingest(f"{speaker} says {m} about the trip to Lisbon", "Chat", speaker=speaker,
                                        session="trip", content_type="insight").id, m)
    m3 = marker(owner, "m3")
    held = ingest(f"Insight {m3}: batch the embedding writes with COPY for speed.", "Agent Mem", content_type="insight")
    o.add("memory", "m3", held.id, m3)
    embedder.fail_after = embedder.texts_embedded  # the duplicate arrives while the provider is down
    dup = ingest(f"Insight {m3}: batch the embedding writes with COPY for speed.", "Agent Mem", content_type="insight")
    embedder.fail_after = None
    finish_deferred(pool, embedder, None, conflict_threshold=T)  # rules: the same text is a duplicate (SKIP)
    o.ids["memory"]["m3_dup"] = dup.id
    return o


def settle(pool, embedder) -> None:
    """Embed and keyword-index everything (statistics refreshed), as the pipelines do."""
    embed_all(pool, embedder)
    index_all(pool)


def builds_with_feedback(pool, embedder, owner: str, queries: list[str]) -> list[str]:
    """Context builds for `owner`, each with explicit feedback marking its first injected item used."""
    ids = []
    for q in queries:
        ctx = build_memory_context(pool, embedder, owner, q, exploration=0.0)
        record_feedback(pool, owner, ctx.retrieval_id, [ctx.items[0].id] if ctx.items else [])
        ids.append(ctx.retrieval_id)
    return ids



def aged_log(pool, embedder, server: FakeOpenAI, owner: str, *, log_days: int, alert_days: int) -> None:
    """`owner`'s items settled, two context builds with feedback `log_days` old and an alert `alert_days` old:
    what retention prunes."""
    write_owner(pool, embedder, server, owner, common=3)
    settle(pool, embedder)
    builds_with_feedback(pool, embedder, owner, ["deploy release checklist", "trip to Lisbon"])
    with pool.connection() as conn:
        conn.execute("UPDATE retrievals SET created_at = created_at - %s", (timedelta(days=log_days),))
        add_event(conn, owner, "alert", {"disk": "full"}, hours=24 * alert_days)


# --- reading back ---------------------------------------------------------------------------------------------


def tables(conn) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') ORDER BY 1")]


def rows_mentioning(pool, needle: str, *, skip: tuple[str, ...] = ()) -> dict[str, int]:
    """Per table, rows whose text (every column) contains `needle` (case-insensitive)."""
    found = {}
    with pool.connection() as conn:
        for t in tables(conn):
            if t in skip:
                continue
            n = conn.execute(sql.SQL("SELECT count(*) FROM {} x WHERE x::text ILIKE %s").format(sql.Identifier(t)),
                             (f"%{needle}%",)).fetchone()[0]
            if n:
                found[t] = n
    return found


def owner_rows(pool, owner: str) -> dict[str, int]:
    with pool.connection() as conn:
        out = {}
        for t in tables(conn):
            has = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass"
                               " AND attname = 'owner_id' AND NOT attisdropped)", (t,)).fetchone()[0]
            if has:
                out[t] = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE owner_id = %s").format(sql.Identifier(t)),
                                      (owner,)).fetchone()[0]
        return out


def table_counts(pool) -> dict[str, int]:
    with pool.connection() as conn:
        return {t: conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(t))).fetchone()[0]
                for t in tables(conn)}


def keyword_state(pool) -> dict[str, set]:
    """What BM25 reads (not the impact order nor times): documents, postings, stored statistics."""
    with pool.connection() as conn:
        return {
            "docs": set(conn.execute("SELECT source, item_id, owner_id, doc_len, content_hash FROM keyword_docs")),
            "postings": set(conn.execute("SELECT source, item_id, owner_id, keyword, tf FROM keywords")),
            "stats": set(conn.execute("SELECT owner_id, source, n, total_len FROM keyword_stats")),
            "df": set(conn.execute("SELECT owner_id, source, keyword, df FROM keyword_df")),
        }


def stats_of_docs(pool) -> dict[str, set]:
    """The statistics a refresh would store for the documents indexed now."""
    with pool.connection() as conn:
        return {
            "stats": set(conn.execute(
                "SELECT owner_id, source, count(*), sum(doc_len) FROM keyword_docs GROUP BY 1, 2")),
            "df": set(conn.execute(
                "SELECT owner_id, source, keyword, count(*) FROM keywords GROUP BY 1, 2, 3 HAVING count(*) >= %s",
                (STORED_DF_MIN,))),
        }


def fresh_keyword_state(pool) -> dict[str, set]:
    """Re-index every row from scratch (statistics of every owner rewritten) and read the tables back."""
    with pool.connection() as conn:
        conn.execute("DELETE FROM keyword_docs")
        conn.execute("DELETE FROM keyword_stats")
        conn.execute("DELETE FROM keyword_df")
    index_all(pool, full=True)
    return keyword_state(pool)


QUERIES = ("deploy release checklist", "memory vectors pgvector HNSW", "trip to Lisbon", "login dark mode",
           "embedding writes COPY", "deploy timeout retry")


def surfaces(pool, embedder, owner: str) -> dict[str, Any]:
    """What every read surface shows `owner` for the standard queries (ids and titles, scores rounded)."""
    out: dict[str, Any] = {}
    for q in QUERIES:
        for mode in ("hybrid", "keyword", "semantic"):
            hits = search(pool, embedder, owner, q, mode=mode, limit=20,
                          filters=None).hits
            out[f"search:{mode}:{q}"] = [(h.source, h.id, round(h.score, 4)) for h in hits]
        out[f"summary:{q}"] = [(m["id"], m["title"], m["preview"]) for m in
                               summary_search(pool, embedder, owner, q, top_k=20)["matches"]]
        out[f"find:{q}"] = [(r["id"], r["snippet"]) for r in search_memories(pool, embedder, owner, q)["results"]]
        ctx = build_memory_context(pool, embedder, owner, q, log_build=False, exploration=0.0)
        out[f"context:{q}"] = ctx.block
    out["timeline"] = [(i["id"], i["summary"]) for i in timeline(pool, owner, limit=200)["items"]]
    out["projects"] = [(p["project_key"], p["memory_count"]) for p in list_projects(pool, owner)]
    out["hit_rates"] = hit_rates(pool, owner, days=30)
    return out


def item_reads(pool, embedder, owner: str, item_id: str, source: str) -> dict[str, Any]:
    """What the by-id reads answer for one item: 'not found' or its record."""
    out: dict[str, Any] = {}
    for name, call in (
        ("detail", lambda: detail(pool, owner, item_id)),
        ("related", lambda: related(pool, embedder, owner, item_id, top_k=5)),
        ("versions", lambda: memory_versions(pool, owner, item_id)),
    ):
        if name == "versions" and source != "memory":
            continue
        try:
            out[name] = call()
        except NotFoundError:
            out[name] = "not found"
    if source == "memory":
        got = get_memories(pool, owner, [item_id])
        out["get"] = "not found" if item_id in got["missing"] else got["memories"]
    return out


def history(pool, owner: str) -> list[dict[str, Any]]:
    """Every build of `owner` with every scored candidate."""
    builds = recent_builds(pool, owner, limit=100)["builds"]
    return [build_detail(pool, owner, b["retrieval_id"]) for b in builds]
