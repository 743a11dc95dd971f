"""The demo corpus: the floors of issue 2, and loading twice changes nothing."""

from __future__ import annotations

from collections import Counter

from memory_pipelines.demo.corpus import load_demo, read_demo


def test_corpus_meets_the_floors():
    corpus = read_demo()
    assert len(corpus["tasks"]) >= 300 and len(corpus["learnings"]) >= 150
    assert len(corpus["capabilities"]) >= 20 and len(corpus["goals"]) >= 10
    assert len(corpus["events"]) >= 300 and len(corpus["memories"]) >= 50
    assert len({t["owner"] for t in corpus["tasks"]}) >= 2
    assert sum(1 for e in corpus["events"] if e["age_hours"] < 72) >= 100
    projects = {(m["owner"], m["project_key"]) for m in corpus["memories"]}
    assert max(Counter(o for o, _ in projects).values()) >= 3
    assert {m["content_type"] for m in corpus["memories"]} == {
        "requirement",
        "plan",
        "development",
        "testing",
        "insight",
    }
    pairs = Counter(
        lrn["metadata"]["pair"] for lrn in corpus["learnings"] if lrn.get("metadata", {}).get("pair")
    )
    assert len(pairs) >= 10 and set(pairs.values()) == {2}
    ages = [t["age_days"] for t in corpus["tasks"]]
    assert max(ages) - min(ages) > 150


def test_loading_is_idempotent(pool):
    first = load_demo(pool)
    corpus = read_demo()
    assert first["tasks"] == len(corpus["tasks"]) and first["memories"] == len(corpus["memories"])
    with pool.connection() as conn:
        before = {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in (
                "tasks",
                "learnings",
                "capabilities",
                "goals",
                "events",
                "memories",
                "fragments",
                "projects",
            )
        }
    second = load_demo(pool)
    assert set(second.values()) == {0}
    with pool.connection() as conn:
        after = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in before}
    assert after == before
    assert before["fragments"] > before["memories"]  # long memories were chunked
