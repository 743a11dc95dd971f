"""Context-build latency (p50 / p95 / p99) at 10k and 100k memories, query embedding excluded.

Synthetic fake-embedded rows for one owner, a third of each size conversational memories and the rest tasks
and learnings (half each), plus goals and recent events. The memories are turns of sessions of 20 (two
speakers alternating), each with its previous turn as `context` and a `with_context` fragment besides its
own, as ingest writes them (sql/008), all embedded (`_common.load_conversations`). Keyword index
built for tasks, learnings and fragments and vacuumed (the steady state). Queries: half English, half
Chinese (so the CC-CEDICT expansion runs both ways), one in ten a dialogue of a few turns ("User: … / AI:
…", focused by text/focus.py); their vectors are their topics', so memory hits are among the results and
hybrid search runs its neighbour-lift query; one in ten names a time ("last week", "上个月"), so the date prior reads
its candidates' times. How many builds ran the lift, the dictionary expansion and the
focus is counted (instrumented), with the time of the retrieval's parts.

The project's `build_memory_context` (hybrid retrieval over four sources with evidence fusion, dictionary
expansion, long-query focus and the neighbour lift; events, profile, MMR, the token budget, the retrieval log
with candidate features written) runs against the approach written in the context-builder spec, measured in
the same run on the same data and the same pool: sequential vector search of tasks (top 20) and learnings
(top 10) at pgvector's default ef_search, events, goals, Jaccard dedup and the len/2.5 budget, no keyword
channel, no memories and no log. The baseline does far less work (and finds less: see
bench/filtered_recall.py and the eval table), so the ratio says what the project's retrieval costs over it.
The median time of the project's steps is reported too. Query embedding with the local model is measured
apart. Prints one JSON object and writes it to bench/results/context_latency_<sizes>.json (`--out`).

    python bench/context_latency.py [--sizes 10000 100000] [--builds 200]
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections import Counter
from datetime import UTC, datetime

import numpy as np
from _common import (
    LOADS,
    SPEAKERS,
    WORDS,
    ZH,
    add_out_argument,
    database_size,
    emit,
    geometry_suffix,
    load_conversations,
    load_tasks,
    loaded_facts,
    log,
    machine,
    out_path,
    percentiles,
    record_loaded,
    scratch,
    sentence,
    size_label,
    topic_count,
    topic_vector,
    topic_word,
)
from psycopg.types.json import Jsonb

import memory_pipelines.context.retrieve as retrieve_module
import memory_pipelines.retrieval.keyword as keyword_module
import memory_pipelines.retrieval.query as query_module
import memory_pipelines.retrieval.search as search_module
import memory_pipelines.retrieval.semantic as semantic_module
from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.embeddings import FakeEmbedder
from memory_pipelines.index.keywords import index_source
from memory_pipelines.infra.db import connect, get_pool
from memory_pipelines.infra.embedded import embedded_pgdata, exit_on_termination
from memory_pipelines.infra.prewarm import prewarm
from memory_pipelines.infra.settings import get_settings
from memory_pipelines.runtime import warm_up
from memory_pipelines.text.focus import focus
from memory_pipelines.text.keywords import has_cjk, jaccard
from memory_pipelines.text.times import spans

_ASK_ZH = ["怎么处理？", "为什么会这样？", "之前是怎么解决的？", "有没有相关的记录？", "后来怎么样了？"]
_WHEN_EN = ["last week", "in June", "yesterday", "last month", "two weeks ago"]
_WHEN_ZH = ["上周", "昨天", "上个月", "六月份", "两周前"]
_ASK_EN = ["how did we fix", "what happened with", "why did we change", "any notes on", "remind me about"]


def _english(rng: random.Random, topic: int) -> str:
    words = [topic_word(rng, topic) for _ in range(rng.randint(3, 6))] + rng.sample(WORDS, rng.randint(1, 2))
    rng.shuffle(words)
    return f"{rng.choice(_ASK_EN)} {' '.join(words)}"


def _chinese(rng: random.Random, topic: int) -> str:
    zh = rng.sample(ZH, rng.randint(2, 3))
    names = " ".join(topic_word(rng, topic) for _ in range(rng.randint(1, 3)))
    return f"{zh[0]}和{zh[1]}的问题 {names} {''.join(zh[2:])}{rng.choice(_ASK_ZH)}"


def _dialogue(rng: random.Random, topic: int, zh: bool) -> str:
    """A few turns, the earlier ones on other topics, the last two on `topic`."""
    user, ai = ("用户：", "助手：") if zh else ("User: ", "AI: ")
    ask = _chinese if zh else _english
    turns = rng.randint(4, 6)
    lines = []
    for i in range(turns):
        t = topic if i >= turns - 2 else rng.randrange(topic_count())
        lines.append((user if (turns - 1 - i) % 2 == 0 else ai) + ask(rng, t))  # the user asks last
    return "\n".join(lines)


def make_queries(rng: random.Random, count: int) -> list[tuple[str, np.ndarray]]:
    """(query, vector): English and Chinese alternating, two of every 20 (one of each language) a dialogue,
    one an English question naming a speaker, two naming a time; the vector is the topic's (the last turn's
    for a dialogue)."""
    out = []
    for i in range(count):
        topic, zh = rng.randrange(topic_count()), i % 2 == 1
        ask = _chinese if zh else _english
        query = _dialogue(rng, topic, zh) if i % 20 in (8, 9) else ask(rng, topic)
        if i % 20 == 4:  # one in twenty names a speaker: search embeds it again without the name
            query = f"{query} {rng.choice(SPEAKERS)}"
        if i % 20 in (2, 3):  # one in ten names a time: search prefers what was written then (retrieval/dates.py)
            query = f"{query} {rng.choice(_WHEN_ZH if zh else _WHEN_EN)}"
        out.append((query, topic_vector(topic, rng)))
    return out


class Probe:
    """Counts and times, per build, what retrieval ran: the neighbour-lift query, the dictionary expansion,
    the focus of a long query, each search's semantic and keyword channel and each source in them, the vector
    scan plans. Wraps module functions (a few microseconds a call); `build()` resets it, `done(result)` files
    the build's record."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: Counter = Counter()
        self.lifted: set[str] = set()
        self.records: list[dict] = []
        self.plans: Counter = Counter()
        self._wrap()

    def add(self, key: str, value: float = 1) -> None:
        with self.lock:
            self.now[key] += value

    def _wrap(self) -> None:
        s, r, q = search_module, retrieve_module, query_module
        sm, km = semantic_module, keyword_module
        rows, expand, foc, unnamed = s.read_exchanges, q.expand_terms, q.focus, s.without_speaker
        semantic, keyword, search = s.semantic_channel, s.keyword_channel, r.search
        sem_source, kw_source, plan = sm._semantic_source, km._keyword_source, sm.plan_vector_scan

        def timed(name, fn, *args):
            t = time.perf_counter()
            out = fn(*args)
            self.add(f"{name}_ms", (time.perf_counter() - t) * 1000)
            return out

        def read_exchanges(conn, ids, top, clauses, params, speaker=None):
            out = timed("neighbours", rows, conn, ids, top, clauses, params, speaker)
            self.add("neighbour_queries")
            self.add("neighbour_rows", sum(len(r) for r in (*out.adjacent.values(), *out.same_speaker.values())))
            return out

        def expand_terms(terms, weight=0.4):
            out = expand(terms, weight)
            if out:
                self.add("dictionary_expansions")
            return out

        def focus_(query):
            out = foc(query)
            if out.long:
                self.add("focused")
            return out

        def without_speaker(query, name):
            self.add("speaker_named")
            return unnamed(query, name)

        def semantic_channel(pool, owner, qvec, model, f, k, *answer):
            name = "semantic" if "memory" in f.sources else "events_semantic"
            return timed(name, semantic, pool, owner, qvec, model, f, k, *answer)

        def keyword_channel(pool, owner, query, f, k):
            name = "keyword" if "memory" in f.sources else "events_keyword"
            return timed(name, keyword, pool, owner, query, f, k)

        def semantic_source(conn, source, owner, qvec, model, f, k, *answer):
            return timed(f"semantic.{source}", sem_source, conn, source, owner, qvec, model, f, k, *answer)

        def keyword_source(conn, source, owner, qterms, f, k):
            self.add("keyword_terms" if "memory" in f.sources else "events_keyword_terms", len(qterms))
            return timed(f"keyword.{source}", kw_source, conn, source, owner, qterms, f, k)

        def plan_vector_scan(conn, source, clauses, params, k, f, *answer):
            out = plan(conn, source, clauses, params, k, f, *answer)
            with self.lock:
                self.plans[f"{source}: {out}"] += 1
            return out

        def search_(*args, **kwargs):
            out = search(*args, **kwargs)
            with self.lock:
                self.lifted.update(h.id for h in out.hits if "neighbour_gain" in h.extra)
                self.now["memory_hits"] += sum(h.source == "memory" for h in out.hits)
            return out

        s.read_exchanges, q.expand_terms, q.focus, s.focus = read_exchanges, expand_terms, focus_, focus_
        s.without_speaker = without_speaker
        s.semantic_channel, s.keyword_channel, r.search = semantic_channel, keyword_channel, search_
        sm._semantic_source, km._keyword_source, sm.plan_vector_scan = semantic_source, keyword_source, plan_vector_scan

    def build(self) -> None:
        self.now, self.lifted = Counter(), set()

    def done(self, result) -> None:
        rec = dict(self.now)
        rec["lifted_candidates"] = len(self.lifted)
        rec["lifted_items"] = sum(1 for it in result.items if it.source == "memory" and it.id in self.lifted)
        rec["memory_items"] = sum(1 for it in result.items if it.source == "memory")
        self.records.append(rec)

    def summary(self) -> dict:
        recs, n = self.records, len(self.records)

        def builds(key: str) -> int:
            return sum(1 for r in recs if r.get(key, 0) > 0)

        parts = ("semantic", "keyword", "neighbours", "events_semantic", "events_keyword")
        parts += tuple(sorted({k[:-3] for r in recs for k in r if k.startswith(("semantic.", "keyword."))}))
        return {
            "builds": n,
            "builds_with": {
                "neighbour_lift_query": builds("neighbour_queries"),
                "lifted_turn_among_candidates": builds("lifted_candidates"),
                "lifted_turn_injected": builds("lifted_items"),
                "memory_candidates": builds("memory_hits"),
                "memory_injected": builds("memory_items"),
                "dictionary_expansion": builds("dictionary_expansions"),
                "long_query_focus": builds("focused"),
                "named_speaker": builds("speaker_named"),  # the semantic channel ran twice
            },
            "neighbour_rows_mean": round(float(np.mean([r.get("neighbour_rows", 0) for r in recs])), 1),
            "keyword_terms_mean": round(float(np.mean([r.get("keyword_terms", 0) for r in recs])) / 4, 1),
            "vector_plans": dict(self.plans.most_common()),
            "retrieve_parts_ms": {
                p: {"p50": round(float(np.median(v)), 2), "p99": round(float(np.percentile(v, 99)), 2)}
                for p in parts
                if (v := [r[f"{p}_ms"] for r in recs if f"{p}_ms" in r])
            },
        }


def seed_build(pool, owner: str, qvec, budget: int = 800) -> str:
    """The context-builder spec's buildMemoryContext, phase 1–2, as the baseline."""
    with pool.connection() as conn:
        tasks = conn.execute(
            "SELECT title, description, created_at, 1 - (embedding <=> %s) FROM tasks"
            " WHERE owner_id = %s ORDER BY embedding <=> %s LIMIT 20",
            (qvec, owner, qvec),
        ).fetchall()
        learnings = conn.execute(
            "SELECT title, content, created_at, 1 - (embedding <=> %s) FROM learnings"
            " WHERE owner_id = %s ORDER BY embedding <=> %s LIMIT 10",
            (qvec, owner, qvec),
        ).fetchall()
        events = conn.execute(
            "SELECT type, payload::text FROM events WHERE owner_id = %s"
            " AND created_at > now() - interval '24 hours' ORDER BY created_at DESC LIMIT 10",
            (owner,),
        ).fetchall()
        goals = conn.execute(
            "SELECT title, status, progress FROM goals WHERE owner_id = %s AND status IN"
            " ('in_progress', 'pending') ORDER BY priority, progress DESC LIMIT 3",
            (owner,),
        ).fetchall()
    items = [(f"{t} {d}", s) for t, d, _c, s in tasks + learnings] + [(f"[{t}] {p[:200]}", 0.5) for t, p in events]
    items.sort(key=lambda x: -x[1])
    kept: list[str] = []
    for text, _score in items:
        if not any(jaccard(text, k) > 0.8 for k in kept):
            kept.append(text)
    block = "\n".join(f"- {g[0]} ({g[1]}, {g[2]}%)" for g in goals)
    used = len(block) / 2.5
    for text in kept:
        if used + len(text) / 2.5 > budget:
            break
        block += "\n" + text
        used += len(text) / 2.5
    return block


def run_size(
    n: int, builds: int, probe: Probe, keep: str | None = None, warmup: int = 10, warm_cache: bool = True
) -> dict:
    rng = random.Random(5)
    memories = n // 3
    tasks = (n - memories) // 2
    learnings = n - memories - tasks
    with scratch(keep=f"{keep}_{n}" if keep else None) as url:
        facts = loaded_facts(url, "context_latency")
        if facts is None:  # the rows, then the keyword index: each recorded, so a stopped load resumes
            facts = loaded_facts(url, "context_latency_rows") or _load(url, n, tasks, learnings, memories, rng)
            record_loaded(url, "context_latency_rows", facts)
            facts["keyword_index_seconds"] = _keyword_index(url, n)
            record_loaded(url, "context_latency", facts)
        else:
            log(f"[{n}] reusing the kept database {keep}_{n}")
        return _measure(url, n, builds, probe, facts, warmup, warm_cache)


def _load(url: str, n: int, tasks: int, learnings: int, memories: int, rng: random.Random) -> dict:
    """Load the synthetic owner's rows and build every index; returns the counts and the load's timings."""
    log(f"[{n}] loading {tasks} tasks, {learnings} learnings, {memories} conversational memories")
    load_tasks(url, tasks, [("owner", tasks)], seed=1, table="tasks")
    load_tasks(url, learnings, [("owner", learnings)], seed=2, table="learnings")
    conversations = load_conversations(url, memories, "owner", seed=3)
    pool = get_pool(url)
    with pool.connection() as conn:
        for i in range(3):
            conn.execute(
                "INSERT INTO goals (owner_id, title, status, priority) VALUES ('owner', %s, 'in_progress', %s)",
                (f"goal {i}: {sentence(rng)}", i),
            )
        for _ in range(30):
            conn.execute(
                "INSERT INTO events (owner_id, type, payload, created_at) VALUES ('owner',"
                " 'task_failed', %s, now() - make_interval(secs => %s))",
                (Jsonb({"error": sentence(rng)}), rng.random() * 30 * 3600),
            )
        conn.execute("ANALYZE")
    return {"rows": {"tasks": tasks, "learnings": learnings, **conversations}, "loads": LOADS[-3:]}


def _keyword_index(url: str, n: int) -> float:
    """Build the keyword index of every loaded row; returns the seconds it took."""
    log(f"[{n}] keyword index")
    pool = get_pool(url)
    t = time.perf_counter()
    for source in ("task", "learning", "fragment"):  # BM25 reads tf and df; the TF-IDF weights are for tags
        index_source(pool, source, weights=False)
    seconds = time.perf_counter() - t
    with pool.connection() as conn:  # the steady state: autovacuum has seen the 1M+ keyword rows
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE keywords, keyword_docs, keyword_stats, keyword_df")
        conn.autocommit = False
    log(f"[{n}] keyword index in {seconds:.0f} s")
    return round(seconds, 1)


def _prewarm(url: str) -> dict | None:
    """What `serve` does at start with the embedded server (infra/prewarm.py), here before the builds."""
    settings = get_settings()
    if settings.database_url:
        return None
    with connect(url, autocommit=True) as conn:
        done = prewarm(conn, embedded_pgdata(settings))
    if done is None:
        return None
    log(f"[prewarm] {len(done.relations)} relations, {done.bytes_read / 1e6:.0f} MB read in {done.seconds:.1f} s,"
        f" {done.bytes_cached / 1e6:.0f} MB cached already")
    log(f"[prewarm] {done.graphs_walked} vector indexes walked into the buffers in {done.walk_seconds:.1f} s")
    return {"relations": len(done.relations), "mb_read": round(done.bytes_read / 1e6),
            "mb_cached": round(done.bytes_cached / 1e6), "seconds": round(done.seconds, 1),
            "graphs_walked": done.graphs_walked, "walk_seconds": round(done.walk_seconds, 1)}


def _measure(url: str, n: int, builds: int, probe: Probe, facts: dict, warmup: int, warm_cache: bool = True) -> dict:
    """`builds` context builds against the loaded database, and the seed builder on the same queries."""
    warmed = _prewarm(url) if warm_cache else None
    pool, embedder = get_pool(url), FakeEmbedder(384)  # the embedder the load used (queries carry vectors)
    queries = make_queries(random.Random(6), builds)  # the same queries whether loaded now or kept
    kinds = {
        "chinese": sum(has_cjk(q) for q, _ in queries),
        "dialogue_focused": sum(focus(q).long for q, _ in queries),
        "naming_a_time": sum(bool(spans(q, datetime.now(UTC))) and not focus(q).long for q, _ in queries),
    }
    warm_up()  # as `serve` and `mcp` do at start
    load_before = machine()
    for q, v in make_queries(random.Random(7), warmup):  # other queries than the measured ones
        build_memory_context(pool, embedder, "owner", q, query_vector=v)
        seed_build(pool, "owner", v)
    probe.records, probe.plans = [], Counter()
    ours, base, parts = [], [], []
    log(f"[{n}] {builds} builds each")
    for q, v in queries:
        probe.build()
        t = time.perf_counter()
        result = build_memory_context(pool, embedder, "owner", q, query_vector=v)
        ours.append((time.perf_counter() - t) * 1000)
        probe.done(result)
        probe.records[-1].update(total_ms=ours[-1], chinese=has_cjk(q), long=focus(q).long)
        parts.append(result.timings_ms)
        t = time.perf_counter()
        seed_build(pool, "owner", v)
        base.append((time.perf_counter() - t) * 1000)
    ours_p, base_p = percentiles(ours), percentiles(base)
    steps = ("retrieve", "score_mmr_budget", "log")
    return {
        "rows": facts["rows"],
        "queries": {"total": builds, **kinds, "warmup_builds": warmup},
        "loads": facts["loads"],
        "keyword_index_seconds": facts["keyword_index_seconds"],
        "prewarm": warmed,
        "database_size": database_size(url),
        "machine_before": load_before,
        "machine": machine(),
        "project": ours_p,
        "project_steps_p50_ms": {k: round(float(np.median([p[k] for p in parts])), 2) for k in steps},
        "project_steps_p99_ms": {k: round(float(np.percentile([p[k] for p in parts], 99)), 2) for k in steps},
        "retrieval": probe.summary(),
        "seed_baseline": base_p,
        "p99_ratio_baseline_over_project": round(base_p["p99_ms"] / ours_p["p99_ms"], 3),
        "slowest_builds": sorted(probe.records, key=lambda r: -r["total_ms"])[:5],
    }


def query_embedding_ms(samples: int = 50) -> dict:
    from memory_pipelines.embeddings.local import LocalE5Embedder

    emb = LocalE5Embedder()
    rng = random.Random(3)
    emb.embed_query("warm up")
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        emb.embed_query(sentence(rng))
        times.append((time.perf_counter() - t) * 1000)
    return percentiles(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--builds", type=int, default=200)
    parser.add_argument(
        "--warmup", type=int, default=10, help="unmeasured builds first, on other queries (the steady state)"
    )
    parser.add_argument(
        "--keep", metavar="NAME", help="keep the loaded database as NAME_<size> and reuse it on the next run"
    )
    parser.add_argument(
        "--no-prewarm", action="store_true", help="skip reading the database's files into the page cache first, "
        "as `serve` does at start (infra/prewarm.py)"
    )
    add_out_argument(parser)
    args = parser.parse_args()
    out = out_path(args.out, "context_latency_" + "_".join(map(size_label, args.sizes)) + geometry_suffix())
    probe = Probe()
    sizes = {
        str(n): run_size(n, args.builds, probe, args.keep, args.warmup, not args.no_prewarm) for n in args.sizes
    }
    for n, r in sizes.items():
        log(f"{n}: {r}")
    emit(
        {
            "benchmark": "context_latency",
            "builds_per_size": args.builds,
            "retrieval_features": [
                "evidence fusion",
                "CC-CEDICT expansion",
                "conversational memories with context fragments",
                "neighbour lift",
                "long-query focus",
                "date prior",
                "candidate features logged",
            ],
            "sizes": sizes,
            "query_embedding_local_model": query_embedding_ms(),
            "floor_p99_ms": 100,
            "max_p99_ms": max(r["project"]["p99_ms"] for r in sizes.values()),
        },
        out,
    )


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    main()
