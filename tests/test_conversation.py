"""Conversation-aware memories (issue 12, item 3) against the real database: a turn is indexed with the one
before it, search lifts the neighbouring turns of a strong hit, within the owner and the filters; and evidence
fusion scores every candidate on both channels."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from memory_pipelines.infra.errors import ValidationError
from memory_pipelines.retrieval.fusion import evidence_fusion, weighted_fusion
from memory_pipelines.retrieval.neighbours import NEIGHBOUR_LIFT, lifted
from memory_pipelines.retrieval.search import SearchFilters, search
from memory_pipelines.store.ingest import ingest_memory
from memory_pipelines.store.read import get_memories

# Turns of one conversation; the answer turn (B) shares no word with the question.
A = "Did you finish the watercolour painting of the lighthouse for the harbour exhibition?"
B = "Yes! It took me three weekends and my kids helped choose the frame."
C = "Totally unrelated: the plumber comes on Tuesday to repair the kitchen sink."
D = "My cousin adopted a greyhound named Biscuit from the shelter."


def turn(pool, embedder, content, *, owner="alice", session="s1", speaker="Mel", ts=1_700_000_000, **kw):
    kw.setdefault("project_name", "chat")
    return ingest_memory(pool, embedder, None, owner, content=content, content_type="insight", speaker=speaker,
                         session=session, ts=ts, conflict_threshold=0.999, **kw)


def conversation(pool, embedder, owner="alice", session="s1", ts=1_700_000_000):
    ids = [turn(pool, embedder, text, owner=owner, session=session, speaker=who, ts=ts).id
           for text, who in ((A, "Caroline"), (B, "Mel"), (C, "Caroline"), (D, "Mel"))]
    return dict(zip("ABCD", ids, strict=True))


def test_a_turn_is_indexed_with_the_turn_before_it(pool, fake_embedder):
    ids = conversation(pool, fake_embedder)
    with pool.connection() as conn:
        rows = dict(conn.execute("SELECT id, context FROM memories WHERE owner_id = 'alice'").fetchall())
        turns = [r[0] for r in conn.execute(
            "SELECT id FROM memories WHERE owner_id = 'alice' ORDER BY turn").fetchall()]
    assert rows[ids["A"]] is None  # the first turn has nothing before it
    assert rows[ids["B"]] == f"Caroline: {A}"
    assert rows[ids["C"]] == f"Mel: {B}"
    assert turns == [ids[k] for k in "ABCD"]
    # The keyword channel finds B by a word only its predecessor holds.
    hits = search(pool, fake_embedder, "alice", "lighthouse watercolour", mode="keyword", limit=5).hits
    assert {ids["A"], ids["B"]} <= {h.id for h in hits}
    record = get_memories(pool, "alice", [ids["B"]])["memories"][0]
    assert record["session"] == "s1"
    # B's own fragment is indexed by its own words; one more fragment carries the context (sql/008).
    with pool.connection() as conn:
        frags = conn.execute(
            "SELECT f.with_context, f.content, f.content_hash = md5(mp_fragment_text(m.speaker, f.content,"
            " p.project_name, m.content_type, m.created_at, CASE WHEN f.with_context THEN m.context END)),"
            " f.embedding IS NOT NULL FROM fragments f JOIN memories m ON m.id = f.memory_id"
            " JOIN projects p ON p.id = m.project_id WHERE f.memory_id = %s ORDER BY f.chunk_index",
            (ids["B"],),
        ).fetchall()
        own_vec_is_memory_vec = conn.execute(
            "SELECT (m.avg_embedding <=> f.embedding) < 1e-6 FROM memories m JOIN fragments f ON f.memory_id = m.id"
            " AND NOT f.with_context WHERE m.id = %s", (ids["B"],)).fetchone()[0]
        first = conn.execute("SELECT count(*) FROM fragments WHERE memory_id = %s", (ids["A"],)).fetchone()[0]
    assert frags == [(False, B, True, True), (True, B, True, True)]
    assert own_vec_is_memory_vec
    assert first == 1  # no context, no context fragment


def test_hybrid_search_lifts_the_neighbouring_turns_of_a_strong_hit(pool, fake_embedder):
    ids = conversation(pool, fake_embedder)
    query = "harbour exhibition lighthouse painting"
    with_lift = search(pool, fake_embedder, "alice", query, limit=4).hits
    without = search(pool, fake_embedder, "alice", query, limit=4, neighbours=False).hits
    lifted_ids = {h.id for h in with_lift if h.extra.get("neighbour_gain")}
    assert ids["B"] in lifted_ids  # A's next turn
    score = {h.id: h.score for h in with_lift}
    base = {h.id: h.score for h in without}
    # B gains at least its share of A's score (C, B's next turn, may lift it too).
    assert score[ids["B"]] >= base.get(ids["B"], 0.0) + NEIGHBOUR_LIFT * base[ids["A"]] - 1e-9
    assert score[ids["A"]] >= base[ids["A"]]


def test_a_question_naming_a_speaker_lifts_only_her_turns(pool, fake_embedder):
    ids = conversation(pool, fake_embedder)
    about_mel = search(pool, fake_embedder, "alice", "Did Mel finish the harbour lighthouse painting?").hits
    assert any(h.id == ids["B"] and h.extra.get("neighbour_gain") for h in about_mel)  # Mel's answer to A
    about_caroline = search(pool, fake_embedder, "alice", "Did Caroline finish the harbour lighthouse painting?").hits
    lifted = {h.id for h in about_caroline if h.extra.get("neighbour_gain")}
    assert ids["B"] not in lifted and ids["D"] not in lifted  # Mel's turns: not whom the question is about
    unnamed = search(pool, fake_embedder, "alice", "Did she finish the harbour lighthouse painting?").hits
    assert any(h.id == ids["B"] and h.extra.get("neighbour_gain") for h in unnamed)


def test_neighbours_stay_within_the_owner_the_session_and_the_filters(pool, fake_embedder):
    conversation(pool, fake_embedder, owner="alice", session="s1")
    mallory = conversation(pool, fake_embedder, owner="mallory", session="s1")
    other = turn(pool, fake_embedder, "Yes and the frame was oak.", session="s2", speaker="Mel").id
    query = "harbour exhibition lighthouse painting"
    hits = search(pool, fake_embedder, "alice", query, limit=10).hits
    assert not set(mallory.values()) & {h.id for h in hits}  # another owner's turns, same session name
    assert all(h.id != other or not h.extra.get("neighbour_gain") for h in hits)
    # A neighbour written after the as-of time is not lifted into an earlier view.
    late = conversation(pool, fake_embedder, owner="bob", session="s9", ts=1_700_000_000)
    later = turn(pool, fake_embedder, "Absolutely, it won a ribbon.", owner="bob", session="s9",
                 ts=1_700_100_000).id
    as_of = datetime.fromtimestamp(1_700_050_000, UTC)
    hits = search(pool, fake_embedder, "bob", "Biscuit greyhound shelter cousin", limit=10,
                  filters=SearchFilters(as_of=as_of)).hits
    assert later not in {h.id for h in hits}
    assert late["D"] in {h.id for h in hits}


def test_session_is_validated_and_nothing_is_written(pool, fake_embedder):
    for bad in ("", "   ", "x" * 300, 7):
        with pytest.raises(ValidationError) as err:
            turn(pool, fake_embedder, A, session=bad)
        assert err.value.field == "session"
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 0


def test_a_memory_without_a_session_keeps_its_indexed_text(pool, fake_embedder):
    r = ingest_memory(pool, fake_embedder, None, "alice", content=A, content_type="insight", project_name="chat",
                      speaker="Caroline", ts=1_700_000_000)
    with pool.connection() as conn:
        row = conn.execute("SELECT session, turn, context FROM memories WHERE id = %s", (r.id,)).fetchone()
        text = conn.execute("SELECT mp_fragment_text('Caroline', %s, 'chat', 'insight', to_timestamp(1700000000))",
                            (A,)).fetchone()[0]
        hashed = conn.execute("SELECT content_hash FROM fragments WHERE memory_id = %s", (r.id,)).fetchone()[0]
        md5 = conn.execute("SELECT md5(%s)", (text,)).fetchone()[0]
    assert row == (None, None, None)
    assert hashed == md5 and text.startswith("Caroline: Did you finish")


@dataclass
class H:
    source: str
    id: str
    score: float
    semantic: float | None = None
    keyword: float | None = None
    keyword_evidence: float | None = None
    extra: dict = field(default_factory=dict)
    embedding: tuple | None = None


def test_lifted_adds_a_share_of_each_strong_neighbours_score():
    ranked = [H("memory", "a", 0.8), H("memory", "c", 0.5), H("task", "t", 0.45)]
    adjacent = {"a": [H("memory", "b", 0.0), H("memory", "c", 0.0)], "c": [H("memory", "a", 0.0)]}
    out = {h.id: h.score for h in lifted(ranked, adjacent, lambda h: 0.1, top=10, lift=0.5)}
    assert out == pytest.approx({"a": 0.8 + 0.25, "c": 0.5 + 0.4, "b": 0.1 + 0.4, "t": 0.45})
    assert lifted(ranked, {}, lambda h: 0.0) == ranked
    # Only the top `top` memory hits lift.
    out = {h.id: h.score for h in lifted(ranked, adjacent, lambda h: 0.1, top=1, lift=0.5)}
    assert "b" in out and out["a"] == pytest.approx(0.8)


def test_lifted_lifts_a_speakers_own_nearest_turns_by_their_own_share():
    ranked = [H("memory", "a", 0.8), H("memory", "c", 0.5)]
    own = {"a": [H("memory", "e", 0.0), H("memory", "c", 0.0)]}
    out = {h.id: h.score for h in lifted(ranked, {}, lambda h: 0.1, lift=0.5, same_speaker=own,
                                         same_speaker_lift=0.25)}
    assert out == pytest.approx({"a": 0.8, "c": 0.5 + 0.2, "e": 0.1 + 0.2})
    # Both kinds add up, each from the score before any lift.
    both = {h.id: h.score for h in lifted(ranked, {"c": [H("memory", "a", 0.0)]}, lambda h: 0.1, lift=0.5,
                                          same_speaker=own, same_speaker_lift=0.25)}
    assert both["a"] == pytest.approx(0.8 + 0.25) and both["c"] == pytest.approx(0.5 + 0.2)


def test_evidence_fusion_does_not_penalise_a_single_channel():
    sem = [H("memory", "x", 0.9), H("memory", "y", 0.5)]
    kw = [H("memory", "y", 0.1, keyword_evidence=0.2)]
    ev = {h.id: h.score for h in evidence_fusion(sem, kw)}
    assert ev == pytest.approx({"x": 0.54, "y": 0.34})
    old = {h.id: h.score for h in weighted_fusion(sem, kw)}
    assert old["x"] == pytest.approx(0.63)  # the spec's single-source × 0.7
    # A keyword-only item with no vector yet (not embedded) competes on its keyword score alone, both weights;
    # one with a vector the semantic channel scored nothing gets the keyword weight only.
    only_kw = evidence_fusion([], [H("memory", "z", 0.5)])
    assert only_kw[0].score == pytest.approx(0.5) and only_kw[0].keyword == 0.5
    with_vector = evidence_fusion([], [H("memory", "z", 0.5, embedding=(1.0, 0.0))])
    assert with_vector[0].score == pytest.approx(0.2)


def test_a_same_speaker_neighbour_neither_gives_context_nor_is_lifted(pool, fake_embedder):
    """MemoryBank-style memories (each a whole exchange, one speaker) stay independent."""
    first = turn(pool, fake_embedder, A, speaker="User").id
    second = turn(pool, fake_embedder, B, speaker="User").id
    with pool.connection() as conn:
        context = conn.execute("SELECT context FROM memories WHERE id = %s", (second,)).fetchone()[0]
        frags = conn.execute("SELECT count(*) FROM fragments WHERE memory_id = %s", (second,)).fetchone()[0]
    assert context is None and frags == 1
    hits = search(pool, fake_embedder, "alice", "harbour exhibition lighthouse painting", limit=5).hits
    assert hits[0].id == first
    assert not any(h.extra.get("neighbour_gain") for h in hits)
