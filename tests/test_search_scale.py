"""The parts of search that keep it fast at scale must not change its answers: stored BM25 statistics,
the over-fetched keyword ranking and the estimate-driven HNSW scan each fall back to exact work when
their shortcut would be wrong."""

from __future__ import annotations

import pytest

from memory_pipelines.index import owner_indexes
from memory_pipelines.index.keywords import STORED_DF_MIN, index_rows, index_source, stale_stat_owners
from memory_pipelines.index.vectors import embed_all
from memory_pipelines.retrieval import keyword as keyword_module
from memory_pipelines.retrieval import planning
from memory_pipelines.retrieval import query as query_module
from memory_pipelines.retrieval import semantic as semantic_module
from memory_pipelines.retrieval.memo import Memo
from memory_pipelines.retrieval.search import SearchFilters, search
from tests.factories import add_event, add_learning, add_task


def _scores(pool, embedder, owner, query, limit=10, filters=None):
    hits = search(pool, embedder, owner, query, mode="keyword", limit=limit, filters=filters).hits
    return [(h.id, round(h.score, 9)) for h in hits]


def _same_ranking(got: list[tuple[str, float]], reference: list[tuple[str, float]], k: int) -> None:
    """`got` is the top k of `reference` (a longer exact ranking), up to the order of tied scores: these
    corpora give many documents the same BM25 score, and tied documents may come back in any order."""
    assert len(got) == k and len(reference) > k
    assert [s for _, s in got] == [s for _, s in reference[:k]]
    assert len({i for i, _ in got}) == k and set(got) <= set(reference)


@pytest.fixture
def many_tasks(pool):
    """STORED_DF_MIN + 10 tasks share the word "deploy"; a few hold rarer words too."""
    with pool.connection() as conn:
        for i in range(STORED_DF_MIN + 10):
            extra = " canary rollout" if i % 7 == 0 else ""
            add_task(conn, "alice", f"deploy service {i}{extra}", "deploy " * (1 + i % 3))
        add_task(conn, "bob", "deploy bob's service", "")
    index_source(pool, "task")


def test_stored_statistics_equal_live_counts_and_give_the_same_scores(pool, fake_embedder, many_tasks):
    with pool.connection() as conn:
        n, total = conn.execute(
            "SELECT n, total_len FROM keyword_stats WHERE owner_id = 'alice' AND source = 'task'"
        ).fetchone()
        live_n, live_total = conn.execute(
            "SELECT count(*), sum(doc_len) FROM keyword_docs WHERE owner_id = 'alice' AND source = 'task'"
        ).fetchone()
        stored_df = dict(
            conn.execute("SELECT keyword, df FROM keyword_df WHERE owner_id = 'alice' AND source = 'task'").fetchall()
        )
    assert (n, total) == (live_n, live_total) == (STORED_DF_MIN + 10, live_total)
    assert stored_df["deploy"] == STORED_DF_MIN + 10
    assert "canary" not in stored_df  # rare terms are counted live, not stored
    stored = _scores(pool, fake_embedder, "alice", "deploy canary rollout")
    with pool.connection() as conn:
        conn.execute("DELETE FROM keyword_stats")
        conn.execute("DELETE FROM keyword_df")
    live = _scores(pool, fake_embedder, "alice", "deploy canary rollout", limit=100)
    assert len(live) == STORED_DF_MIN + 10  # every one of alice's tasks holds "deploy"
    _same_ranking(stored, live, 10)
    assert all(s > 0 for _, s in stored)


def test_terms_indexed_after_the_refresh_are_counted_live(pool, fake_embedder, many_tasks):
    """An ingest indexes inline without refreshing statistics: its new terms are still found, even when
    they are in more documents than the stored document count (idf must stay defined)."""
    with pool.connection() as conn:
        ids = [add_task(conn, "alice", f"zanzibar outage {i}", "zanzibar") for i in range(STORED_DF_MIN + 20)]
        rows = conn.execute(
            "SELECT id::text, owner_id, title || ' ' || description, content_hash FROM tasks"
            " WHERE id = ANY(%s::uuid[])",
            (ids,),
        ).fetchall()
        with conn.transaction():
            index_rows(conn, "task", rows)
        assert stale_stat_owners(conn, "task") == ["alice"]
    hits = search(pool, fake_embedder, "alice", "zanzibar", mode="keyword", limit=5).hits
    assert len(hits) == 5 and all(h.id in ids and h.score > 0 for h in hits)
    result = index_source(pool, "task")
    assert result.stats_refreshed == 1
    with pool.connection() as conn:
        assert stale_stat_owners(conn, "task") == []
        assert conn.execute(
            "SELECT df FROM keyword_df WHERE owner_id = 'alice' AND source = 'task' AND keyword = 'zanzibar'"
        ).fetchone() == (STORED_DF_MIN + 20,)


def test_keyword_ranking_refills_when_its_best_matches_were_deactivated(pool, fake_embedder, many_tasks):
    """The pruned path ranks postings before checking rows; deactivated rows must not shrink the answer."""
    ranked = [h.id for h in search(pool, fake_embedder, "alice", "deploy", mode="keyword", limit=50).hits]
    with pool.connection() as conn:  # deactivate the 30 best without re-indexing keywords
        conn.execute("UPDATE tasks SET is_active = false WHERE id = ANY(%s::uuid[])", (ranked[:30],))
    assert len(ranked) == 50
    hits = _scores(pool, fake_embedder, "alice", "deploy")
    exact = _scores(pool, fake_embedder, "alice", "deploy", limit=100, filters=SearchFilters(time_range_days=3650))
    assert len(exact) == STORED_DF_MIN + 10 - 30  # the exact scan sees every active row
    assert not {i for i, _ in hits} & set(ranked[:30])
    _same_ranking(hits, exact, 10)


def _recall(hits, exact: list[tuple[str, float]], k: int) -> float:
    """Share of the first k hits that belong to the exact top k. The fake embedder gives many rows the same
    distance, and rows tied with the exact k-th one may come back in any order: any of them counts."""
    kth = exact[k - 1][1]
    distance = dict(exact)
    return sum(1 for h in hits[:k] if distance[h.id] <= kth + 1e-6) / k


def test_index_scan_falls_back_to_exact_when_statistics_overstate_the_owner(pool, fake_embedder, monkeypatch):
    """Statistics say alice holds every row; she holds a tenth. The HNSW scan, sized for the estimate,
    comes back short, and the search answers with an exact scan instead of too few rows.

    Measured over 25 runs: 25 hits every time, and recall@10 and recall@25 against a brute-force scan of
    the same rows 1.0 every time (ties counted as above; by id alone, tied rows made it as low as 0.6)."""
    _cap_of_20(monkeypatch)
    with pool.connection() as conn:
        for i in range(300):
            add_task(conn, "alice", f"note {i} about topic {i % 17}", f"details {i * 7 % 13}")
    embed_all(pool, fake_embedder)  # and alice's own graph
    with pool.connection() as conn:
        conn.execute("ANALYZE tasks")
        conn.execute(
            "UPDATE tasks SET owner_id = 'carol' WHERE id IN (SELECT id FROM tasks ORDER BY id OFFSET 30)"
        )
    qvec = fake_embedder.embed_query("note about topic 3")
    hits = search(pool, fake_embedder, "alice", "q", mode="semantic", limit=25, query_vector=qvec,
                  filters=SearchFilters(sources=("task",))).hits
    with pool.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        exact = [(r[0], float(r[1])) for r in conn.execute(  # every one of alice's rows, nearest first
            "SELECT id::text, embedding <=> %s FROM tasks WHERE owner_id = 'alice' ORDER BY 2", (qvec,)
        ).fetchall()]
    assert len(exact) == 30
    assert len(hits) == 25  # not cut short by the over-estimate
    assert len({h.id for h in hits}) == 25 and {h.id for h in hits} <= dict(exact).keys()  # alice's rows only
    distance = dict(exact)
    assert all(h.score == pytest.approx(1 - distance[h.id], abs=1e-5) for h in hits)
    assert _recall(hits, exact, 10) >= 0.9
    assert _recall(hits, exact, 25) >= 0.9


def test_the_hnsw_candidate_list_grows_with_the_graph_and_with_the_filter():
    """ef_search: 200 for ten results from up to 100k rows, doubled per tenfold of the table; a filter
    passing a tenth of the rows multiplies it by ten; never beyond pgvector's maximum of 1,000."""
    ef = planning.hnsw_ef
    assert ef(10, 1.0, 50_000) == ef(10, 1.0, 100_000) == 200
    assert ef(10, 1.0, 1_000_000) == 400
    assert ef(150, 1.0, 1_000_000) == 400  # a deep list for the hybrid channels: 2 per result, floor first
    assert ef(300, 1.0, 1_000_000) == 600
    assert ef(10, 0.5, 100_000) == 400
    assert ef(10, 0.1, 1_000_000) == 1000
    assert ef(10, 0.0, 10) == 1000
    # A list that is the answer itself (semantic search) grows as rows ** 0.7: 1,000 at 1M, where 400 found
    # 0.980 of a whole owner's exact top 10 and 1,000 found 0.994.
    assert ef(10, 1.0, 100_000, answer=True) == 200
    assert ef(10, 1.0, 1_000_000, answer=True) == 1000
    assert ef(10, 1.0, 333_333, answer=True) == 464
    assert ef(400, 1.0, 100_000, answer=True) == 800


def _cap_of_20(monkeypatch) -> None:
    """The exact-scan cap lowered to 20 rows, for search and for the owners' graphs."""
    monkeypatch.setattr(planning, "EXACT_SCAN_MAX_ROWS", 20)
    monkeypatch.setattr(owner_indexes, "EXACT_SCAN_MAX_ROWS", 20)


def _over_a_cap_of_20(pool, embedder, monkeypatch, *, rows: int, topics: int):
    """With the exact-scan cap lowered to 20, `rows` embedded tasks of alice over `topics` topics (and her own
    graph, which the load builds); the vector of a query about topic 3."""
    _cap_of_20(monkeypatch)
    with pool.connection() as conn:
        for i in range(rows):
            add_task(conn, "alice", f"note {i} about topic {i % topics}", f"details {i * 7 % 13}")
    embed_all(pool, embedder)
    return embedder.embed_query("note about topic 3")


def test_a_semantic_search_reads_the_longer_answer_list_and_hybrid_search_the_pool_list(
    pool, fake_embedder, monkeypatch
):
    """The candidate list a search sets is the one `hnsw_ef` gives its kind: the steeper floor for a semantic
    search, whose top k are the answer, the doubling for the deep lists hybrid search fuses. With the base table
    size lowered to 100 rows, 300 rows are 3 times it: 200 x 3 ** 0.7 = 431 against 200 x 2 ** log10(3) = 278."""
    monkeypatch.setattr(planning, "HNSW_EF_BASE_ROWS", 100)
    monkeypatch.setattr(planning, "_index_lists", Memo())
    qvec = _over_a_cap_of_20(pool, fake_embedder, monkeypatch, rows=300, topics=17)
    with pool.connection() as conn:
        conn.execute("ANALYZE tasks")  # every row alice's and embedded: selectivity 1
    only_tasks = SearchFilters(sources=("task",))

    def lists() -> dict[tuple[int, bool], int]:
        return {key[-2:]: ef for key, (ef, _) in planning._index_lists.entries.items() if "alice" in key}

    hits = search(pool, fake_embedder, "alice", "q", mode="semantic", limit=10, query_vector=qvec,
                  filters=only_tasks).hits
    assert len(hits) == 10
    assert lists() == {(10, True): 431}
    search(pool, fake_embedder, "alice", "note about topic 3", mode="hybrid", limit=10, query_vector=qvec,
           filters=only_tasks)
    assert lists() == {(10, True): 431, (50, False): 278}


def test_an_owner_counted_over_the_cap_who_shrinks_below_it_still_gets_exactly_her_rows(
    pool, fake_embedder, monkeypatch
):
    """The count that chooses between an exact and an index scan is remembered for an owner over the cap. When
    she drops below the cap within that window, the index scan comes back short and is answered exactly; once
    the window has passed, she is counted again and scanned exactly from the start."""
    monkeypatch.setattr(planning, "_counts", Memo())
    qvec = _over_a_cap_of_20(pool, fake_embedder, monkeypatch, rows=60, topics=7)
    only_tasks = SearchFilters(sources=("task",))

    def semantic(limit: int) -> list[str]:
        return [h.id for h in search(pool, fake_embedder, "alice", "q", mode="semantic", limit=limit,
                                     query_vector=qvec, filters=only_tasks).hits]

    before = dict(planning.PLANS)
    expired = {("gone", i): (21, 0.0) for i in range(10_000)}  # windows long passed, of 10,000 other owners
    planning._counts.entries.update(expired)
    assert len(semantic(10)) == 10
    assert list(planning._counts.entries.values())[0][0] == 21  # alice over the cap in tasks, remembered;
    assert len(planning._counts.entries) == 1  # the expired forgotten
    with pool.connection() as conn:
        conn.execute("UPDATE tasks SET owner_id = 'carol' WHERE id IN (SELECT id FROM tasks ORDER BY id OFFSET 12)")
        kept = {r[0] for r in conn.execute("SELECT id::text FROM tasks WHERE owner_id = 'alice'").fetchall()}
    assert len(kept) == 12
    fallbacks = planning.PLANS["exact-fallback"]
    assert set(semantic(25)) == kept  # all 12 of hers, none of carol's
    assert planning.PLANS["exact-fallback"] == fallbacks + 1  # the remembered count sent it to the index
    exact = planning.PLANS["exact"]
    monkeypatch.setattr(planning, "OVER_CAP_SECONDS", 0.0)
    planning._counts.clear()
    assert set(semantic(25)) == kept
    assert planning.PLANS["exact"] == exact + 1  # counted again: under the cap, an exact scan
    assert planning.PLANS["exact-fallback"] == fallbacks + 1
    assert dict(planning.PLANS) != before


def test_what_chooses_a_plan_is_remembered_only_once_there_is_something_to_find(pool, fake_embedder):
    """An owner's row count and her keyword index are remembered once she has rows (so searches do not repeat
    those reads); an owner without any is asked again every time, so her first write is found at once by
    both channels, and a count remembered under the cap only keeps her scans exact."""
    with pool.connection() as conn:
        add_task(conn, "alice", "warm-up note", "")
    embed_all(pool, fake_embedder)
    index_source(pool, "task")
    only_tasks = SearchFilters(sources=("task",))

    def found(mode: str, query: str) -> list[str]:
        return [h.title for h in search(pool, fake_embedder, "dora", query, mode=mode, filters=only_tasks).hits]

    assert found("semantic", "kiln firing schedule") == [] and found("keyword", "kiln") == []
    with pool.connection() as conn:
        add_task(conn, "dora", "kiln firing schedule", "cone 6 glaze")
    embed_all(pool, fake_embedder)
    index_source(pool, "task")
    assert found("semantic", "kiln firing schedule") == ["kiln firing schedule"]
    assert found("keyword", "kiln") == ["kiln firing schedule"]
    remembered = {k[-2:]: v[0] for k, v in planning._counts.entries.items() if k[-2] == "dora"}
    assert remembered == {("dora", planning.EXACT_SCAN_MAX_ROWS): 1}
    assert any(k[-2:] == ("dora", "task") for k in keyword_module._indexed.entries)
    with pool.connection() as conn:
        add_task(conn, "dora", "kiln shelf wash", "")
    embed_all(pool, fake_embedder)
    index_source(pool, "task")
    assert sorted(found("semantic", "kiln")) == ["kiln firing schedule", "kiln shelf wash"]  # the count said 1
    assert sorted(found("keyword", "kiln")) == ["kiln firing schedule", "kiln shelf wash"]


def test_the_build_log_does_not_count_towards_an_owners_events(pool, fake_embedder, monkeypatch):
    """Every context build logs a memory_retrieval event, which is never ranked: however many there are, an
    owner's few ranked events are scanned exactly, not through an index."""
    _cap_of_20(monkeypatch)
    with pool.connection() as conn:
        for i in range(60):
            add_event(conn, "alice", "memory_retrieval", {"query": f"build {i}"})
        for i in range(5):
            add_event(conn, "alice", "task_failed", {"error": f"timeout in stage {i}"})
    embed_all(pool, fake_embedder)
    before = planning.PLANS["exact"], planning.PLANS["hnsw-owner"] + planning.PLANS["exact-unindexed"]
    hits = search(pool, fake_embedder, "alice", "timeout in stage", mode="semantic", limit=10,
                  filters=SearchFilters(sources=("event",))).hits
    assert len(hits) == 5 and {h.extra["type"] for h in hits} == {"task_failed"}
    after = planning.PLANS["exact"], planning.PLANS["hnsw-owner"] + planning.PLANS["exact-unindexed"]
    assert after == (before[0] + 1, before[1])


def test_the_semantic_channel_scans_its_sources_at_once_with_the_same_answer(pool, fake_embedder):
    """Each source's index scan runs on its own pooled connection; the merged hits are those of the sources
    scanned one after another on one connection."""
    with pool.connection() as conn:
        for i in range(30):
            add_task(conn, "alice", f"deploy note {i}", f"rollout {i % 5}")
            add_learning(conn, "alice", f"learned deploy lesson {i}")
    embed_all(pool, fake_embedder)
    qvec = fake_embedder.embed_query("deploy rollout")
    f = SearchFilters().validated()
    together = semantic_module.semantic_channel(pool, "alice", qvec, fake_embedder.model_name, f, 20)
    with pool.connection() as conn:
        in_turn = semantic_module.semantic_hits(conn, "alice", qvec, fake_embedder.model_name, f, 20)
    assert {h.source for h in together} >= {"task", "learning"}
    assert [(h.source, h.id, round(h.score, 6)) for h in together] == [
        (h.source, h.id, round(h.score, 6)) for h in in_turn
    ]


def test_the_keyword_channel_answers_the_same_under_generic_plans(pool, fake_embedder, many_tasks):
    """The BM25 queries of the keyword channel run under a generic plan (made once per prepared statement);
    their hits equal those of custom plans (up to tied scores), for owners with many documents, one and none,
    and the setting ends with the channel's transaction."""
    f = SearchFilters().validated()
    for owner, query in (("alice", "deploy canary rollout"), ("bob", "deploy service"), ("carol", "deploy")):
        with pool.connection() as conn:
            custom = keyword_module.keyword_hits(conn, owner, query, f, 20)
            conn.commit()  # as from the pool: the channel's transaction is the connection's own
            for _ in range(7):  # psycopg prepares a statement on its fifth run; the generic plan serves from then
                with conn.transaction():
                    generic = keyword_module._bm25_hits(
                        conn, owner, query_module.query_terms(query), f, 20, generic_plans=True
                    )
                assert conn.execute("SHOW plan_cache_mode").fetchone()[0] == "force_custom_plan"
                conn.commit()
            prepared = "SELECT coalesce(sum(generic_plans), 0) FROM pg_prepared_statements"
            generic_plans = conn.execute(prepared).fetchone()[0]
            conn.commit()
        _same_hits(generic, custom)
        assert generic_plans > 0 or not custom, owner  # carol has no documents: no BM25 query runs for her
    assert keyword_module.keyword_channel(pool, "carol", "deploy", f, 20) == []
    with pool.connection() as conn:
        custom = keyword_module.keyword_hits(conn, "alice", "deploy canary rollout", f, 20)
    _same_hits(keyword_module.keyword_channel(pool, "alice", "deploy canary rollout", f, 20), custom)


_DIALOGUE = (  # over text.focus.SHORT_TOKENS: a long query, focused
    "User: we deploy the canary service to the staging cluster today, after the morning checks\n"
    "AI: the rollout went fine, with no errors in the logs and the latency graphs flat\n"
    "User: good. Before the next one, what did we learn about a deploy rollback last time?"
)


def test_a_query_of_many_terms_reads_its_keyword_sources_at_once_with_the_same_hits(pool, many_tasks, monkeypatch):
    """The keyword sources of a query bringing many terms (a dialogue; a one-turn question of many words) run on
    their own pooled connections at once; the hits equal those read one source after the other, and with no
    BM25 hit anywhere the Jaccard fallback answers as before. A question of few terms keeps one connection."""
    with pool.connection() as conn:
        for i in range(5):
            add_learning(conn, "alice", f"deploy rollback lesson {i}", "roll back the canary first" * (1 + i % 2))
        add_task(conn, "dave", "deploy the canary service", "not keyword-indexed yet")
    index_source(pool, "learning")
    assert query_module.focus(_DIALOGUE).long
    scanned: list[tuple[str, ...]] = []
    pooled = keyword_module._pooled_bm25

    def spied(p, owner, qterms, f, k):  # records each scan, then runs it
        scanned.append(f.sources)
        return pooled(p, owner, qterms, f, k)

    monkeypatch.setattr(keyword_module, "_pooled_bm25", spied)
    f = SearchFilters().validated()
    for owner in ("alice", "dave"):
        with pool.connection() as conn:
            serial = keyword_module.keyword_hits(conn, owner, _DIALOGUE, f, 20)
        got = keyword_module.keyword_channel(pool, owner, _DIALOGUE, f, 20)
        _same_hits(got, serial)
        assert sorted(scanned) == sorted((s,) for s in f.sources), owner  # one scan per source
        scanned.clear()
    assert {h.source for h in got} == {"task"} and all(h.extra["matched_by"] == "jaccard" for h in got)
    with pool.connection() as conn:
        alice = keyword_module.keyword_hits(conn, "alice", _DIALOGUE, f, 20)
    assert {h.source for h in alice} == {"task", "learning"}
    short = keyword_module.keyword_channel(pool, "alice", "deploy rollback", f, 20)
    assert short and scanned == []  # a question of few terms reads its sources on one connection
    wordy = " ".join(["deploy rollback canary lesson service"] + [f"word{i}x" for i in range(25)])
    assert not query_module.focus(wordy).long
    assert len(query_module.query_terms(wordy)) >= keyword_module.KEYWORD_FANOUT_TERMS
    with pool.connection() as conn:
        serial = keyword_module.keyword_hits(conn, "alice", wordy, f, 20)
    got = keyword_module.keyword_channel(pool, "alice", wordy, f, 20)
    _same_hits(got, serial)
    assert {h.source for h in got} == {"task", "learning"}
    assert sorted(scanned) == sorted((s,) for s in f.sources)  # one turn, but many terms: at once


def _same_hits(got_hits, want_hits) -> None:
    """The same hits up to the order of tied scores: a plan may sum a document's terms in another order, so equal
    scores can differ in their last bits and swap places (or members at the cut)."""
    got = sorted(((round(h.score, 9), h.source, h.id) for h in got_hits), reverse=True)
    want = sorted(((round(h.score, 9), h.source, h.id) for h in want_hits), reverse=True)
    assert [s for s, _, _ in got] == [s for s, _, _ in want]
    cut = want[-1][0] if want else 0.0
    assert {x for x in got if x[0] > cut} == {x for x in want if x[0] > cut}
