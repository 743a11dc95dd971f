"""What a removed item leaves in derived tables, taken out: its keyword postings (with the stored BM25 statistics
kept equal to what a refresh would compute) and its rows in the retrieval log (scrubbed, counts kept)."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from ...index.keywords import STORED_DF_MIN

FORGOTTEN_PREFIX = "forgotten:"
"""A scrubbed log row's item id: this prefix and a random uuid (the build keeps its counts, not the item)."""


def unindex(conn: psycopg.Connection, source: str, owner: str, item_ids: Sequence[str]) -> int:
    """Delete the keyword documents (and postings) of `item_ids` of one keyword source; returns documents removed.

    The stored statistics (`keyword_stats`: documents and total length; `keyword_df`: terms in at least
    STORED_DF_MIN documents) count the documents their last refresh read: those indexed at or before
    `refreshed_at`. For those they are decremented, a term falling under the floor is dropped (it is counted
    live, as after a refresh) and an owner left with no documents loses her row: statistics that were exact stay
    exact, equal to a refresh's. A document (re)indexed since was not read by that refresh; the statistics were
    already behind the documents (`stale_stat_owners` reports the owner) and the next keyword pass rewrites them."""
    ids = sorted(set(item_ids))
    if not ids:
        return 0
    docs = conn.execute(
        "SELECT d.item_id, d.doc_len, coalesce(d.indexed_at <= s.refreshed_at, false) FROM keyword_docs d"
        " LEFT JOIN keyword_stats s ON s.owner_id = d.owner_id AND s.source = d.source"
        " WHERE d.source = %s AND d.owner_id = %s AND d.item_id = ANY(%s) ORDER BY d.item_id FOR UPDATE OF d",
        (source, owner, ids),
    ).fetchall()
    counted = [d[0] for d in docs if d[2]]
    if counted:
        params = {"s": source, "o": owner, "ids": counted,
                  "n": len(counted), "len": sum(int(d[1]) for d in docs if d[2])}
        touched = conn.execute(
            "UPDATE keyword_df x SET df = x.df - g.n"
            " FROM (SELECT keyword, count(*) AS n FROM keywords WHERE source = %(s)s AND item_id = ANY(%(ids)s)"
            "       GROUP BY keyword) g"
            " WHERE x.owner_id = %(o)s AND x.source = %(s)s AND x.keyword = g.keyword RETURNING x.keyword, x.df",
            params,
        ).fetchall()
        if fallen := [k for k, df in touched if df < STORED_DF_MIN]:
            conn.execute(
                "DELETE FROM keyword_df WHERE owner_id = %s AND source = %s AND keyword = ANY(%s)",
                (owner, source, fallen),
            )
        conn.execute(
            "UPDATE keyword_stats SET n = n - %(n)s, total_len = total_len - %(len)s"
            " WHERE owner_id = %(o)s AND source = %(s)s",
            params,
        )
        conn.execute("DELETE FROM keyword_stats WHERE owner_id = %(o)s AND source = %(s)s AND n <= 0", params)
    return conn.execute(
        "DELETE FROM keyword_docs WHERE source = %s AND owner_id = %s AND item_id = ANY(%s)", (source, owner, ids)
    ).rowcount


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
