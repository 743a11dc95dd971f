-- 011: keyword terms are English stems now (text/keywords.py: "painted" and "paintings" are both "paint").
--
-- Every keyword entry was made with the old terms, which a stemmed query no longer matches for most words
-- with an ending. Each entry's hash is made to differ from its row's, so every row is pending for the keyword
-- refresh (`memory-pipelines embed`, the keyword assets in Dagster; `status` counts them): the refresh re-indexes
-- it (delete then insert) with the new terms. Until then a stemmed query still matches every entry whose words
-- had no ending to strip. Embeddings are untouched.

UPDATE keyword_docs SET content_hash = 'pre-stem:' || content_hash;
