"""The main job behind `make run`: database, migrations, demo corpus, embeddings, keywords, samples."""

from __future__ import annotations

import time

from .context.builder import build_memory_context
from .context.scoring import MODES
from .corpus.load import load_demo
from .keyword_index import index_all
from .runtime import open_runtime
from .search import search
from .status import collect_status, format_status
from .text.keywords import has_cjk

SAMPLE_QUERIES = ("认证失败怎么处理", "rate limit errors when calling the API")
CONTEXT_QUERY = "auth error after the token expired: 认证失败怎么排查?"


def _lang(text: str) -> str:
    return "zh" if has_cjk(text) else "en"


def print_search(rt, owner: str, query: str, limit: int = 8) -> None:
    """Print the top hybrid results for one query, each tagged with its language."""
    result = search(rt.pool, rt.embedder, owner, query, limit=limit)
    print(f"\nsearch [{owner}] {query!r} ({result.mode}{', ' + result.degraded if result.degraded else ''})")
    for h in result.hits:
        print(f"  {h.score:.3f}  {h.source:<10} [{_lang(h.title)}] {h.title[:90]}")


def print_contexts(rt, owner: str, query: str = CONTEXT_QUERY) -> None:
    """Print the context block of one query in every mode."""
    for mode in MODES:
        result = build_memory_context(rt.pool, rt.embedder, owner, query, mode=mode)
        print(
            f"\n=== context [{owner}] mode={mode}: {result.token_used}/{result.token_budget} tokens, "
            f"{len(result.items)} of {result.candidates_count} candidates, retrieval {result.retrieval_id}"
        )
        print(result.block)


def run_main_job(owner: str = "team-alpha") -> int:
    """Run every step on the configured (by default embedded, offline) parts and print what happened."""
    from .cli import embed_with_bar

    started = time.perf_counter()
    rt = open_runtime()
    print(
        f"database ready ({rt.url.split('?')[0]}); migrations applied: {', '.join(rt.applied) or 'none pending'}"
    )
    inserted = load_demo(rt.pool)
    print("demo corpus inserted: " + ", ".join(f"{k} {v}" for k, v in inserted.items()))
    results = embed_with_bar(rt)
    for r in results:
        if r.embedded or r.failed:
            print(
                f"embedded {r.source}: {r.embedded} rows in {r.seconds:.1f} s "
                f"({r.rows_per_second:.0f} rows/s), {r.failed} failed"
            )
    kw = index_all(rt.pool)
    print("keyword index: " + ", ".join(f"{k.source} {k.indexed} rows / {k.terms} terms" for k in kw))
    print()
    print(format_status(collect_status(rt)))
    for query in SAMPLE_QUERIES:
        print_search(rt, owner, query)
    print_contexts(rt, owner)
    print(f"\ndone in {time.perf_counter() - started:.1f} s")
    return 0
