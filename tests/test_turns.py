"""Turn priors (retrieval/turns.py): a conversational turn that asks, or says little, scores lower."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from memory_pipelines.retrieval import turns
from memory_pipelines.retrieval.search import search
from memory_pipelines.retrieval.turns import asks, spoken, turn_prior, weighed
from memory_pipelines.store.ingest import ingest_memory

LONG = ("I signed up for a pottery class yesterday and it felt like therapy, letting me express myself and get "
        "creative with clay for three whole hours on a Saturday morning, with my kids watching from the window.")


def test_spoken_drops_trailing_attachment_notes_only():
    assert spoken("Here's my latest one. [shares a photo of a sunset painting]") == "Here's my latest one."
    assert spoken("Look [a note] here.") == "Look [a note] here."
    assert spoken("  [shares a photo]  ") == ""


@pytest.mark.parametrize(("text", "asking"), [
    ("Wow, what a fun moment! What's the band?", True),
    ("Did you see it? [shares a photo of a band]", True),
    ("He asked \u201cwhy?\u201d", True),
    ("你去过那家店吗？", True),
    ("What did you think? I loved it.", False),
    ("Yes! It took three weekends.", False),
])
def test_a_turn_asks_when_its_spoken_words_end_with_a_question_mark(text, asking):
    assert asks(spoken(text)) is asking


def test_turn_prior_of_questions_short_turns_and_exchanges():
    assert turn_prior(LONG) == 1.0
    assert turn_prior(LONG + " Have you tried it?") == pytest.approx(turns.QUESTION_FACTOR)
    short = "Wow, that's amazing!"  # 20 characters: 5 estimated tokens
    assert turn_prior(short) == pytest.approx((5 / turns.FULL_TOKENS) ** turns.SHORT_EXPONENT)
    assert turn_prior(short) < turn_prior("Wow, that's amazing! We went camping by the lake last weekend.") < 1.0
    # A stored exchange ends with the reply's question, which says nothing of what the exchange holds.
    exchange = "User: " + LONG + "\nAI: That sounds lovely. Will you go again next week?"
    assert turn_prior(exchange) == 1.0
    # Chinese counts a character a token: 60 characters is a full turn.
    assert turn_prior("我" * 60) == 1.0 and turn_prior("我" * 60 + "？") == pytest.approx(turns.QUESTION_FACTOR)


@dataclass
class H:
    source: str
    id: str
    score: float
    text: str
    extra: dict = field(default_factory=dict)


def test_weighed_touches_only_conversational_memories_and_resorts():
    ranked = [
        H("memory", "q", 1.0, LONG + " Right?", {"session": "s1"}),
        H("memory", "s", 0.9, LONG, {"session": "s1"}),
        H("memory", "note", 0.8, "Short note?", {}),  # no session: not a turn
        H("learning", "l", 0.7, "Why?", {"session": "s1"}),
    ]
    out = weighed(ranked)
    assert [h.id for h in out] == ["s", "note", "l", "q"]
    q = next(h for h in out if h.id == "q")
    assert q.score == pytest.approx(turns.QUESTION_FACTOR) and q.extra["turn_prior"] == turns.QUESTION_FACTOR
    assert ranked[0].score == 1.0  # pure: the input is not changed


def test_hybrid_search_ranks_the_answer_above_the_question_that_matches_better(pool, fake_embedder):
    def turn(text, speaker, session):
        return ingest_memory(pool, fake_embedder, None, "alice", content=text, content_type="insight",
                             speaker=speaker, session=session, ts=1_700_000_000, project_name="chat",
                             conflict_threshold=0.999).id

    answer = turn(LONG, "Melanie", "s1")
    asked = turn("Which pottery class did you sign up for?", "Caroline", "s2")  # a later talk
    query = "Which pottery class did Melanie sign up for?"
    with_priors = [h.id for h in search(pool, fake_embedder, "alice", query, limit=5).hits]
    without = [h.id for h in search(pool, fake_embedder, "alice", query, limit=5, turn_priors=False).hits]
    assert {asked, answer} <= set(with_priors) and {asked, answer} <= set(without)
    assert without.index(asked) < without.index(answer)  # the question shares the query's words and shape
    assert with_priors.index(answer) < with_priors.index(asked)
