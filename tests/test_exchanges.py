"""Exchange turns (retrieval/exchanges.py): only a turn of a two-party exchange lifts its neighbours and takes the
turn priors; a run of one party's statements (a persona list, extracted notes) is ranked as plain memories."""

from __future__ import annotations

import pytest

from memory_pipelines.retrieval import turns
from memory_pipelines.retrieval.exchanges import Exchanges, in_exchange, read_exchanges
from memory_pipelines.retrieval.filters import SearchFilters, where_clauses
from memory_pipelines.retrieval.search import search
from memory_pipelines.store.ingest import ingest_memory


def say(pool, embedder, content, speaker, session="s1", owner="alice"):
    return ingest_memory(pool, embedder, None, owner, content=content, content_type="insight", speaker=speaker,
                         session=session, ts=1_700_000_000, project_name="chat", conflict_threshold=0.999).id


def test_in_exchange_needs_every_neighbour_to_be_another_party():
    assert in_exchange("Mel", ["Caroline", "Caroline"])
    assert in_exchange("Mel", ["Caroline"])  # the first or last turn of a session
    assert in_exchange("Mel", [])  # alone in its session: nothing says otherwise
    assert not in_exchange("Bot", ["Bot", "User"])  # the last of a run of one party's statements
    assert not in_exchange("User", ["User"])
    assert in_exchange(None, ["User"]) and in_exchange("User", [None])  # an unknown speaker is another party


def test_read_exchanges_marks_the_turns_and_reads_the_top_ones_neighbours(pool, fake_embedder):
    persona = [say(pool, fake_embedder, text, "Bot", "p") for text in ("我叫张岩", "我有一条狗", "我超级爱吃肉")]
    chat = [say(pool, fake_embedder, text, who, "c") for text, who in
            (("Did you go to the concert?", "Caroline"), ("Yes, it was amazing!", "Mel"), ("Who played?", "Caroline"))]
    params: dict = {}
    clauses = where_clauses("memory", "alice", SearchFilters(sources=("memory",)).validated(), params)
    with pool.connection() as conn:
        ex = read_exchanges(conn, persona + chat, [chat[1], persona[1]], clauses, params)
        other = read_exchanges(conn, chat, chat, clauses, {**params, "owner": "bob"})
    assert ex.turns == set(chat) and ex.checked == 6 and not ex.conversation  # three of six: not most
    assert set(ex.adjacent) == {chat[1]}  # a top hit of the persona run has no exchange to lift
    assert sorted(str(row[0]) for row in ex.adjacent[chat[1]]) == sorted([chat[0], chat[2]])
    assert other.turns == set() and other.adjacent == {}  # another owner's search sees none of them


def test_read_exchanges_reads_the_named_speakers_own_turns_around_her_top_turns_only(pool, fake_embedder):
    chat = [say(pool, fake_embedder, text, who, "c") for text, who in (
        ("I went to London last spring.", "Tim"), ("Wow, how was it?", "John"),
        ("Great. Then we drove up to Edinburgh for the castle.", "Tim"), ("Sounds fun!", "John"),
        ("Next year I want to see Dublin.", "Tim"))]
    params: dict = {}
    clauses = where_clauses("memory", "alice", SearchFilters(sources=("memory",)).validated(), params)
    with pool.connection() as conn:
        named = read_exchanges(conn, chat, [chat[2], chat[1]], clauses, params, speaker="Tim")
        unnamed = read_exchanges(conn, chat, [chat[2], chat[1]], clauses, params)
        other = read_exchanges(conn, chat, [chat[2]], clauses, {**params, "owner": "bob"}, speaker="Tim")
    # Tim's top turn: his previous and next statement; John's top turn has none (he is not the one named).
    assert set(named.same_speaker) == {chat[2]}
    assert sorted(str(row[0]) for row in named.same_speaker[chat[2]]) == sorted([chat[0], chat[4]])
    # The other party's turns stay the neighbours, and which turns are exchange turns does not change.
    assert sorted(str(row[0]) for row in named.adjacent[chat[2]]) == sorted([chat[1], chat[3]])
    assert named.turns == unnamed.turns == set(chat)
    assert {k: [r[0] for r in rows] for k, rows in named.adjacent.items()} == {
        k: [r[0] for r in rows] for k, rows in unnamed.adjacent.items()}
    assert unnamed.same_speaker == {} and other.same_speaker == {} and other.turns == set()


def test_a_search_is_a_conversation_when_most_of_its_turns_are_exchange_turns():
    assert Exchanges(turns={"a", "b"}, checked=3).conversation
    assert not Exchanges(turns={"a"}, checked=2).conversation  # half is not most
    assert not Exchanges().conversation  # no conversational candidate


def test_weighed_outside_a_conversation_touches_only_memories_holding_an_exchange():
    class H:
        def __init__(self, id, text, extra):
            self.source, self.id, self.score, self.text, self.extra = "memory", id, 1.0, text, extra

    ranked = [H("fact", "我叫张岩", {"session": "p"}), H("turn", "Wow!", {"session": "c"}),
              H("whole", "User: I got a cat.\nAI: Lovely!", {"session": "d"})]
    out = {h.id: h.score for h in turns.weighed(ranked, conversation=False)}
    assert out["fact"] == 1.0 and out["turn"] == 1.0
    assert out["whole"] < 1.0  # a memory holding a whole exchange (MemoryBank's) is one in itself
    out = {h.id: h.score for h in turns.weighed(ranked)}
    assert out["fact"] == pytest.approx(turns.turn_prior("我叫张岩")) and out["turn"] < 1.0


def test_a_persona_list_is_ranked_without_lift_or_priors(pool, fake_embedder):
    """A run of one party's short statements: the hit lifts no neighbour and its shortness costs it nothing."""
    facts = [say(pool, fake_embedder, text, "Bot", "p") for text in
             ("I have a dog named Biscuit.", "My favourite food is pizza.", "I work in the IT department.")]
    hits = search(pool, fake_embedder, "alice", "favourite food pizza", limit=5).hits
    by_id = {h.id: h for h in hits}
    assert facts[1] in by_id
    assert not any(h.extra.get("neighbour_gain") for h in hits)
    assert "turn_prior" not in by_id[facts[1]].extra
    both = search(pool, fake_embedder, "alice", "favourite food pizza", limit=5, neighbours=False, turn_priors=False)
    assert [h.id for h in both.hits] == [h.id for h in hits]
