"""Forget, drop a project, erase an owner, against the real database: items of every source for three owners;
some of alice's forgotten, one of her projects dropped, bob erased, carol untouched. Then every read surface
shows nothing removed and everything else unchanged, the keyword statistics equal a fresh index of what is left,
no table holds a removed item's words, and every removal is in its owner's audit trail."""

from __future__ import annotations

import pytest

from memory_pipelines.index import owner_indexes
from memory_pipelines.index.keywords import STORED_DF_MIN, index_all, index_rows
from memory_pipelines.index.owner_indexes import existing_owner_indexes, sync_owner_indexes
from memory_pipelines.infra.auth import create_key, resolve_key
from memory_pipelines.infra.errors import NotFoundError, ValidationError
from memory_pipelines.retrieval.planning import PLANS
from memory_pipelines.retrieval.search import search
from memory_pipelines.store.removal import audit_trail, drop_project, erase_owner, forget
from memory_pipelines.store.removal.erase import AUDIT_TABLE, GLOBAL_TABLES, owner_tables
from memory_pipelines.vocabulary import FORGOTTEN_PREFIX, INDEXED
from tests.factories import add_task
from tests.removal_world import (
    builds_with_feedback,
    fresh_keyword_state,
    history,
    item_reads,
    keyword_state,
    owner_rows,
    rows_mentioning,
    settle,
    stats_of_docs,
    surfaces,
    table_counts,
    tables,
    write_owner,
)
from tests.test_owner_indexes import ONLY_TASKS, _exact, _load, _nearest, _small_caps

BUILD_QUERIES = ["deploy release checklist", "memory vectors pgvector", "trip to Lisbon", "deploy timeout retry"]


@pytest.fixture
def world(pool, fake_embedder, fake_openai):
    owners = {o: write_owner(pool, fake_embedder, fake_openai, o) for o in ("alice", "bob", "carol")}
    settle(pool, fake_embedder)
    for o in owners:
        builds_with_feedback(pool, fake_embedder, o, BUILD_QUERIES)
        create_key(pool, o, "agent")
    return owners


def _without(result, gone: set[str]):
    """A surface's answer with the removed items' entries taken out (for comparing what is left)."""
    if isinstance(result, list):
        return [x for x in result if not (isinstance(x, tuple) and set(x) & gone)]
    return result


def test_forget_drop_and_erase_leave_nothing_behind_and_change_nothing_else(pool, fake_embedder, world) -> None:
    alice, bob = world["alice"], world["bob"]
    carol_before = surfaces(pool, fake_embedder, "carol")
    carol_history = history(pool, "carol")
    alice_rates = surfaces(pool, fake_embedder, "alice")["hit_rates"]
    s0, s1 = alice.ids["memory"]["s0"], alice.ids["memory"]["s1"]
    with pool.connection() as conn:  # s0 judged against s1 and kept both: s0's record stays, without s1
        conn.execute("INSERT INTO memory_arbitrations (owner_id, project_id, candidate_memory_id, new_memory_id,"
                     " action, old_summary, new_summary) SELECT 'alice', project_id, %s, id, 'KEEP_BOTH', %s, 'kept'"
                     " FROM memories WHERE id = %s", (s1, f"about {alice.markers[s1]}", s0))

    forgotten = {
        "task": alice.ids["task"]["t1"], "learning": alice.ids["learning"]["l1"],
        "capability": alice.ids["capability"]["c1"], "goal": alice.ids["goal"]["g1"], "event": alice.ids["event"]["e1"],
    }
    for source, item_id in forgotten.items():
        out = forget(pool, "alice", source, item_id)
        assert out["id"] == item_id and out["removed"]
    m1 = forget(pool, "alice", "memory", alice.ids["memory"]["m1"])  # replaced twice: two versions
    assert m1["removed"]["memory_versions"] == 2 and m1["removed"]["memories"] == 1
    s1 = forget(pool, "alice", "memory", alice.ids["memory"]["s1"])  # the middle turn of a conversation
    assert s1["removed"]["contexts_rewritten"] == 1
    m3 = forget(pool, "alice", "memory", alice.ids["memory"]["m3"])  # with its deferred duplicate folded into it
    assert m3["removed"]["memories"] == 2
    dropped = drop_project(pool, "alice", "web-app")
    assert dropped["removed"]["projects"] == 1 and dropped["removed"]["memories"] == 1
    gone_ids = {*forgotten.values(), alice.ids["memory"]["m1"], alice.ids["memory"]["s1"], alice.ids["memory"]["m3"],
                alice.ids["memory"]["m3_dup"], alice.ids["memory"]["m2"]}
    gone_markers = {alice.markers[i] for i in gone_ids if i in alice.markers}

    dry = erase_owner(pool, "bob", dry_run=True)
    assert dry["counts"]["api_keys"] == 1 and dry["counts"]["tasks"] == 58
    assert owner_rows(pool, "bob")["tasks"] == 58  # a dry run removes nothing
    erased = erase_owner(pool, "bob", confirm="bob")
    assert erased["counts"]["tasks"] == 58 and erased["counts"]["api_keys"] == 1

    # Nothing removed is anywhere: no row of any table holds a removed item's id (the audit trail names it,
    # by design) or its words, and bob has no row left but the record of his erase.
    for item_id in gone_ids:
        assert rows_mentioning(pool, item_id, skip=("removals",)) == {}, item_id
    for word in gone_markers | set(bob.markers.values()):
        assert rows_mentioning(pool, word) == {}, word
    assert {t: n for t, n in owner_rows(pool, "bob").items() if n} == {"removals": 1}
    with pool.connection() as conn:
        kept_record = conn.execute("SELECT candidate_memory_id, old_summary, new_summary FROM memory_arbitrations"
                                   " WHERE new_memory_id = %s AND action = 'KEEP_BOTH'", (s0,)).fetchall()
    assert kept_record == [(None, None, "kept")]

    # ... nor through any read surface.
    after = surfaces(pool, fake_embedder, "alice")
    for key, value in after.items():
        text = repr(value)
        assert not any(i in text for i in gone_ids), key
        assert not any(w in text for w in gone_markers), key
    for item_id in gone_ids:
        source = "memory" if item_id.startswith("mem_") else "task"
        assert set(item_reads(pool, fake_embedder, "alice", item_id, source).values()) == {"not found"}
    for build in history(pool, "alice"):
        for item in build["items"]:
            assert item["id"] not in gone_ids
            if item["id"].startswith(FORGOTTEN_PREFIX):
                assert item["title"] is None
    assert after["hit_rates"] == alice_rates  # the log's counts stay: only the items' ids and words go
    assert sorted(after["projects"]) == [("agent-mem", 0), ("chat", 2)]
    bob_view = surfaces(pool, fake_embedder, "bob")
    assert all(v in ([], "") for k, v in bob_view.items() if k not in ("hit_rates",))
    assert bob_view["hit_rates"]["total"]["builds"] == 0 and history(pool, "bob") == []

    # Everything else is unchanged: carol sees exactly what she saw; alice's kept items are still found.
    assert surfaces(pool, fake_embedder, "carol") == carol_before
    assert history(pool, "carol") == carol_history
    kept = alice.ids["task"]["t2"]
    assert kept in repr(after["search:keyword:deploy release checklist"])
    assert item_reads(pool, fake_embedder, "alice", kept, "task")["detail"]["id"] == kept

    # The keyword statistics are those of a store that never held the removed items: the stored ones equal
    # what the indexed documents give, and the documents are a fresh index's but for the one conversation turn
    # whose context changed (pending for the keyword pass, like any rewritten text) ...
    now = keyword_state(pool)
    assert {k: now[k] for k in ("stats", "df")} == stats_of_docs(pool)
    pending_ctx = f"{alice.ids['memory']['s2']}_ctx"
    index_all(pool)  # ... which the next keyword pass indexes; then everything equals a fresh index
    settled = keyword_state(pool)
    assert {d[1] for d in settled["docs"] - now["docs"]} == {pending_ctx}
    assert now["docs"] - settled["docs"] == set()
    assert settled == fresh_keyword_state(pool)

    # Every removal is in its owner's trail (counts, never content); nobody else's trail shows it.
    trail = audit_trail(pool, "alice")["removals"]
    assert [(r["action"], r["source"]) for r in trail] == [
        ("drop_project", "project"), ("forget", "memory"), ("forget", "memory"), ("forget", "memory"),
        ("forget", "event"), ("forget", "goal"), ("forget", "capability"), ("forget", "learning"),
        ("forget", "task")]
    assert all(r["actor"] == "cli" and r["counts"] for r in trail)
    assert not any(w in repr(trail) for w in gone_markers)
    assert [r["action"] for r in audit_trail(pool, "bob")["removals"]] == ["erase"]
    assert audit_trail(pool, "carol")["removals"] == []


def test_a_forgotten_conversation_turn_gives_the_next_the_context_it_would_have_had(pool, fake_embedder,
                                                                                   world) -> None:
    alice = world["alice"]
    s0, s1, s2 = (alice.ids["memory"][f"s{i}"] for i in range(3))
    forget(pool, "alice", "memory", s1)
    with pool.connection() as conn:
        context = conn.execute("SELECT context FROM memories WHERE id = %s", (s2,)).fetchone()[0]
        ctx = conn.execute("SELECT content_hash, embedding FROM fragments WHERE id = %s", (f"{s2}_ctx",)).fetchone()
    assert context.startswith("Ann: Ann says " + alice.markers[s0])
    assert ctx[1] is None  # its old vector read the forgotten turn: pending for the backfill
    settle(pool, fake_embedder)
    hits = surfaces(pool, fake_embedder, "alice")["search:keyword:trip to Lisbon"]
    assert {h[1] for h in hits} == {s0, s2}
    # The first turn forgotten too: the last one has no other party's turn before it any more.
    forget(pool, "alice", "memory", s0)
    with pool.connection() as conn:
        assert conn.execute("SELECT context FROM memories WHERE id = %s", (s2,)).fetchone()[0] is None
        assert conn.execute("SELECT count(*) FROM fragments WHERE id = %s", (f"{s2}_ctx",)).fetchone()[0] == 0


def test_unknown_foreign_and_forgotten_ids_are_the_same_not_found_and_remove_nothing(pool, world) -> None:
    alice, carol = world["alice"], world["carol"]
    before = table_counts(pool)
    probes = [("carol", s, i) for s, ids in alice.ids.items() if s in ("task", "learning", "capability", "goal",
                                                                       "event", "memory") for i in ids.values()]
    probes += [("alice", "task", "00000000-0000-0000-0000-000000000000"), ("alice", "memory", "mem_nope"),
               ("alice", "task", "not-a-uuid"), ("alice", "memory", carol.ids["memory"]["m1"]),
               ("alice", "goal", carol.ids["goal"]["g1"])]
    for owner, source, item_id in probes:  # another owner's id answers exactly as an id nobody has
        with pytest.raises(NotFoundError) as err:
            forget(pool, owner, source, item_id)
        assert str(err.value) == f"no {source} {item_id!r}"
    assert table_counts(pool) == before
    alice_rows = owner_rows(pool, "alice")
    with pytest.raises(NotFoundError):
        drop_project(pool, "carol", "nonexistent")
    assert drop_project(pool, "carol", "web-app")["removed"]["projects"] == 1  # her own, not alice's
    assert table_counts(pool)["projects"] == before["projects"] - 1 and owner_rows(pool, "alice") == alice_rows

    task = alice.ids["task"]["t1"]
    forget(pool, "alice", "task", task)
    snapshot = table_counts(pool)
    with pytest.raises(NotFoundError) as again:
        forget(pool, "alice", "task", task)
    with pytest.raises(NotFoundError) as never:
        forget(pool, "alice", "task", "11111111-1111-1111-1111-111111111111")
    assert str(again.value).replace(task, "X") == str(never.value).replace("11111111-1111-1111-1111-111111111111", "X")
    assert table_counts(pool) == snapshot


def test_bad_input_names_the_field_and_removes_nothing(pool, world) -> None:
    before = table_counts(pool)
    cases = [
        (lambda: forget(pool, "alice", "okr", "x"), "source"),
        (lambda: forget(pool, "alice", "fragment", "x"), "source"),
        (lambda: forget(pool, "alice", "task", ""), "id"),
        (lambda: forget(pool, "alice", "task", "x" * 201), "id"),
        (lambda: forget(pool, "alice", "memory", "mem_\x00"), "id"),
        (lambda: forget(pool, "", "task", "x"), "owner"),
        (lambda: forget(pool, "alice", "task", "x", actor=""), "actor"),
        (lambda: drop_project(pool, "alice", " "), "project_key"),
        (lambda: erase_owner(pool, "alice"), "confirm"),
        (lambda: erase_owner(pool, "alice", confirm="ALICE"), "confirm"),
        (lambda: erase_owner(pool, "alice", confirm="alice", dry_run="yes"), "dry_run"),
        (lambda: audit_trail(pool, "alice", limit=0), "limit"),
        (lambda: audit_trail(pool, "alice", cursor="%%%"), "cursor"),
        (lambda: audit_trail(pool, "alice", cursor="OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk"), "cursor"),  # past bigint
    ]
    for call, field in cases:
        with pytest.raises(ValidationError) as err:
            call()
        assert err.value.field == field
    assert table_counts(pool) == before


def test_every_table_holding_an_owners_rows_is_erased(pool, fake_embedder, world, monkeypatch) -> None:
    """The erase reads its tables from the catalog; this fails for a table that holds owner data without an
    owner_id column (add the column, or list the table as global if it holds no owner's data)."""
    with pool.connection() as conn:
        every = set(tables(conn))
        erased = set(owner_tables(conn))
    kept = GLOBAL_TABLES | {AUDIT_TABLE}  # the audit trail keeps every removal's record, an erase's included
    assert every - erased <= kept, f"neither erased by owner nor global: {every - erased - kept}"
    assert {"api_keys", "retrieval_daily", "retrieval_daily_items", "keyword_df"} <= erased
    # Her own vector graphs go too (an owner over the exact-scan cap has one per table).
    monkeypatch.setattr(owner_indexes, "EXACT_SCAN_MAX_ROWS", 10)
    with pool.connection() as conn:
        built = sync_owner_indexes(conn, fake_embedder.dimension).built
        assert any(owner_indexes.owner_index_name("tasks", "carol") == n for n in built)
    key_id, key = create_key(pool, "carol")
    assert resolve_key(pool, key) == "carol"
    out = erase_owner(pool, "carol", confirm="carol")
    assert sorted(out["indexes"]) == sorted(n for n in built if n in {
        owner_indexes.owner_index_name(t, "carol") for t, _c in owner_indexes.owner_index_tables()})
    with pool.connection() as conn:
        assert not any(n in existing_owner_indexes(conn, t) for t, _c in owner_indexes.owner_index_tables()
                       for n in out["indexes"])
    assert resolve_key(pool, key) is None
    assert {t: n for t, n in owner_rows(pool, "carol").items() if n} == {"removals": 1}
    assert owner_rows(pool, "alice")["tasks"] == 58  # nobody else's rows
    # Erasing her again, or an owner who never wrote, removes nothing and records nothing: the first record stays.
    first = audit_trail(pool, "carol")["removals"]
    assert [r["action"] for r in first] == ["erase"] and first[0]["counts"]["tasks"] > 0
    for who in ("carol", "nobody-ever"):
        again = erase_owner(pool, who, confirm=who)
        assert again["counts"] == {} and again["audit_id"] is None
    assert audit_trail(pool, "carol")["removals"] == first and audit_trail(pool, "nobody-ever")["removals"] == []


def test_statistics_follow_a_term_under_the_stored_floor_and_ignore_documents_they_never_counted(pool) -> None:
    with pool.connection() as conn:
        tasks = [add_task(conn, "dana", f"alpha step {i}", "routine") for i in range(STORED_DF_MIN)]
    index_all(pool)
    assert ("dana", "task", "alpha", STORED_DF_MIN) in keyword_state(pool)["df"]
    forget(pool, "dana", "task", tasks[0])  # alpha falls to 49 documents: counted live from now on, as a refresh would
    state = keyword_state(pool)
    assert not any(k == "alpha" for _o, _s, k, _df in state["df"])
    assert {k: state[k] for k in ("stats", "df")} == stats_of_docs(pool)
    with pool.connection() as conn:  # written (and keyword-indexed) after the refresh: the statistics never saw it
        late = add_task(conn, "dana", "alpha late", "routine")
        spec = INDEXED["task"]
        index_rows(conn, "task", conn.execute(f"SELECT t.id::text, t.owner_id, {spec.text_sql}, t.content_hash"
                                              f" FROM {spec.from_sql} WHERE t.id = %s", (late,)).fetchall())
    before = keyword_state(pool)["stats"]
    forget(pool, "dana", "task", late)
    assert keyword_state(pool)["stats"] == before == stats_of_docs(pool)["stats"]
    for task in tasks[1:]:
        forget(pool, "dana", "task", task)
    assert keyword_state(pool) == {"docs": set(), "postings": set(), "stats": set(), "df": set()}


def test_searches_on_an_owners_own_graph_never_return_forgotten_rows(pool, fake_embedder, db_url, monkeypatch):
    """alice is over the exact-scan cap, so her semantic search walks her own HNSW graph, which still holds the
    forgotten rows' entries until a vacuum: her hits are her exact nearest of what is left, none forgotten."""
    _small_caps(monkeypatch)
    _load(pool, fake_embedder, {"alice": 60, "carol": 10})
    qvec = fake_embedder.embed_query("alice note about topic 3")
    nearest = [i for i, _d in _exact(pool, "alice", qvec)[:15]]
    for item_id in nearest[:5]:
        forget(pool, "alice", "task", item_id)
    owned = PLANS["hnsw-owner"]
    hits = search(pool, fake_embedder, "alice", "q", mode="semantic", limit=10, query_vector=qvec,
                  filters=ONLY_TASKS).hits
    assert PLANS["hnsw-owner"] == owned + 1  # her graph answered
    assert not {h.id for h in hits} & set(nearest[:5])
    assert _nearest(hits, _exact(pool, "alice", qvec))
