-- 009: what a learned ranker sees of each logged candidate.
--
-- retrieval_candidates.features  a compact JSON object written with every scored candidate of a build
--                                (context/features.py): the fused search score, each channel's calibrated
--                                score (semantic, keyword, keyword_evidence) and rank within its retrieval
--                                (rank_semantic, rank_keyword: 1-based, null when the channel did not find it),
--                                neighbour_gain (the lift a neighbouring strong hit gave it, 0 if none),
--                                same_language (query and item in the same language), source and age_days.
--                                The tuner fits the ranker on it (tuning/ranker.py); the relevance floors can be
--                                read against it. Null for builds logged before this migration.

ALTER TABLE retrieval_candidates ADD COLUMN IF NOT EXISTS features jsonb;
