-- 010: keyword postings read from the index alone.
--
-- The pruned keyword search reads each query term's best postings by impact (item_id, impact). The impact
-- index held no item_id, so every posting cost a heap fetch: at 1M documents a 30-term query read ~5,000
-- scattered heap pages, 13 ms a term (EXPLAIN ANALYZE, bench/context_latency.py --sizes 1000000). With
-- item_id and tf included, a term's postings are a few contiguous index pages (an index-only scan wherever
-- the visibility map is set, which autovacuum keeps). keywords_owner_keyword stays: the TF-IDF weight
-- refresh (index/keywords.py, refresh_weights) joins on it; without it that UPDATE ran for minutes.

CREATE INDEX keywords_owner_term_postings ON keywords (owner_id, source, keyword, impact DESC) INCLUDE (item_id, tf);
DROP INDEX IF EXISTS keywords_owner_term_impact;
