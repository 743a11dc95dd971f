-- 004: stored BM25 statistics, so a keyword query reads a few rows instead of counting postings.
-- `keyword_stats` holds each owner's document count and total length per source; `keyword_df` the
-- document frequency of each term held by at least 50 documents (rarer terms are cheap to count live).
-- Both are rewritten for the owners a keyword refresh touched; a term or owner indexed since the last
-- refresh (e.g. by an ingest) is counted live, so a new term never lacks its statistics.
CREATE TABLE keyword_stats (
    owner_id     text NOT NULL,
    source       text NOT NULL,
    n            integer NOT NULL,
    total_len    bigint NOT NULL,
    refreshed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, source)
);

CREATE TABLE keyword_df (
    owner_id text NOT NULL,
    source   text NOT NULL,
    keyword  text NOT NULL,
    df       integer NOT NULL,
    PRIMARY KEY (owner_id, source, keyword)
);

INSERT INTO keyword_stats (owner_id, source, n, total_len)
SELECT owner_id, source, count(*), sum(doc_len) FROM keyword_docs GROUP BY owner_id, source;

INSERT INTO keyword_df (owner_id, source, keyword, df)
SELECT owner_id, source, keyword, count(*) FROM keywords GROUP BY owner_id, source, keyword HAVING count(*) >= 50;
