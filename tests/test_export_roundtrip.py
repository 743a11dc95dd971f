"""Export and import round trip on the demo corpus's three owners: each owner exported from one database and
imported into a fresh one gives the same search results (every channel), the same items and memories."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from memory_pipelines.context.config import activate, active_config, add_config, list_configs, restore_active
from memory_pipelines.context.scoring import ScoringConfig
from memory_pipelines.demo.corpus import load_demo, read_demo
from memory_pipelines.face import Memory
from memory_pipelines.index.keywords import index_all
from memory_pipelines.index.vectors import embed_all
from memory_pipelines.infra.db import get_pool
from memory_pipelines.infra.errors import ValidationError
from memory_pipelines.operations.export import FILES, export_owner
from memory_pipelines.retrieval.search import search
from memory_pipelines.store.imports import import_file
from memory_pipelines.store.ingest import finish_deferred
from tests.test_cli import run_cli

OWNERS = ("team-alpha", "team-beta", "solo-gamma")


@pytest.fixture
def fresh_url(server_url: str, template_db: str) -> Iterator[str]:
    """A second fresh, migrated database (the import's target)."""
    name = f"mp_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    yield make_conninfo(server_url, dbname=name)
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _queries(owner: str) -> list[str]:
    """Questions an owner would ask of her corpus: words of some of her items, memories and events."""
    corpus = read_demo()
    mine = [t["title"] for t in corpus["tasks"] if t["owner"] == owner][:4]
    mine += [m["content"][:60] for m in corpus["memories"] if m["owner"] == owner][:4]
    mine += [lr["title"] for lr in corpus["learnings"] if lr["owner"] == owner][:3]
    return [*mine, "deploy rollback", "数据库 连接池 超时"]


def _results(pool, embedder, owner: str) -> dict[str, tuple]:
    """Per query and mode: the hits (source, text, score) by score, the score at the cut and the hit count. Items
    tied at the cut are not listed: which of them make the top ten depends on their ids, new in an import."""
    out = {}
    for q in _queries(owner):
        for mode in ("hybrid", "keyword", "semantic"):
            hits = search(pool, embedder, owner, q, mode=mode, limit=10).hits
            rows = sorted(((h.source, h.text or h.title, round(h.score, 4)) for h in hits),
                          key=lambda x: (-x[2], x[0], x[1]))
            cut = rows[-1][2] if len(rows) == 10 else None
            out[f"{mode}:{q}"] = ([r for r in rows if cut is None or r[2] > cut], cut, len(rows))
    return out


def _contents(pool, owner: str) -> dict[str, list]:
    with pool.connection() as conn:
        return {
            "tasks": sorted(conn.execute("SELECT title, description, status, task_type, project_key, created_at::date"
                                         " FROM tasks WHERE owner_id = %s", (owner,)).fetchall()),
            "learnings": sorted(conn.execute("SELECT title, content, category, failure_class FROM learnings"
                                             " WHERE owner_id = %s", (owner,)).fetchall()),
            "capabilities": sorted(conn.execute("SELECT name, description FROM capabilities WHERE owner_id = %s",
                                                (owner,)).fetchall()),
            "goals": sorted(conn.execute("SELECT title, status, priority, progress FROM goals WHERE owner_id = %s",
                                         (owner,)).fetchall()),
            "events": sorted(conn.execute("SELECT type, payload::text, created_at FROM events WHERE owner_id = %s"
                                          " AND type <> 'memory_retrieval'", (owner,)).fetchall()),
            "memories": sorted(conn.execute(
                "SELECT m.content, m.content_type, p.project_key, m.speaker, m.ts FROM memories m"
                " JOIN projects p ON p.id = m.project_id WHERE m.owner_id = %s AND m.is_active", (owner,)).fetchall()),
        }


def test_an_exported_owner_imported_into_a_fresh_database_searches_the_same(pool, fake_embedder, fresh_url,
                                                                           tmp_path) -> None:
    load_demo(pool)
    embed_all(pool, fake_embedder)
    index_all(pool)
    target = get_pool(fresh_url, max_size=4)
    for owner in OWNERS:
        folder = tmp_path / owner
        manifest = export_owner(pool, owner, folder)
        for name in FILES.values():
            report = import_file(target, folder / name, embedder=fake_embedder, owner=owner)
            assert report.rejects == [] and report.written, (owner, name, report.rejects[:3])
            assert report.rows == manifest["files"][name]
    finish_deferred(target, fake_embedder, None)  # the imported memories, embedded and judged as after an outage
    embed_all(target, fake_embedder)
    # Keyword scores read each posting's impact, made with the owner's average length when it was written: the
    # demo store was indexed in one pass, the import wrote memories one by one (up to 0.06 apart on a memory's
    # keyword score). Indexed in one pass too (`embed --full-keywords`), it holds the same impacts.
    index_all(target, full=True)
    for owner in OWNERS:
        assert _contents(target, owner) == _contents(pool, owner), owner
        assert _results(target, fake_embedder, owner) == _results(pool, fake_embedder, owner), owner
    # importing the same export again changes nothing
    for name in FILES.values():
        again = import_file(target, tmp_path / "team-alpha" / name, embedder=fake_embedder, owner="team-alpha")
        assert again.totals["created"] == again.totals["updated"] == 0, name


def test_the_exported_active_scoring_config_is_restored_by_the_cli(pool, fresh_url, tmp_path) -> None:
    """A tuned config travels with an export: `scoring restore` makes it active in the new store, once (a second
    restore re-activates the same version); a file that is not a config names the field and changes nothing."""
    tuned = ScoringConfig(half_lives={**ScoringConfig().half_lives, "learning": 1500.0}, decay_floor=0.7,
                          source_weights={"event": 0.49})
    activate(pool, add_config(pool, tuned, note="tuned"))
    export_owner(pool, "team-alpha", tmp_path / "exp")
    exported = tmp_path / "exp" / "scoring_configs.json"
    target = get_pool(fresh_url, max_size=2)
    env = {"DATABASE_URL": fresh_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    before = active_config(target)
    assert (before.half_lives, before.params()) != (tuned.half_lives, tuned.params())

    bad = tmp_path / "bad.json"
    bad.write_text(exported.read_text().replace('"learning": 1500.0', '"learning": -3'))
    refused = run_cli(["scoring", "restore", str(bad)], env)
    assert refused.returncode == 2 and "half_lives.learning" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and active_config(target).version == before.version

    first = run_cli(["scoring", "restore", str(exported)], env)
    assert first.returncode == 0, first.stderr
    restored = active_config(target)
    assert (restored.half_lives, restored.mode_weights, restored.params()) == (
        tuned.half_lives, tuned.mode_weights, tuned.params())
    activate(target, before.version)
    again = run_cli(["scoring", "restore", str(exported)], env)
    assert again.returncode == 0 and "already stored" in again.stdout, again.stdout
    assert active_config(target).version == restored.version
    assert len(list_configs(target)) == 2  # the migration's seed and the restored one


def test_a_restore_that_leaves_sources_out_is_refused_naming_them(pool, tmp_path, db_url) -> None:
    """An export's active config naming only some sources (half-lives and mode weights for task alone) was added
    and activated: every other source silently scored with no decay and weight 1. It is refused naming the field
    and the sources left out; nothing is stored or activated."""
    before = list_configs(pool)
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    full = ScoringConfig()
    partial = [
        ({"task": 7}, full.mode_weights, "half_lives: names no half-life (null: no decay) for learning, capability"),
        (full.half_lives, {"task": full.mode_weights["task"]}, "mode_weights: names no mode weights for learning"),
        (full.half_lives, {**full.mode_weights, "event": {"plan": 1.1}}, "mode_weights.event: names no weight for"
                                                                        " execute, debug, chat"),
    ]
    for k, (half_lives, weights, said) in enumerate(partial):
        path = tmp_path / f"scoring_configs_{k}.json"
        path.write_text(json.dumps([{"version": 5, "is_active": True, "half_lives": half_lives,
                                     "mode_weights": weights, "params": full.params()}]))
        refused = run_cli(["scoring", "restore", str(path)], env)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr and list_configs(pool) == before


BAD_PARAMS = [
    ({"weight_bounds": "ab"}, "params.weight_bounds"),
    ({"weight_bounds": [1, 2, 3]}, "params.weight_bounds"),
    ({"weight_bounds": [1.25, 0.8]}, "params.weight_bounds"),
    ({"source_weights": {"task": "x"}}, "params.source_weights.task"),
    ({"source_weights": {"nope": 1.0}}, "params.source_weights.nope"),
    ({"relevance_floors": {"semantic": "abc"}}, "params.relevance_floors.semantic"),
    ({"decay_floor": -3}, "params.decay_floor"),
    ({"decay_floor": 1.5}, "params.decay_floor"),
]


def test_a_restore_whose_params_cannot_score_is_refused_and_builds_go_on(pool, tmp_path, db_url) -> None:
    """An export's active config with malformed params (weight_bounds "ab", a source weight "x") was added and
    activated, and every context build of every owner then failed with a traceback (TypeError in the weight
    clamp). The params are checked like the half-lives: refused naming the field, nothing stored or activated."""
    before = list_configs(pool)
    env = {"DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"}
    for k, (params, field) in enumerate(BAD_PARAMS):
        entry = {"version": 5, "is_active": True, "half_lives": {"task": 7},
                 "mode_weights": {"task": {"plan": 1.1}}, "params": params}
        path = tmp_path / f"scoring_configs_{k}.json"
        path.write_text(json.dumps([entry]))
        if k == 0:  # the command line once, the library for the rest
            refused = run_cli(["scoring", "restore", str(path)], env)
            assert refused.returncode == 2 and field in refused.stderr, refused.stderr
            assert "Traceback" not in refused.stderr
        else:
            with pytest.raises(ValidationError) as err:
                restore_active(pool, path)
            assert err.value.field == field, (params, err.value.field)
        assert list_configs(pool) == before, params
    built = run_cli(["context", "login cookie", "--owner", "alice"], env)
    assert built.returncode == 0, built.stderr


def _owner_rows(url: str, owner: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t} WHERE owner_id = %s", (owner,)).fetchone()[0]
                for t in ("tasks", "learnings", "capabilities", "goals", "events", "memories")}


def test_an_export_folder_is_imported_back_by_one_command(pool, db_url, fresh_url, tmp_path) -> None:
    """`import DIR` takes the folder `export` wrote: every item file, into the export's owner (or --owner); a
    second run changes nothing; one bad row in any file means nothing is written from any file."""
    load_demo(pool)
    folder = tmp_path / "exp"
    env = {"MEMORY_PIPELINES_EMBEDDER": "fake"}
    exported = run_cli(["export", "--owner", "team-beta", str(folder)], {**env, "DATABASE_URL": db_url})
    assert exported.returncode == 0, exported.stderr
    manifest = json.loads((folder / "manifest.json").read_text())
    into = {**env, "DATABASE_URL": fresh_url}

    first = run_cli(["import", str(folder)], into)
    assert first.returncode == 0, first.stderr
    assert "into owner team-beta" in first.stdout
    counts = _owner_rows(fresh_url, "team-beta")
    assert counts == {name.split(".")[0]: manifest["files"][name] for name in FILES.values()}, counts
    assert sum(counts.values()) > 100

    again = run_cli(["import", str(folder), "--json"], into)
    assert again.returncode == 0, again.stderr
    files = json.loads(again.stdout)["files"]
    assert [Path(f["path"]).name for f in files] == list(FILES.values())
    assert sum(f["totals"]["created"] + f["totals"]["updated"] for f in files) == 0
    assert sum(f["totals"]["unchanged"] for f in files) == sum(counts.values())
    assert _owner_rows(fresh_url, "team-beta") == counts

    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    with (bad / "learnings.jsonl").open("a") as f:
        f.write(json.dumps({"source": "learning", "key": "x", "title": "t", "category": "nope"}) + "\n")
    refused = run_cli(["import", str(bad), "--owner", "team-copy"], into)
    assert refused.returncode == 1, refused.stdout
    line = manifest["files"]["learnings.jsonl"] + 1
    assert f"learnings.jsonl:{line}: category:" in refused.stderr, refused.stderr
    assert "nothing written from any file" in refused.stdout
    assert sum(_owner_rows(fresh_url, "team-copy").values()) == 0

    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "tasks.jsonl").write_text((folder / "tasks.jsonl").read_text())
    for args, named in ((["import", str(tmp_path / "loose")], "not an export folder"),
                        (["import", str(folder), "--source", "task"], "--source")):
        proc = run_cli(args, into)
        assert proc.returncode == 2 and named in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert sum(_owner_rows(fresh_url, "team-copy").values()) == 0


def test_the_library_imports_a_file_or_an_export_folder(runtime, pool, db_url, tmp_path) -> None:
    """`Memory.import_path`: a folder into another owner (every file, counts as exported), one file of it, and a
    --source given with a folder refused naming `source`, nothing written."""
    load_demo(pool)
    memory = Memory(runtime, llm=None)
    manifest = memory.export("solo-gamma", tmp_path / "exp")
    report = memory.import_path(tmp_path / "exp", owner="gamma-copy")
    assert report["owner"] == "gamma-copy" and not report["refused"] and report["stopped"] is None
    counts = _owner_rows(db_url, "gamma-copy")
    assert counts == {name.split(".")[0]: manifest["files"][name] for name in FILES.values()}, counts
    one = memory.import_path(tmp_path / "exp" / "goals.jsonl", owner="gamma-goals")
    assert one["totals"]["created"] == manifest["files"]["goals.jsonl"] > 0
    with pytest.raises(ValidationError) as refused:
        memory.import_path(tmp_path / "exp", owner="gamma-none", source="task")
    assert refused.value.field == "source"
    assert sum(_owner_rows(db_url, "gamma-none").values()) == 0
