"""The keyword table: term frequencies per item for BM25 search, refreshed for changed rows only.

`keyword_docs` holds one row per indexed item (its length and the content hash it was indexed at);
`keywords` one row per (item, term) with the term frequency and a TF-IDF weight. Rows whose content
changed since they were indexed are re-indexed (delete then insert); `full=True` re-indexes all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.copy import QueuedLibpqWriter
from psycopg_pool import ConnectionPool

from ..text.keywords import keyword_counts
from ..vocabulary import INDEXED, INDEXED_NAMES


@dataclass
class KeywordResult:
    source: str
    indexed: int = 0
    terms: int = 0
    removed: int = 0
    stats_refreshed: int = 0  # owners whose stored BM25 statistics were rewritten


def _stale_sql(source_name: str, full: bool) -> str:
    """Every active row of one source whose keywords are missing or older than its content (all when `full`),
    in id order: one query read through a cursor, sorted once (paging by id sorted the table once a page).
    The order makes a pass repeatable: a batch's impacts read the lengths of the batches before it."""
    source = INDEXED[source_name]
    stale = "" if full else " AND kd.content_hash IS DISTINCT FROM t.content_hash"
    return (
        f"SELECT t.id::text, t.owner_id, {source.text_sql}, t.content_hash FROM {source.from_sql}"
        f" LEFT JOIN keyword_docs kd ON kd.source = %(source)s AND kd.item_id = t.id::text"
        f" WHERE {source.active_sql}{stale} ORDER BY t.id::text"
    )


BM25_K1, BM25_B = 1.2, 0.75
QUEUED_COPY_MIN_ROWS = 20_000


def impact(tf: int, doc_len: int, avg_len: float) -> float:
    """A posting's BM25 term factor (idf apart): what the impact-ordered index sorts by."""
    return tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * doc_len / max(avg_len, 1.0)))


Totals = dict[str, list[float]]
"""Per owner: [sum of document lengths, documents] of the indexed documents of one source."""


def _average_lengths(
    conn: psycopg.Connection, source_name: str, docs: list[tuple], totals: Totals | None = None
) -> dict[str, float]:
    """Average document length per owner: the indexed documents plus this batch. With `totals` (kept by a
    bulk pass across its batches, already net of the documents this batch replaced) an owner's indexed
    documents are summed once, not once a batch. Without (an ingest's few rows) the owner's stored
    statistics stand for its indexed documents, as of their last refresh: summing them would read every
    document of a large owner on every write; they are counted only for an owner with no statistics yet."""
    bulk = totals is not None
    totals = {} if totals is None else totals
    missing = sorted({d[2] for d in docs} - totals.keys())
    if missing and not bulk:
        rows = conn.execute(
            "SELECT owner_id, total_len, n FROM keyword_stats WHERE source = %s AND owner_id = ANY(%s) AND n > 0",
            (source_name, missing),
        ).fetchall()
        totals.update({owner: [float(total), int(n)] for owner, total, n in rows})
        missing = [o for o in missing if o not in totals]
    if missing:
        rows = conn.execute(
            "SELECT owner_id, sum(doc_len), count(*) FROM keyword_docs WHERE source = %s AND owner_id = ANY(%s)"
            " GROUP BY owner_id",
            (source_name, missing),
        ).fetchall()
        totals.update({owner: [float(total), int(n)] for owner, total, n in rows})
    for d in docs:
        acc = totals.setdefault(d[2], [0.0, 0])
        acc[0] += d[3]
        acc[1] += 1
    return {owner: total / n for owner, (total, n) in totals.items() if n}


def index_rows(
    conn: psycopg.Connection, source_name: str, rows: list[tuple[str, str, str, str]], totals: Totals | None = None,
    counts: Sequence[Counter[str]] | None = None,
) -> int:
    """(Re)index the given (id, owner, text, hash) rows of one source; returns terms written. `totals`: the
    running per-owner lengths of a bulk pass (`_average_lengths`), kept current here. `counts`: the rows' term
    counts when the caller made them already (in a thread, while the previous batch was being written). Rows
    deleted since they were read are skipped; the others stay locked against deletion until the caller commits
    (a removal waits, then deletes these postings too)."""
    table = INDEXED[source_name]
    live = {r[0] for r in conn.execute(
        f"SELECT t.id::text FROM {table.table} t WHERE t.id = ANY(%s::{table.id_type}[]) FOR KEY SHARE",
        ([r[0] for r in rows],),
    )}
    if counts is not None:
        counts = [c for r, c in zip(rows, counts, strict=True) if r[0] in live]
    rows = [r for r in rows if r[0] in live]
    ids = [r[0] for r in rows]
    replaced = conn.execute(
        "DELETE FROM keyword_docs WHERE source = %s AND item_id = ANY(%s) RETURNING owner_id, doc_len",
        (source_name, ids),
    ).fetchall()
    if totals is not None:  # a bulk pass's running totals still count the documents just replaced
        for owner, doc_len in replaced:
            if owner in totals:
                totals[owner][0] -= doc_len
                totals[owner][1] -= 1
    docs, counted = [], []
    for (item_id, owner, _text, content_hash), counts_of in zip(
        rows, counts if counts is not None else (keyword_counts(r[2]) for r in rows), strict=True
    ):
        docs.append((source_name, item_id, owner, sum(counts_of.values()), content_hash))
        counted.append(counts_of)
    avg = _average_lengths(conn, source_name, docs, totals)
    terms = [
        (source_name, doc[1], doc[2], term, tf, impact(tf, doc[3], avg[doc[2]]))
        for doc, counts_of in zip(docs, counted, strict=True)
        for term, tf in counts_of.items()
    ]
    with conn.cursor() as cur:
        sql = "COPY keyword_docs (source, item_id, owner_id, doc_len, content_hash) FROM STDIN"
        with cur.copy(sql) as copy:
            for doc in docs:
                copy.write_row(doc)
        # Many postings: sent from a thread, so rows are formatted here while the server stores the ones before.
        writer = QueuedLibpqWriter(cur) if len(terms) > QUEUED_COPY_MIN_ROWS else None
        with cur.copy("COPY keywords (source, item_id, owner_id, keyword, tf, impact) FROM STDIN",
                      writer=writer) as copy:
            for term in terms:
                copy.write_row(term)
    return len(terms)


def remove_inactive(conn: psycopg.Connection, source_name: str) -> int:
    """Drop index rows of items that were deleted or deactivated."""
    source = INDEXED[source_name]
    cur = conn.execute(
        "DELETE FROM keyword_docs kd WHERE kd.source = %(source)s AND NOT EXISTS ("
        f" SELECT 1 FROM {source.from_sql} WHERE t.id::text = kd.item_id AND {source.active_sql})",
        {"source": source_name},
    )
    return cur.rowcount


def analyze_if_grown(conn: psycopg.Connection, written: dict[str, int]) -> list[str]:
    """ANALYZE each table that just took more rows (`written`: table -> rows) than autovacuum's threshold for an
    analyze (50 + 10 % of the table as last analyzed, or never analyzed); returns those analyzed. Statements
    that join what a bulk pass wrote come next, and autovacuum may not have run yet (nor even seen the writes:
    a backend reports them when idle): planned on the empty table's statistics, the weight refresh that follows a
    first keyword pass runs a nested loop for a minute instead of under a second."""
    due = []
    for table, rows in written.items():
        if rows <= 50:  # under the threshold of any table: no need to ask its size
            continue
        tuples = conn.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", (table,)).fetchone()
        if tuples is not None and rows > 50 + 0.1 * max(float(tuples[0]), 0.0):
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
            due.append(table)
    return due


def refresh_weights(conn: psycopg.Connection, source_name: str, owners: list[str] | None = None) -> None:
    """Recompute TF-IDF weights (sublinear tf × smoothed idf within the owner) for one source.

    Idf is per owner, so only the owners whose rows changed (`owners`) need it; None means all.
    """
    conn.execute(
        "WITH n AS (SELECT owner_id, count(*) AS n FROM keyword_docs WHERE source = %(s)s"
        "           AND (%(owners)s::text[] IS NULL OR owner_id = ANY(%(owners)s)) GROUP BY owner_id),"
        " df AS (SELECT owner_id, keyword, count(*) AS df FROM keywords WHERE source = %(s)s"
        "        AND (%(owners)s::text[] IS NULL OR owner_id = ANY(%(owners)s)) GROUP BY owner_id, keyword)"
        " UPDATE keywords k SET weight = (1 + ln(k.tf)) * (1 + ln((1 + n.n)::float / (1 + df.df)))"
        " FROM n, df WHERE k.source = %(s)s AND n.owner_id = k.owner_id"
        " AND df.owner_id = k.owner_id AND df.keyword = k.keyword",
        {"s": source_name, "owners": owners},
    )


STORED_DF_MIN = 50  # terms in fewer documents are counted live by a query (sql/004_keyword_stats.sql)


def refresh_stats(conn: psycopg.Connection, source_name: str, owners: list[str] | None = None) -> None:
    """Rewrite the stored BM25 statistics (document count, total length, common terms' df) of one source
    for `owners` (None: every owner)."""
    params = {"s": source_name, "owners": owners, "min_df": STORED_DF_MIN}
    scope = "source = %(s)s AND (%(owners)s::text[] IS NULL OR owner_id = ANY(%(owners)s))"
    conn.execute(f"DELETE FROM keyword_stats WHERE {scope}", params)
    conn.execute(f"DELETE FROM keyword_df WHERE {scope}", params)
    conn.execute(
        "INSERT INTO keyword_stats (owner_id, source, n, total_len)"
        f" SELECT owner_id, source, count(*), sum(doc_len) FROM keyword_docs WHERE {scope} GROUP BY 1, 2",
        params,
    )
    conn.execute(
        "INSERT INTO keyword_df (owner_id, source, keyword, df)"
        f" SELECT owner_id, source, keyword, count(*) FROM keywords WHERE {scope}"
        " GROUP BY 1, 2, 3 HAVING count(*) >= %(min_df)s",
        params,
    )


def stale_stat_owners(conn: psycopg.Connection, source_name: str) -> list[str]:
    """Owners whose stored statistics miss documents indexed since (by a refresh or an ingest) or
    count a different number of documents than are indexed."""
    rows = conn.execute(
        "SELECT d.owner_id FROM keyword_docs d LEFT JOIN keyword_stats s"
        " ON s.owner_id = d.owner_id AND s.source = d.source WHERE d.source = %(s)s"
        " GROUP BY d.owner_id, s.refreshed_at, s.n"
        " HAVING s.n IS NULL OR count(*) <> s.n OR max(d.indexed_at) > s.refreshed_at"
        " UNION SELECT s.owner_id FROM keyword_stats s WHERE s.source = %(s)s AND NOT EXISTS"
        " (SELECT 1 FROM keyword_docs d WHERE d.owner_id = s.owner_id AND d.source = s.source)",
        {"s": source_name},
    ).fetchall()
    return sorted(r[0] for r in rows)


def index_source(
    pool: ConnectionPool, source_name: str, *, full: bool = False, batch_size: int = 500, weights: bool = True
) -> KeywordResult:
    """Index every stale row of one source (all rows when `full`), batch by batch, each committed.

    One connection streams the stale rows (a server-side cursor over one snapshot); another writes each
    batch. Rows changed after the snapshot are indexed by their own write or the next pass."""
    result = KeywordResult(source=source_name)
    owners: set[str] = set()
    totals: Totals = {}
    with (
        pool.connection() as reader,
        pool.connection() as writer,
        reader.transaction(),
        reader.cursor(name=f"keyword_stale_{source_name}") as cur,
    ):
        cur.itersize = batch_size
        cur.execute(_stale_sql(source_name, full), {"source": source_name})
        while rows := cur.fetchmany(batch_size):
            with writer.transaction():
                result.terms += index_rows(writer, source_name, rows, totals)
            result.indexed += len(rows)
            owners.update(r[1] for r in rows)
    with pool.connection() as conn, conn.transaction():
        analyze_if_grown(conn, {"keywords": result.terms, "keyword_docs": result.indexed})
        result.removed = remove_inactive(conn, source_name)
        stale = stale_stat_owners(conn, source_name)
        if stale:
            refresh_stats(conn, source_name, stale)
        result.stats_refreshed = len(stale)
        if weights and (result.indexed or result.removed):
            refresh_weights(conn, source_name, None if result.removed else sorted(owners))
    return result


def index_all(pool: ConnectionPool, *, full: bool = False) -> list[KeywordResult]:
    """Refresh the keyword table of every source."""
    return [index_source(pool, name, full=full) for name in INDEXED_NAMES]


def keyword_stale(conn: psycopg.Connection, source_name: str) -> tuple[int, int]:
    """(active rows not (re)indexed since they last changed, active rows) of one source."""
    source = INDEXED[source_name]
    stale, active = conn.execute(
        "SELECT count(*) FILTER (WHERE kd.content_hash IS DISTINCT FROM t.content_hash), count(*)"
        f" FROM {source.from_sql} LEFT JOIN keyword_docs kd ON kd.source = %(s)s AND kd.item_id = t.id::text"
        f" WHERE {source.active_sql}",
        {"s": source_name},
    ).fetchone()
    return int(stale), int(active)


def keyword_staleness(conn: psycopg.Connection, source_name: str) -> dict[str, int]:
    """How far the keyword table of one source lags its rows: active rows not (re)indexed since they last
    changed, index entries of rows deleted or deactivated, and rows indexed."""
    source = INDEXED[source_name]
    stale, active = keyword_stale(conn, source_name)
    orphaned = conn.execute(
        "SELECT count(*) FROM keyword_docs kd WHERE kd.source = %(s)s AND NOT EXISTS ("
        f" SELECT 1 FROM {source.from_sql} WHERE t.id::text = kd.item_id AND {source.active_sql})",
        {"s": source_name},
    ).fetchone()[0]
    return {"stale": stale, "orphaned": int(orphaned), "active": active}
