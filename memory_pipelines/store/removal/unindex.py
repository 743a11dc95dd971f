"""What a removed item leaves in derived tables, taken out: its keyword postings (with the stored BM25 statistics
kept equal to what a refresh would compute) and its rows in the retrieval log (scrubbed, counts kept)."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from ...index.keywords import STORED_DF_MIN
from ...vocabulary import FORGOTTEN_PREFIX, LOCK_KEYWORD_STATS


def unindex(conn: psycopg.Connection, source: str, owner: str, item_ids: Sequence[str]) -> int:
    """Delete the keyword documents (and postings) of `item_ids` of one keyword source; returns documents removed.

    The owner's stored statistics follow: her document count and total length (`keyword_stats`) are counted
    again from the documents left (an index-only read of her entries), and the terms of documents her last
    refresh counted (indexed at or before `refreshed_at`) lose them in `keyword_df`, a term falling under
    STORED_DF_MIN dropped (counted live, as after a refresh). An owner left with no documents loses her row.
    Statistics that were exact stay exact, equal to a refresh's. A document (re)indexed since the refresh was not
    in its term counts; they were already behind the documents (`stale_stat_owners` reports the owner) and the
    next keyword pass rewrites them."""
    ids = sorted(set(item_ids))
    if not ids:
        return 0
    # item writes hold this lock shared while they index (store/items.py): a removal waits for them, they for it
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LOCK_KEYWORD_STATS, f"{source}:{owner}"))
    docs = conn.execute(
        "SELECT d.item_id, coalesce(d.indexed_at <= s.refreshed_at, false) FROM keyword_docs d"
        " LEFT JOIN keyword_stats s ON s.owner_id = d.owner_id AND s.source = d.source"
        " WHERE d.source = %s AND d.owner_id = %s AND d.item_id = ANY(%s) ORDER BY d.item_id FOR UPDATE OF d",
        (source, owner, ids),
    ).fetchall()
    if counted := [d[0] for d in docs if d[1]]:
        touched = conn.execute(
            "UPDATE keyword_df x SET df = x.df - g.n"
            " FROM (SELECT keyword, count(*) AS n FROM keywords WHERE source = %s AND item_id = ANY(%s)"
            "       GROUP BY keyword) g"
            " WHERE x.owner_id = %s AND x.source = %s AND x.keyword = g.keyword RETURNING x.keyword, x.df",
            (source, counted, owner, source),
        ).fetchall()
        if fallen := [k for k, df in touched if df < STORED_DF_MIN]:
            conn.execute(
                "DELETE FROM keyword_df WHERE owner_id = %s AND source = %s AND keyword = ANY(%s)",
                (owner, source, fallen),
            )
    removed = conn.execute(
        "DELETE FROM keyword_docs WHERE source = %s AND owner_id = %s AND item_id = ANY(%s)", (source, owner, ids)
    ).rowcount
    if removed:
        conn.execute(
            "UPDATE keyword_stats s SET n = c.n, total_len = c.total_len"
            " FROM (SELECT count(*) AS n, coalesce(sum(doc_len), 0) AS total_len FROM keyword_docs"
            "       WHERE owner_id = %(o)s AND source = %(s)s) c"
            " WHERE s.owner_id = %(o)s AND s.source = %(s)s",
            {"o": owner, "s": source},
        )
        conn.execute("DELETE FROM keyword_stats WHERE owner_id = %s AND source = %s AND n = 0", (owner, source))
    return removed


def scrub_log(conn: psycopg.Connection, owner: str, item_ids: Sequence[str]) -> int:
    """Take removed items out of the owner's retrieval log; returns rows scrubbed. Each row keeps its scores,
    marks and features (what the hit rates and the tuner count) but loses the item's id (a random stand-in,
    so the build's history shows a deleted item), the line it was shown as and the feedback evidence (its
    words)."""
    ids = sorted(set(item_ids))
    if not ids:
        return 0
    return conn.execute(
        "UPDATE retrieval_candidates SET item_id = %s || gen_random_uuid()::text, line = NULL, evidence = NULL"
        " WHERE owner_id = %s AND item_id = ANY(%s)",
        (FORGOTTEN_PREFIX, owner, ids),
    ).rowcount
