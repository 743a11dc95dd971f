-- 015: one index fewer on the keyword postings.
--
-- keywords_owner_keyword (owner_id, keyword, source) held the same columns as the covering postings index
-- (owner_id, source, keyword, impact DESC) INCLUDE (item_id, tf), in another order. Every posting written
-- paid for both (about 40 postings a learning); the TF-IDF weight refresh, its only reader, joins by hash
-- on fresh statistics (index/keywords.py analyzes a grown table before it), and reads by the postings index
-- when planned as a nested loop.

DROP INDEX IF EXISTS keywords_owner_keyword;
