"""A question that names one of the conversation's speakers (retrieval/speakers.py): the semantic channel embeds
it without the name, and the named speaker's turns score SPEAKER_BOOST more, as a preference, not a filter."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from memory_pipelines.retrieval import neighbours
from memory_pipelines.retrieval.neighbours import SAME_SPEAKER_LIFT
from memory_pipelines.retrieval.search import search
from memory_pipelines.retrieval.speakers import SPEAKER_BOOST, boosted, named_speaker, without_speaker
from memory_pipelines.store.ingest import ingest_memory


def test_named_speaker_needs_exactly_one_of_several_speakers():
    speakers = {"Nate", "Joanna", None}
    assert named_speaker("What video games does Nate play?", speakers) == "Nate"
    assert named_speaker("What is Joanna's favourite movie?", speakers) == "Joanna"
    assert named_speaker("Did Nate and Joanna both go hiking?", speakers) is None  # several named
    assert named_speaker("What games are popular?", speakers) is None
    assert named_speaker("Which games does Natel play?", speakers) is None  # whole words only
    assert named_speaker("what does nate play?", speakers) is None  # a name as written
    # One speaker (MemoryBank: every memory is "User"): the speaker tells no candidate apart.
    assert named_speaker("What did the User say about User settings?", {"User"}) is None


def test_a_speaker_prefix_of_a_dialogue_line_names_no_one():
    speakers = {"User", "Assistant", "Caroline", "Mel"}
    assert named_speaker("User: find me a WhatsApp tool for voice notes", speakers) is None
    assert named_speaker("User: hi\nAssistant: hello\nUser: what did Mel paint?", speakers) == "Mel"
    assert named_speaker("Caroline：Mel, did you paint it?", speakers) == "Mel"
    assert named_speaker("What did Caroline say about it: the lake?", speakers) == "Caroline"  # not a prefix


def test_without_speaker_takes_out_the_name_and_its_possessive():
    assert without_speaker("What video games does Nate play?", "Nate") == "What video games does play?"
    assert without_speaker("What is Caroline's identity?", "Caroline") == "What is identity?"
    assert without_speaker("What is Caroline’s job?", "Caroline") == "What is job?"
    assert without_speaker("Caroline?", "Caroline") == "Caroline?"  # nothing else left: the question as is


@dataclass
class H:
    id: str
    score: float
    source: str = "memory"
    extra: dict = field(default_factory=dict)


def test_boosted_prefers_the_named_speaker_without_filtering():
    ranked = [H("other-strong", 0.60, extra={"speaker": "Tim"}), H("own", 0.50, extra={"speaker": "John"}),
              H("other-weak", 0.45, extra={"speaker": "Tim"}), H("task", 0.44, source="task")]
    out = boosted(ranked, "John")
    assert [h.id for h in out] == ["other-strong", "own", "other-weak", "task"]  # a clear margin stands
    assert out[1].score == pytest.approx(0.50 * (1 + SPEAKER_BOOST))
    close = boosted([H("other", 0.52, extra={"speaker": "Tim"}), H("own", 0.50, extra={"speaker": "John"})],
                    "John")
    assert [h.id for h in close] == ["own", "other"]  # a close call goes to the named speaker
    assert ranked[1].score == 0.50  # pure


class SpyEmbedder:
    """The fake embedder, recording the query texts it embeds."""

    def __init__(self, inner):
        self.inner, self.queries = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def embed_query(self, text, scope=""):
        self.queries.append(text)
        return self.inner.embed_query(text, scope)


def test_hybrid_search_embeds_the_question_without_the_named_speaker(pool, fake_embedder):
    def turn(text, speaker):
        return ingest_memory(pool, fake_embedder, None, "alice", content=text, content_type="insight",
                             speaker=speaker, session="s1", ts=1_700_000_000, project_name="chat",
                             conflict_threshold=0.999).id

    own = turn("I play chess online every evening with my cousin.", "Nate")
    other = turn("Nate, do you still play chess with your cousin?", "Joanna")
    spy = SpyEmbedder(fake_embedder)
    query = "Which games does Nate play?"
    with_speakers = search(pool, spy, "alice", query, limit=5).hits
    assert spy.queries == [query, "Which games does play?"]
    spy.queries.clear()
    without = search(pool, spy, "alice", query, limit=5, speakers=False).hits
    assert spy.queries == [query]
    score, base = {h.id: h.score for h in with_speakers}, {h.id: h.score for h in without}
    assert {own, other} <= score.keys() and {own, other} <= base.keys()
    # Nate's own turn is preferred; the other party's keeps its rank among the rest, and is still found.
    assert score[own] / score[other] > base[own] / base[other]
    # The keyword channel still reads the question as written.
    assert search(pool, spy, "alice", query, mode="keyword", limit=5).hits


def test_a_named_speakers_top_turn_lifts_her_next_statement_in_the_session(pool, fake_embedder, monkeypatch):
    def turn(text, speaker):
        return ingest_memory(pool, fake_embedder, None, "alice", content=text, content_type="insight",
                             speaker=speaker, session="s1", ts=1_700_000_000, project_name="chat",
                             conflict_threshold=0.999).id

    london = turn("I went to London last spring for the book fair.", "Tim")
    turn("Wow, how was it?", "John")
    castle = turn("We drove up north afterwards and walked around the old castle.", "Tim")
    query = "Which cities has Tim visited? London?"
    hits = {h.id: h for h in search(pool, fake_embedder, "alice", query, limit=5).hits}
    monkeypatch.setattr(neighbours, "SAME_SPEAKER_LIFT", 0.0)
    other_party_only = {h.id: h for h in search(pool, fake_embedder, "alice", query, limit=5).hits}
    assert london in hits and castle in hits and castle in other_party_only
    # Beyond what John's turn between them gives it, Tim's next statement gains a share of his matching turn's.
    gained = hits[castle].extra["neighbour_gain"] - other_party_only[castle].extra["neighbour_gain"]
    assert 0 < gained < SAME_SPEAKER_LIFT * 2 * hits[london].score  # a share of its fused score, before the priors


def test_only_the_memory_source_is_searched_again_without_the_name(pool, fake_embedder):
    from memory_pipelines.index.keywords import index_all
    from memory_pipelines.index.vectors import embed_all
    from tests.factories import add_task

    for text, speaker in (("I play chess online every evening.", "Nate"), ("Nate, do you play chess?", "Joanna")):
        ingest_memory(pool, fake_embedder, None, "alice", content=text, content_type="insight", speaker=speaker,
                      session="s1", ts=1_700_000_000, project_name="chat", conflict_threshold=0.999)
    with pool.connection() as conn:
        task = add_task(conn, "alice", "Chess club sign-up for Nate", "book a table for the chess evening")
    embed_all(pool, fake_embedder)
    index_all(pool)
    query = "Which games does Nate play?"
    spy = SpyEmbedder(fake_embedder)
    hits = search(pool, spy, "alice", query, limit=10).hits
    assert spy.queries == [query, "Which games does play?"]
    # The task has no speaker: it keeps its semantic score from the question as written.
    by_id = {h.id: h for h in hits}
    plain = {h.id: h for h in search(pool, fake_embedder, "alice", query, limit=10, speakers=False).hits}
    assert task in by_id and by_id[task].semantic == pytest.approx(plain[task].semantic)
    memory = [h for h in hits if h.source == "memory"]
    assert memory and all(h.semantic != pytest.approx(plain[h.id].semantic) for h in memory if h.id in plain)


def test_a_speaker_seen_before_starts_the_rerun_early_with_the_same_hits(pool, fake_embedder, monkeypatch):
    """Once an owner's candidates have shown her speakers, a question naming one of them starts its re-run without
    the name beside the channels; the hits are those of the re-run after them, and a name the candidates do not
    bear leaves the early run unused."""
    from memory_pipelines.retrieval import search as search_module

    for text, speaker in (("I play chess online every evening.", "Nate"), ("Nate, do you play chess?", "Joanna"),
                          ("Joanna paints landscapes on weekends.", "Joanna")):
        ingest_memory(pool, fake_embedder, None, "alice", content=text, content_type="insight", speaker=speaker,
                      session="s1", ts=1_700_000_000, project_name="chat", conflict_threshold=0.999)
    search_module._speakers_seen.clear()
    started: list[str | None] = []
    start = search_module._start_rerun

    def spied(*args):  # records which speaker each search started early, then starts it
        early = start(*args)
        started.append(early.speaker if early else None)
        return early

    monkeypatch.setattr(search_module, "_start_rerun", spied)
    query = "Which games does Nate play?"
    spy = SpyEmbedder(fake_embedder)
    after = [(h.id, h.score) for h in search(pool, spy, "alice", query, limit=5).hits]  # no speakers seen yet
    assert started == [None] and spy.queries == [query, "Which games does play?"]
    spy.queries.clear()
    early = [(h.id, h.score) for h in search(pool, spy, "alice", query, limit=5).hits]
    assert started[-1] == "Nate" and spy.queries == [query, "Which games does play?"]
    assert early == after
    # Seen before, but not among this owner's candidates now: the early run is left unused.
    search_module._speakers_seen.put((pool.conninfo, "alice"), frozenset({"Nate", "Joanna", "Zed"}), 60)
    spy.queries.clear()
    plain = [(h.id, h.score) for h in search(pool, spy, "alice", "What does Zed paint?", limit=5).hits]
    assert started[-1] == "Zed" and "What does paint?" in spy.queries
    search_module._speakers_seen.clear()
    fresh = search(pool, fake_embedder, "alice", "What does Zed paint?", limit=5).hits
    assert plain == [(h.id, h.score) for h in fresh]
