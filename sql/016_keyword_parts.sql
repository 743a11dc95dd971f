-- 016: Chinese keyword terms include their parts now (text/keywords.py `keyword_terms`): the search-mode
-- sub-words of a long word (篮球比赛 also indexes 篮球 and 比赛) and one-character words that carry content
-- (我养了一只猫 indexes 猫, which it did not).
--
-- As in 011, every entry's hash is made to differ from its row's, so every row is pending for the keyword
-- refresh (`memory-pipelines embed`, the keyword assets in Dagster; `status` counts them), which re-indexes it
-- with the new terms. Until then a query still matches every entry on the whole words it was indexed with.
-- English-only entries come out of the refresh unchanged. Embeddings are untouched.

UPDATE keyword_docs SET content_hash = 'pre-parts:' || content_hash;
