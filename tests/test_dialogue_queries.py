"""A query that is a dialogue finds a memory its last turn does not name: the topic named turns earlier still counts
(text/focus.py pools every turn's terms, weighted by recency), against the real database. A last turn that names
something the memory holds is what the dialogue asks about now, and leads (tests/test_focus.py)."""

from __future__ import annotations

from memory_pipelines.retrieval.search import search
from memory_pipelines.store.ingest import ingest_memory

MAGIC = "Rehearsal notes: the card magic show for the New Year's Eve party needs a second deck and a silk scarf."
OTHERS = (
    "Booked a long walk by the river with my sister for Sunday morning.",
    "The plumber comes on Tuesday to repair the kitchen sink.",
    "Quarterly budget review moved to next Thursday afternoon.",
)
DIALOGUE = (
    "User: I'm performing a card magic show at the New Year's Eve party!\n"
    "AI: That sounds wonderful. What will you do?\n"
    "User: Mostly tricks with a deck and a silk scarf.\n"
    "AI: Great choice, those look impressive on stage.\n"
    "User: I'm really looking forward to that night, I want to make it special!"
)


def test_a_dialogue_finds_the_memory_named_only_in_an_earlier_turn(pool, fake_embedder):
    ids = {}
    for text in (MAGIC, *OTHERS):
        ids[text] = ingest_memory(pool, fake_embedder, None, "alice", content=text, content_type="insight",
                                  ts=1_700_000_000, project_name="notes", conflict_threshold=0.999).id
    last_turn = DIALOGUE.splitlines()[-1]
    alone = search(pool, fake_embedder, "alice", last_turn, mode="keyword", limit=5).hits
    assert ids[MAGIC] not in [h.id for h in alone]  # the last turn names nothing the memory holds
    by_words = search(pool, fake_embedder, "alice", DIALOGUE, mode="keyword", limit=5).hits
    assert by_words[0].id == ids[MAGIC]  # the earlier turns' words, pooled with the last turn's
    hits = [h.id for h in search(pool, fake_embedder, "alice", DIALOGUE, limit=2).hits]
    assert ids[MAGIC] in hits
    # Another owner's memory of the same words is never found.
    ingest_memory(pool, fake_embedder, None, "bob", content=MAGIC + " (bob)", content_type="insight",
                  ts=1_700_000_000, project_name="notes", conflict_threshold=0.999)
    assert all(h.id in ids.values() for h in search(pool, fake_embedder, "alice", DIALOGUE, limit=5).hits)
