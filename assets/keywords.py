"""Keyword tables per source (the BM25 / TF-IDF side of hybrid search), refreshed incrementally.

Terms come from `memory_pipelines.text.keywords.terms` (jieba for Chinese runs, words otherwise). The
stored weight is scikit-learn's TF-IDF (`TfidfVectorizer(sublinear_tf=True, smooth_idf=True, norm=None)`:
`(1 + ln tf) * (1 + ln((1 + n) / (1 + df)))`) fitted per owner, computed in SQL so that a refresh of a
few changed rows does not reload the corpus; tests check it against scikit-learn itself. The online
keyword search reads the same tables (term frequencies and document lengths for BM25).

These assets depend on the source tables, not on the embeddings: keyword search is the fallback when
the embedding provider is down, so a failed embedding check must not stop it. Their check
(`keyword_freshness`, a warning) compares the tables with the rows they index.
"""


import time

import dagster as dg

from memory_pipelines.index.keywords import index_source, keyword_staleness, stale_stat_owners
from memory_pipelines.operations.coverage import keyword_term_count
from memory_pipelines.vocabulary import INDEXED_NAMES

from .embeddings import DB_WRITE_POOL, SOURCE_TABLES
from .resources import RESOURCES, MemoryResource


class KeywordConfig(dg.Config):
    full_refresh: bool = False
    """Re-index every active row (not only rows changed since they were indexed) and recompute weights."""


def keyword_asset_key(source: str) -> dg.AssetKey:
    return dg.AssetKey(f"{source}_keywords")


def _build_keyword_asset(source: str) -> dg.AssetsDefinition:
    @dg.asset(
        key=keyword_asset_key(source),
        deps=[SOURCE_TABLES[source]],
        group_name="keywords",
        kinds={"postgres", "python"},  # jieba terms in Python, TF-IDF/BM25 weights in SQL
        pool=DB_WRITE_POOL,
        description=(f"Keyword table of {source} rows: terms (jieba for Chinese), term frequencies, document "
                     "lengths, TF-IDF weights and stored BM25 statistics per owner. Incremental; "
                     "`full_refresh` re-indexes all."),
    )
    def _keywords(context: dg.AssetExecutionContext, config: KeywordConfig,
                  memory: MemoryResource) -> dg.MaterializeResult:
        pool = memory.runtime.pool
        started = time.perf_counter()
        result = index_source(pool, source, full=config.full_refresh)
        seconds = time.perf_counter() - started
        with pool.connection() as conn:
            lag = keyword_staleness(conn, source)
            terms = keyword_term_count(conn, source)
        context.log.info(f"{source} keywords: {result.indexed} rows (re)indexed with {result.terms} terms, "
                         f"{result.removed} removed, {lag['active']} active rows "
                         f"({'full refresh' if config.full_refresh else 'incremental'})")
        return dg.MaterializeResult(metadata={
            "rows_indexed": result.indexed,
            "terms_written": result.terms,
            "rows_removed": result.removed,
            "owners_stats_refreshed": result.stats_refreshed,
            "rows_active": lag["active"],
            "terms_total": terms,
            "full_refresh": config.full_refresh,
            "seconds": round(seconds, 3),
            "rows_per_second": round(result.indexed / seconds, 1) if seconds > 0 else 0.0,
        })

    return _keywords


keyword_assets: dict[str, dg.AssetsDefinition] = {s: _build_keyword_asset(s) for s in INDEXED_NAMES}


def _freshness_check(source: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=keyword_assets[source], name="keyword_freshness",
        description="Every active row is keyword-indexed at its current content; no entry for removed rows; "
                    "every owner's stored BM25 statistics count what is indexed.",
    )
    def _check(memory: MemoryResource) -> dg.AssetCheckResult:
        with memory.runtime.pool.connection() as conn:
            lag = keyword_staleness(conn, source)
            stale_stats = len(stale_stat_owners(conn, source))
        fresh = lag["stale"] == 0 and lag["orphaned"] == 0 and stale_stats == 0
        return dg.AssetCheckResult(
            passed=fresh,
            severity=dg.AssetCheckSeverity.WARN,
            description=None if fresh else f"{lag['stale']} rows changed since indexed, "
                                           f"{lag['orphaned']} entries of removed rows, "
                                           f"{stale_stats} owners with stale BM25 statistics",
            metadata={"rows_stale": lag["stale"], "entries_orphaned": lag["orphaned"],
                      "rows_active": lag["active"], "owners_stale_statistics": stale_stats},
        )

    return _check


keyword_checks = [_freshness_check(s) for s in INDEXED_NAMES]

defs = dg.Definitions(assets=list(keyword_assets.values()), asset_checks=keyword_checks, resources=RESOURCES)
