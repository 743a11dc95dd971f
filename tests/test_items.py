"""Writing tasks, learnings, capabilities, goals and events (store/items.py) against a real PostgreSQL: the write
contract, upserts by key, keyword search at once, embedding left pending and done by the worker's pass, partial
updates, deactivation, owner isolation, bad input that writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_pipelines.index.vectors import embed_pending_items
from memory_pipelines.infra.errors import ValidationError
from memory_pipelines.retrieval.search import search
from memory_pipelines.store.items import ItemError, update_item, validate_item, write_items
from memory_pipelines.vocabulary import (
    EVENT_TYPES,
    MAX_ITEM_KEY,
    MAX_ITEM_TEXT,
    MAX_TITLE,
    WRITABLE_SOURCES,
    WRITE_CONTRACTS,
    WRITE_TABLES,
)

ONE = {
    "task": {"key": "T-1", "title": "Rotate the zebrafish certificates", "description": "before they expire",
             "task_type": "dev", "status": "in_progress", "project": "infra", "metadata": {"ticket": 7}},
    "learning": {"key": "L-1", "title": "Marmalade timeouts come from the pool", "content": "raise pool size",
                 "task_type": "dev", "failure_class": "TIMEOUT", "trigger_event": "task_failed",
                 "category": "failure_pattern"},
    "capability": {"key": "C-1", "name": "Translate quokka manuals", "description": "English to German"},
    "goal": {"key": "G-1", "title": "Ship the narwhal release", "status": "in_progress", "priority": 1,
             "progress": 40},
    "event": {"key": "E-1", "type": "task_failed", "payload": {"task": "deploy", "error": "axolotl gateway 502"}},
}
WORD = {"task": "zebrafish", "learning": "marmalade", "capability": "quokka", "event": "axolotl"}


def _row(pool, source: str, item_id: str) -> dict:
    with pool.connection() as conn:
        cur = conn.execute(f"SELECT * FROM {WRITE_TABLES[source]} WHERE id = %s", (item_id,))
        names = [d.name for d in cur.description]
        return dict(zip(names, cur.fetchone(), strict=True))


def _count(pool, table: str) -> int:
    with pool.connection() as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def _keyword_ids(pool, embedder, owner: str, source: str, word: str) -> list[str]:
    hits = search(pool, embedder, owner, word, mode="keyword", limit=10).hits if source != "event" else \
        _event_hits(pool, embedder, owner, word)
    return [h.id for h in hits if h.source == source]


def _event_hits(pool, embedder, owner, word):
    from memory_pipelines.retrieval.search import SearchFilters

    return search(pool, embedder, owner, word, mode="keyword", filters=SearchFilters(sources=("event",)),
                  limit=10).hits


# -- the contract ----------------------------------------------------------------------------------------------

def test_every_writable_source_has_a_contract_whose_enums_are_the_schema_checks(pool):
    assert tuple(WRITE_CONTRACTS) == WRITABLE_SOURCES
    with pool.connection() as conn:
        for source, specs in WRITE_CONTRACTS.items():
            assert [s.name for s in specs][-3:] == ["key", "at", "active"]
            columns = {r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s", (WRITE_TABLES[source],))}
            assert {s.db_column for s in specs} <= columns, source
            for spec in specs:
                if spec.kind != "enum":
                    continue
                for value in spec.choices:  # every choice is accepted by the table's CHECK ...
                    conn.execute(f"SELECT 1 WHERE %s::text IN ({_check_values(conn, source, spec.db_column)})",
                                 (value,))
                assert set(spec.choices) == set(_check_list(conn, source, spec.db_column)), (source, spec.name)


def _check_list(conn, source: str, column: str) -> list[str]:
    definition = conn.execute(
        "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c WHERE c.conrelid = %s::regclass AND c.contype = 'c'"
        " AND pg_get_constraintdef(c.oid) LIKE %s", (WRITE_TABLES[source], f"%({column} = ANY%")).fetchone()[0]
    return [part.split("'")[1] for part in definition.split("ARRAY[")[1].split(",")]


def _check_values(conn, source: str, column: str) -> str:
    return ", ".join(f"'{v}'" for v in _check_list(conn, source, column))


def test_the_event_indexes_of_the_migration_read_the_vocabulary_event_types(pool):
    with pool.connection() as conn:
        for index in ("events_live", "events_unembedded"):
            definition = conn.execute("SELECT pg_get_indexdef(%s::regclass)", (index,)).fetchone()[0]
            assert all(f"'{t}'" in definition for t in EVENT_TYPES), index


def test_validate_item_fills_defaults_strips_and_parses_times():
    now = datetime(2025, 6, 1, tzinfo=UTC)
    item = validate_item("task", {"title": "  Fix it  ", "at": "2025-05-01T10:00:00Z"}, now=now)
    assert item["title"] == "Fix it" and item["status"] == "pending" and item["description"] == ""
    assert item["metadata"] == {} and item["active"] is True and item["key"] is None and item["task_type"] is None
    assert item["at"] == datetime(2025, 5, 1, 10, tzinfo=UTC)
    assert validate_item("goal", {"title": "g", "at": 1_700_000_000}, now=now)["at"] == \
        datetime.fromtimestamp(1_700_000_000, UTC)
    assert validate_item("goal", {"title": "g", "at": "2024-01-02"}, now=now)["at"] == datetime(2024, 1, 2, tzinfo=UTC)
    assert validate_item("task", {"status": "failed"}, partial=True) == {"status": "failed"}
    assert validate_item("learning", {"task_type": None}, partial=True) == {"task_type": None}


@pytest.mark.parametrize(("source", "raw", "field", "words"), [
    ("task", {"title": "t", "colour": "red"}, "colour", "not a field of a task"),
    ("event", {"type": "deploy", "event_type": "deploy"}, "event_type", "not a field of an event"),
    ("task", {"title": "t", "status": "done"}, "status", "must be one of"),
    ("task", {"title": "   "}, "title", "must not be empty"),
    ("task", {"title": "\u200b\ufeff \u0001"}, "title", "must not be empty"),  # shows nothing
    ("capability", {"name": "\u2060"}, "name", "must not be empty"),
    ("task", {"description": "no title"}, "title", "is required"),
    ("task", {"title": 5}, "title", "must be a string"),
    ("task", {"title": "t", "metadata": [1]}, "metadata", "JSON object"),
    ("event", {"type": "task_failed", "payload": "boom"}, "payload", "JSON object"),
    ("event", {"type": "Task Failed", "payload": {}}, "type", "must match"),
    ("event", {"type": "task_failed"}, "payload", "is required"),
    ("learning", {"title": "l", "failure_class": "timeout"}, "failure_class", "must match"),
    ("task", {"title": "t", "key": "k" * (MAX_ITEM_KEY + 1)}, "key", f"at most {MAX_ITEM_KEY}"),
    ("task", {"title": "t" * (MAX_TITLE + 1)}, "title", f"at most {MAX_TITLE}"),
    ("learning", {"title": "l", "content": "c" * (MAX_ITEM_TEXT + 1)}, "content", "at most"),
    ("task", {"title": "t", "at": "1999-12-31T23:59:59Z"}, "at", "before 2000"),
    ("task", {"title": "t", "at": 946_684_799}, "at", "2000-01-01"),
    ("task", {"title": "t", "at": "2999-01-01"}, "at", "future"),
    ("task", {"title": "t", "at": "yesterday"}, "at", "ISO 8601"),
    ("task", {"title": "t", "at": True}, "at", "not true or false"),
    ("goal", {"title": "g", "priority": 10}, "priority", "from 0 to 9"),
    ("goal", {"title": "g", "progress": True}, "progress", "integer"),
    ("goal", {"title": "g", "progress": 0.2}, "progress", "an integer from 0 to 100, got 0.2"),  # a fraction meant
    ("goal", {"title": "g", "active": "no"}, "active", "true or false"),
    ("task", {"title": "t\x00"}, "title", "NUL"),
    ("task", {"title": "t", "metadata": {"a": "\x00"}}, "metadata", "NUL"),
    ("task", {"title": "t", "key": ""}, "key", "must not be empty"),
])
def test_bad_fields_are_named(source, raw, field, words):
    with pytest.raises(ItemError) as caught:
        validate_item(source, raw)
    assert caught.value.field == field and caught.value.index is None
    assert words in str(caught.value) and str(caught.value).startswith(f"{field}: ")


def test_an_item_that_is_not_an_object_and_an_unknown_source_are_refused():
    with pytest.raises(ItemError) as caught:
        validate_item("task", ["title", "x"])
    assert caught.value.field == "item"
    with pytest.raises(ItemError) as caught:
        validate_item("memo", {"title": "x"})
    assert caught.value.field == "source"
    with pytest.raises(ItemError) as caught:
        validate_item("task", {}, partial=True)
    assert caught.value.field == "item"
    with pytest.raises(ItemError) as caught:
        validate_item("task", {"status": None}, partial=True)
    assert caught.value.field == "status"


def test_a_bad_item_in_a_batch_is_named_by_index_and_nothing_is_written(pool):
    items = [{"title": f"fine {i}"} for i in range(5)]
    items[3] = {"title": "bad", "status": "done"}
    with pytest.raises(ItemError) as caught:
        write_items(pool, "alice", "task", items)
    assert (caught.value.index, caught.value.field) == (3, "status")
    assert str(caught.value).startswith("items[3].status: ")
    with pytest.raises(ItemError) as caught:
        write_items(pool, "alice", "learning", [{"key": "a", "title": "x"}, {"key": "a", "title": "y"}])
    assert (caught.value.index, caught.value.field) == (1, "key")
    assert _count(pool, "tasks") == _count(pool, "learnings") == _count(pool, "keyword_docs") == 0


# -- writing, searching, embedding -----------------------------------------------------------------------------

def test_one_item_of_each_source_is_written_and_found_by_keyword_at_once(pool, fake_embedder):
    written = {}
    for source, item in ONE.items():
        out = write_items(pool, "alice", source, [item])
        assert out.counts == {"created": 1, "updated": 0, "unchanged": 0}
        (result,) = out.results
        assert result["key"] == item["key"] and result["action"] == "created" and result["index"] == 0
        written[source] = result["id"]
        row = _row(pool, source, result["id"])
        assert row["owner_id"] == "alice" and row["key"] == item["key"] and row["is_active"]
    assert _row(pool, "task", written["task"])["project_key"] == "infra"
    assert _row(pool, "task", written["task"])["metadata"] == {"ticket": 7}
    for source, word in WORD.items():
        assert _keyword_ids(pool, fake_embedder, "alice", source, word) == [written[source]], source
        assert _keyword_ids(pool, fake_embedder, "bob", source, word) == [], source
        row = _row(pool, source, written[source])
        assert row["embedding"] is None  # pending: the worker or the backfill embeds it


def test_the_worker_pass_embeds_what_was_written_and_only_that(pool, fake_embedder):
    ids = {s: write_items(pool, "alice", s, [ONE[s]]).results[0]["id"] for s in WORD}
    out = embed_pending_items(pool, fake_embedder)
    assert out["embedded"] == 4 and out["pending"] == 0
    for source, item_id in ids.items():
        row = _row(pool, source, item_id)
        assert row["embedding"] is not None and row["embedded_hash"] == row["content_hash"], source
    again = embed_pending_items(pool, fake_embedder)
    assert again["embedded"] == 0
    for source, word in WORD.items():
        hits = search(pool, fake_embedder, "alice", word, mode="semantic", limit=10,
                      filters=_filters(source)).hits
        assert ids[source] in [h.id for h in hits], source


def _filters(source):
    from memory_pipelines.retrieval.search import SearchFilters

    return SearchFilters(sources=(source,))


def test_rewriting_a_key_updates_in_place_and_unchanged_text_is_not_re_embedded(pool, fake_embedder):
    first = write_items(pool, "alice", "learning", [ONE["learning"]]).results[0]
    embed_pending_items(pool, fake_embedder)
    before = _row(pool, "learning", first["id"])
    same = write_items(pool, "alice", "learning", [ONE["learning"]]).results[0]
    assert (same["id"], same["action"]) == (first["id"], "unchanged")
    meta = write_items(pool, "alice", "learning", [{**ONE["learning"], "metadata": {"seen": 2}}]).results[0]
    assert (meta["id"], meta["action"]) == (first["id"], "updated")
    assert embed_pending_items(pool, fake_embedder)["embedded"] == 0  # metadata is not in the indexed text
    after = _row(pool, "learning", first["id"])
    assert after["embedded_at"] == before["embedded_at"] and after["created_at"] == before["created_at"]
    changed = write_items(pool, "alice", "learning", [{**ONE["learning"], "content": "raise the pool to 50"}])
    assert changed.results[0]["action"] == "updated" and changed.results[0]["id"] == first["id"]
    assert _count(pool, "learnings") == 1
    assert embed_pending_items(pool, fake_embedder)["embedded"] == 1
    assert _row(pool, "learning", first["id"])["embedded_at"] > before["embedded_at"]


def test_a_task_status_change_re_embeds_it(pool, fake_embedder):
    task = write_items(pool, "alice", "task", [ONE["task"]]).results[0]
    embed_pending_items(pool, fake_embedder)
    before = _row(pool, "task", task["id"])
    done = update_item(pool, "alice", "task", "T-1", {"status": "completed"})
    assert done == {"id": task["id"], "key": "T-1", "action": "updated"}
    row = _row(pool, "task", task["id"])
    assert row["status"] == "completed" and row["content_hash"] != before["content_hash"]
    assert embed_pending_items(pool, fake_embedder)["embedded"] == 1
    assert _row(pool, "task", task["id"])["embedded_hash"] == row["content_hash"]
    assert update_item(pool, "alice", "task", task["id"], {"status": "completed"})["action"] == "unchanged"


def test_the_original_time_is_kept(pool):
    at = datetime.now(UTC) - timedelta(days=400)
    out = write_items(pool, "alice", "learning", [{**ONE["learning"], "at": at.isoformat()}]).results[0]
    assert _row(pool, "learning", out["id"])["created_at"] == at
    again = write_items(pool, "alice", "learning", [{**ONE["learning"], "content": "new words"}]).results[0]
    assert again["action"] == "updated" and _row(pool, "learning", out["id"])["created_at"] == at


def test_partial_updates_and_deactivation(pool, fake_embedder):
    goal = write_items(pool, "alice", "goal", [ONE["goal"]]).results[0]
    assert update_item(pool, "alice", "goal", "G-1", {"progress": 80})["action"] == "updated"
    row = _row(pool, "goal", goal["id"])
    assert (row["progress"], row["title"], row["priority"]) == (80, ONE["goal"]["title"], 1)
    learning = write_items(pool, "alice", "learning", [ONE["learning"]]).results[0]
    assert _keyword_ids(pool, fake_embedder, "alice", "learning", "marmalade") == [learning["id"]]
    assert update_item(pool, "alice", "learning", "L-1", {"active": False})["action"] == "updated"
    assert _keyword_ids(pool, fake_embedder, "alice", "learning", "marmalade") == []
    assert search(pool, fake_embedder, "alice", "marmalade timeouts", mode="hybrid", limit=10).hits == []
    assert update_item(pool, "alice", "learning", learning["id"], {"active": True})["action"] == "updated"
    assert _keyword_ids(pool, fake_embedder, "alice", "learning", "marmalade") == [learning["id"]]
    event = write_items(pool, "alice", "event", [ONE["event"]]).results[0]
    update_item(pool, "alice", "event", "E-1", {"active": False})
    assert _keyword_ids(pool, fake_embedder, "alice", "event", "axolotl") == []
    assert _row(pool, "event", event["id"])["is_active"] is False
    with pytest.raises(ItemError) as caught:
        update_item(pool, "alice", "goal", "G-1", {"progress": 101})
    assert caught.value.field == "progress"
    assert _row(pool, "goal", goal["id"])["progress"] == 80


def test_owners_are_isolated(pool):
    mine = write_items(pool, "alice", "task", [ONE["task"]]).results[0]
    theirs = write_items(pool, "bob", "task", [ONE["task"]]).results[0]
    assert theirs["action"] == "created" and theirs["id"] != mine["id"]
    assert _count(pool, "tasks") == 2
    from memory_pipelines.infra.errors import NotFoundError

    for ref in (mine["id"], "T-1"):
        with pytest.raises(NotFoundError) as other:
            update_item(pool, "carol", "task", ref, {"status": "failed"})
        with pytest.raises(NotFoundError) as unknown:
            update_item(pool, "carol", "task", ref + "x" if ref == "T-1" else
                        "00000000-0000-0000-0000-000000000000", {"status": "failed"})
        assert str(other.value).replace(ref, "R") == str(unknown.value).replace(
            "T-1x" if ref == "T-1" else "00000000-0000-0000-0000-000000000000", "R")
    update_item(pool, "bob", "task", "T-1", {"status": "failed"})
    assert _row(pool, "task", mine["id"])["status"] == "in_progress"
    assert _row(pool, "task", theirs["id"])["status"] == "failed"


def test_capabilities_without_a_key_are_upserted_by_name(pool):
    first = write_items(pool, "alice", "capability", [{"name": "Summarise logs", "description": "v1"}]).results[0]
    same = write_items(pool, "alice", "capability", [{"name": "Summarise logs", "description": "v1"}]).results[0]
    newer = write_items(pool, "alice", "capability", [{"name": "Summarise logs", "description": "v2"}]).results[0]
    assert (same["id"], same["action"]) == (first["id"], "unchanged")
    assert (newer["id"], newer["action"]) == (first["id"], "updated")
    with pytest.raises(ItemError) as caught:
        write_items(pool, "alice", "capability", [{"key": "c", "name": "Summarise logs"}])
    assert caught.value.field == "name"
    assert _count(pool, "capabilities") == 1


def _learning_stats(pool) -> tuple[tuple, tuple]:
    """alice's stored BM25 statistics of learnings (n, total_len), and the same counted from her indexed docs."""
    with pool.connection() as conn:
        stored = conn.execute(
            "SELECT n, total_len FROM keyword_stats WHERE owner_id = 'alice' AND source = 'learning'").fetchone()
        real = conn.execute("SELECT count(*), sum(doc_len) FROM keyword_docs WHERE owner_id = 'alice'"
                            " AND source = 'learning'").fetchone()
    return tuple(stored), tuple(real)


def test_stored_keyword_statistics_follow_the_writes(pool):
    write_items(pool, "alice", "learning", [{"title": f"lesson {i} about queues", "key": f"k{i}"} for i in range(30)])
    stored, real = _learning_stats(pool)
    assert stored == real and stored[0] == 30
    write_items(pool, "alice", "learning", [{"title": f"more {i} on queues"} for i in range(5)])
    update_item(pool, "alice", "learning", "k0", {"active": False})
    stored, real = _learning_stats(pool)
    assert stored == real and stored[0] == 34



def test_writers_of_one_owner_side_by_side_keep_her_statistics_exact(pool):
    """Eight threads writing batches for the same owner at once (their indexing overlaps), one of them first for a
    new owner: the stored statistics equal a count of the indexed documents."""
    from concurrent.futures import ThreadPoolExecutor

    def batch(b: int) -> None:
        write_items(pool, "alice", "learning", [{"title": f"batch {b} lesson {i} on retries " * (1 + i % 3),
                                                  "key": f"b{b}-{i}"} for i in range(40)])

    with ThreadPoolExecutor(max_workers=8) as writers:
        list(writers.map(batch, range(8)))
    stored, real = _learning_stats(pool)
    assert stored == real and stored[0] == 320



def test_batches_naming_the_same_rows_in_opposite_orders_both_land(pool):
    """Two writers upserting the same capabilities, one in reverse order, again and again: where their row locks
    deadlock, the rolled-back write is tried again, so every call returns and each name is one row."""
    from concurrent.futures import ThreadPoolExecutor

    names = [f"skill {i:03d}" for i in range(300)]

    def batch(args: tuple[int, bool]) -> int:
        round_, backwards = args
        order = names[::-1] if backwards else names
        return len(write_items(pool, "alice", "capability",
                               [{"name": n, "description": f"round {round_}"} for n in order]).results)

    with ThreadPoolExecutor(max_workers=2) as writers:
        for round_ in range(6):
            assert list(writers.map(batch, [(round_, False), (round_, True)])) == [300, 300]
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT name) FROM capabilities").fetchone() == (300, 300)


# -- the public face: Memory.write*, the worker, context with a task -------------------------------------------

@pytest.fixture
def memory(runtime):
    from memory_pipelines import Memory
    from memory_pipelines.store.ingest.worker import EmbedWorker

    mem = Memory(runtime, llm=None)
    mem.embed_worker = EmbedWorker(mem, nice=0)
    yield mem
    mem.embed_worker.stop()


def test_the_library_reads_a_padded_owner_as_it_writes_it(memory):
    """`Memory.write(" alice ", ...)` stores alice's item (the owner is stripped), but every read took " alice "
    as another owner and answered empty. Reads now take the owner as writes do; a blank one is refused."""
    written = memory.write(" alice ", "task", {"title": "Rotate the marmalade keys", "key": "T-9"})
    assert memory.search(" alice ", "marmalade", mode="keyword").hits[0].id == written["id"]
    assert [h.id for h in memory.search("alice", "marmalade", mode="keyword").hits] == [written["id"]]
    assert memory.detail("\talice ", written["id"])["id"] == written["id"]
    assert written["id"] in [i.id for i in memory.context(" alice ", "marmalade keys", mode="debug").items]
    assert memory.forget(" alice ", "task", "T-9")["removed"]
    for blank in ("", "   "):
        with pytest.raises(ValidationError) as caught:
            memory.search(blank, "marmalade")
        assert caught.value.field == "owner"


def test_the_library_erases_a_padded_owner_confirmed_as_given(memory):
    """`Memory.erase(" alice ", confirm=" alice ")` was refused ('repeat the owner id'): the owner was stripped and
    the confirmation, repeating it as given, was not. Both now read as the owner."""
    memory.write(" alice ", "task", {"title": "Rotate the marmalade keys"})
    assert memory.erase(" alice ", confirm=" alice ")["counts"]["tasks"] == 1
    assert memory.search("alice", "marmalade", mode="keyword").hits == []
    memory.write("alice", "task", {"title": "Rotate the marmalade keys"})
    with pytest.raises(ValidationError) as caught:
        memory.erase("alice", confirm=" bob ")
    assert caught.value.field == "confirm"
    assert len(memory.search("alice", "marmalade", mode="keyword").hits) == 1


def test_memory_writes_are_embedded_by_the_worker_and_found_by_a_context_build(memory, pool):
    ids = {}
    for source, item in ONE.items():
        out = memory.write("alice", source, item)
        assert set(out) == {"id", "key", "action"} and out["action"] == "created"
        ids[source] = out["id"]
    assert memory.embed_worker.wait_idle(30)
    assert memory.embed_worker.passes >= 1 and "embedded_items" in memory.embed_worker.last
    for source in WORD:
        assert _row(pool, source, ids[source])["embedding"] is not None, source
    ctx = memory.context("alice", "marmalade timeouts in the pool", mode="debug")
    assert ids["learning"] in [i.id for i in ctx.items]
    assert "Ship the narwhal release" in ctx.profile
    memory.update("alice", "learning", "L-1", {"active": False})
    memory.update("alice", "goal", "G-1", {"active": False})
    ctx = memory.context("alice", "marmalade timeouts in the pool", mode="debug")
    assert ids["learning"] not in [i.id for i in ctx.items] and "narwhal" not in ctx.profile
    with pytest.raises(ItemError) as caught:  # one item: the error names the field, no index
        memory.write("alice", "task", {"title": ""})
    assert (caught.value.field, caught.value.index) == ("title", None)
    batch = memory.write_many("alice", "task", [{"title": "a", "key": "x"}, {"title": "b", "status": "nope"}][:1])
    assert batch["counts"]["created"] == 1 and batch["results"][0]["index"] == 0


def test_a_task_context_lifts_the_learnings_that_match_it(memory):
    topics = ["canary releases", "rollback drills", "blue green switches", "artifact signing", "smoke checks",
              "feature flags"]
    memory.write_many("alice", "learning", [
        {"key": f"gen-{i}", "title": f"Deploy pipelines need {topic}", "content": f"we learned about {topic}",
         "task_type": "research", "category": "insight"} for i, topic in enumerate(topics)])
    memory.write("alice", "learning", {"key": "match", "title": "Registry timeouts stall the image pulls",
                                       "content": "seen in a deploy; cache the images", "task_type": "dev",
                                       "failure_class": "REGISTRY_TIMEOUT", "trigger_event": "task_failed",
                                       "category": "failure_pattern"})
    memory.write("alice", "learning", {"key": "hidden", "title": "Warm the build cache before peak hours",
                                       "content": "nothing in common with the query", "task_type": "dev",
                                       "failure_class": "REGISTRY_TIMEOUT"})
    assert memory.embed_worker.wait_idle(30)
    task = {"task_type": "dev", "failure_class": "REGISTRY_TIMEOUT", "event_type": "task_failed"}
    plain = memory.context("alice", "deploy pipelines", mode="debug", token_budget=2000)
    tasked = memory.context("alice", "deploy pipelines", mode="debug", token_budget=2000, task=task)
    match = memory.relevant_learnings("alice", **task, limit=2)
    assert [m["title"] for m in match] == ["Registry timeouts stall the image pulls",
                                           "Warm the build cache before peak hours"]
    assert match[0]["breakdown"]["task_type"] == 10 and match[0]["breakdown"]["failure_class"] == 8
    plain_ids = [i.id for i in plain.items]
    tasked_ids = [i.id for i in tasked.items]
    assert len(plain_ids) >= 4 and plain_ids[0] != match[0]["id"]
    assert tasked_ids[0] == match[0]["id"]
    assert match[1]["id"] in tasked_ids and match[1]["id"] not in plain_ids  # found by the task alone
    if match[0]["id"] in plain_ids:
        before = next(i.relevance for i in plain.items if i.id == match[0]["id"])
        assert next(i.relevance for i in tasked.items if i.id == match[0]["id"]) > before
    with pytest.raises(ValidationError) as caught:
        memory.context("alice", "deploy", task={"task_type": "cooking"})
    assert caught.value.field == "task.task_type"
    with pytest.raises(ValidationError):
        memory.relevant_learnings("alice", event_type="Not Snake")


def test_deleting_keyword_documents_deletes_their_postings(pool):
    write_items(pool, "alice", "learning", [{"title": f"postings {i} of walrus docs", "key": f"k{i}"}
                                            for i in range(3)])
    with pool.connection() as conn:
        assert conn.execute("SELECT count(DISTINCT item_id) FROM keywords").fetchone()[0] == 3
        conn.execute("DELETE FROM keyword_docs WHERE item_id = (SELECT min(item_id) FROM keyword_docs)")
        assert conn.execute("SELECT count(DISTINCT item_id) FROM keywords").fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM keywords k WHERE NOT EXISTS (SELECT 1 FROM keyword_docs d"
                            " WHERE d.source = k.source AND d.item_id = k.item_id)").fetchone()[0] == 0
        conn.execute("TRUNCATE keyword_docs")
        assert conn.execute("SELECT count(*) FROM keywords").fetchone()[0] == 0


def test_an_update_with_a_null_time_is_refused_and_keeps_the_stored_one(runtime):
    from memory_pipelines.store.items import ItemError, update_item, write_items

    write_items(runtime.pool, "alice", "event", [{"key": "e1", "type": "alert", "payload": {"disk": "full"},
                                                  "at": "2026-01-02T03:04:05Z"}])
    with pytest.raises(ItemError) as caught:
        update_item(runtime.pool, "alice", "event", "e1", {"at": None})
    assert caught.value.field == "at"
    with runtime.pool.connection() as conn:
        (at,) = conn.execute("SELECT created_at FROM events WHERE owner_id = 'alice' AND key = 'e1'").fetchone()
    assert at.isoformat() == "2026-01-02T03:04:05+00:00"
