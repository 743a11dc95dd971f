"""Every item earns its place in the block (issue 11), on the demo corpus with the local model.

A labelled set (tests/data/context_queries.json: 77 queries, Chinese and English, every source, titles and
paraphrases) asks for one item each; every query is built in plan, execute and debug at 800 tokens. Asked by
an item's title, the block holds that item in >= 95 % of builds and at most 40 % of all injected items are
events, and its other-language twin is held in >= 70 % (the three targets of issue 11). The figures print
(pytest -s).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.demo.corpus import load_demo, stable_id
from memory_pipelines.index.keywords import index_all
from memory_pipelines.index.vectors import embed_all

QUERIES = Path(__file__).parent / "data" / "context_queries.json"
MODES = ("plan", "execute", "debug")
BUDGET = 800
NOW = datetime(2026, 1, 15, 9, 0, tzinfo=UTC)


def item_id(key: str) -> str:
    """The database id of a demo corpus row (demo/corpus.py)."""
    return "mem_" + stable_id(key).hex[:20] if key.startswith("mem-") else str(stable_id(key))


def rate(hits: list[bool]) -> float:
    return sum(hits) / len(hits) if hits else float("nan")


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~90 s on two idle cores; embedding the corpus takes minutes on a busy machine
def test_asked_by_title_the_block_holds_the_item_and_its_twin(pool, local_embedder):
    started = time.perf_counter()
    load_demo(pool, now=NOW)
    embed_all(pool, local_embedder)
    index_all(pool)
    loaded = time.perf_counter()
    queries = json.loads(QUERIES.read_text(encoding="utf-8"))["queries"]
    assert len(queries) >= 60
    assert {q["source"] for q in queries} == {"task", "learning", "capability", "memory", "event"}
    assert {q["lang"] for q in queries} == {"zh", "en"}

    item: dict[tuple[str, str], list[bool]] = defaultdict(list)  # (kind, mode) -> found
    twin: dict[tuple[str, str], list[bool]] = defaultdict(list)
    by_source: dict[str, list[bool]] = defaultdict(list)  # title queries only
    injected: dict[str, list[str]] = defaultdict(list)  # mode -> sources of injected items
    floored: dict[str, int] = defaultdict(int)
    misses: list[str] = []
    for q in queries:
        for mode in MODES:
            result = build_memory_context(
                pool, local_embedder, q["owner"], q["query"], mode, BUDGET, as_of=NOW, log_build=False
            )
            ids = {i.id for i in result.items}
            found = item_id(q["target"]) in ids
            item[(q["kind"], mode)].append(found)
            if q["kind"] == "title":
                by_source[q["source"]].append(found)
            if not found and q["kind"] == "title":
                misses.append(f"{q['id']} {mode}: {q['query']}")
            if "twin" in q:
                twin[(q["kind"], mode)].append(item_id(q["twin"]) in ids)
            injected[mode].extend(i.source for i in result.items)
            floored[mode] += result.floored

    def pooled(table: dict[tuple[str, str], list[bool]], kind: str) -> list[bool]:
        return [x for mode in MODES for x in table[(kind, mode)]]

    print(f"\n{len(queries)} queries × {len(MODES)} modes at {BUDGET} tokens "
          f"(load + embed {loaded - started:.0f} s, builds {time.perf_counter() - loaded:.0f} s)")
    print(f"{'mode':<8} {'item(title)':>11} {'twin(title)':>11} {'item(para)':>10} {'twin(para)':>10}"
          f" {'events':>7} {'items':>6} {'floored':>8}")
    for mode in MODES:
        sources = injected[mode]
        print(f"{mode:<8} {rate(item[('title', mode)]):>11.1%} {rate(twin[('title', mode)]):>11.1%}"
              f" {rate(item[('paraphrase', mode)]):>10.1%} {rate(twin[('paraphrase', mode)]):>10.1%}"
              f" {rate([s == 'event' for s in sources]):>7.1%} {len(sources):>6} {floored[mode]:>8}")
    all_sources = [s for mode in MODES for s in injected[mode]]
    item_title, twin_title = rate(pooled(item, "title")), rate(pooled(twin, "title"))
    event_share = rate([s == "event" for s in all_sources])
    print(f"{'all':<8} {item_title:>11.1%} {twin_title:>11.1%} {rate(pooled(item, 'paraphrase')):>10.1%}"
          f" {rate(pooled(twin, 'paraphrase')):>10.1%} {event_share:>7.1%} {len(all_sources):>6}"
          f" {sum(floored.values()):>8}")
    print("by source (title):", {s: f"{rate(v):.0%}" for s, v in sorted(by_source.items())})
    if misses:
        print("missed:", *misses, sep="\n  ")

    assert item_title >= 0.95  # 100 % measured (55 % at first; 95.6 % with decay floor 0.5, weights 0.5-1.5)
    assert event_share <= 0.40  # 17.1 % measured (75 % at first)
    # 81.1 % measured (21 % at first). With the first bounds (decay floor 0.5, weights 0.5-1.5: 6x) it was 62.9 %:
    # the twin was retrieved (search rank 2-9) but a fresh item of relevance 0.43 outscored it after decay.
    assert twin_title >= 0.70
