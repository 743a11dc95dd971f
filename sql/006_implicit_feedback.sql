-- 006: implicit feedback. An agent posts what it finally produced for one context build; the injected items it
-- demonstrably used (semantic and lexical overlap above context/implicit.IMPLICIT_THRESHOLD) are marked used.
--
-- retrieval_candidates.line      the block line the agent was shown (what implicit feedback compares with);
--                                null for profile goals and for builds logged before this migration
-- retrieval_candidates.used_by   who said `used`: 'explicit' (POST /feedback: used or not) or 'implicit'
--                                (POST /feedback/implicit: used); null when nobody said
-- retrieval_candidates.evidence  the implicit decision's evidence: semantic and lexical scores, matched terms,
--                                threshold; kept for every scored item, used or not
-- retrievals.implicit_at         when implicit feedback was first recorded (a second post changes nothing)
--
-- Explicit feedback wins: explicit after implicit overrides the marks; implicit after explicit marks nothing.
-- Existing explicit marks (feedback_at set) become used_by = 'explicit'.

ALTER TABLE retrieval_candidates
    ADD COLUMN line     text,
    ADD COLUMN used_by  text CHECK (used_by IN ('explicit', 'implicit')),
    ADD COLUMN evidence jsonb;

ALTER TABLE retrievals ADD COLUMN implicit_at timestamptz;

UPDATE retrieval_candidates c SET used_by = 'explicit'
  FROM retrievals r
 WHERE r.id = c.retrieval_id AND r.feedback_at IS NOT NULL AND c.injected;
