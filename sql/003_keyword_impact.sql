-- 003: impact-ordered postings for keyword search at scale.
-- `impact` is a posting's BM25 term factor, tf·(k1+1) / (tf + k1·(1 − b + b·len/avglen)) with k1 = 1.2,
-- b = 0.75 and the owner's average document length when it was indexed. An index ordered by impact lets a
-- query read only the best postings of each term instead of every posting of a common one.
ALTER TABLE keywords ADD COLUMN impact real NOT NULL DEFAULT 0;

UPDATE keywords k
SET impact = k.tf * 2.2 / (k.tf + 1.2 * (0.25 + 0.75 * d.doc_len / greatest(a.avglen, 1)))
FROM keyword_docs d,
     (SELECT owner_id, source, avg(doc_len)::float AS avglen FROM keyword_docs GROUP BY owner_id, source) a
WHERE d.source = k.source AND d.item_id = k.item_id AND a.owner_id = k.owner_id AND a.source = k.source;

CREATE INDEX keywords_owner_term_impact ON keywords (owner_id, source, keyword, impact DESC);
