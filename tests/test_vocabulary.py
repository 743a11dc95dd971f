"""One vocabulary: the database, the scoring defaults and every surface agree with `vocabulary.py`."""

from __future__ import annotations

import re

from memory_pipelines import vocabulary as v
from memory_pipelines.context.config import active_config
from memory_pipelines.context.scoring import ScoringConfig
from memory_pipelines.surfaces.cli.main import build_parser
from memory_pipelines.surfaces.http import models, responses


def _check_values(conn, table: str, column: str) -> set[str]:
    """The values a `CHECK (column IN (...))` constraint of `table` allows."""
    rows = conn.execute(
        "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c WHERE c.conrelid = %s::regclass AND c.contype = 'c'",
        (table,),
    ).fetchall()
    for (definition,) in rows:
        if column in definition and "ANY" in definition:
            return set(re.findall(r"'([^']+)'::text", definition))
    raise AssertionError(f"no CHECK on {table}.{column}")


def test_the_content_type_check_matches_the_vocabulary(pool):
    with pool.connection() as conn:
        assert _check_values(conn, "memories", "content_type") == set(v.CONTENT_TYPES)


def test_the_stored_default_config_is_the_vocabulary_default(pool):
    stored = active_config(pool)
    default = ScoringConfig()
    assert stored.half_lives == default.half_lives == v.seed_half_lives()
    assert stored.mode_weights == default.mode_weights == v.seed_mode_weights()
    assert set(default.mode_weights) == set(v.SOURCE_NAMES)
    assert all(set(w) == set(v.CONTEXT_MODES) for w in default.mode_weights.values())


def test_every_vector_table_and_index_is_in_the_database(pool):
    with pool.connection() as conn:
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
        for table, column, index in v.VECTOR_COLUMNS:
            row = conn.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_name = %s AND column_name = %s", (table, column)
            ).fetchone()
            assert row is not None, (table, column)
            if index:
                assert index in indexes, index


def test_surfaces_offer_exactly_the_vocabulary():
    schema = models.ContextRequest.model_json_schema()
    assert tuple(schema["properties"]["mode"]["enum"]) == v.CONTEXT_MODES
    budget = schema["properties"]["tokenBudget"]
    assert (budget["minimum"], budget["maximum"], budget["default"]) == (v.MIN_BUDGET, v.MAX_BUDGET, v.DEFAULT_BUDGET)
    ingest = models.IngestRequest.model_json_schema()
    assert tuple(ingest["properties"]["content_type"]["enum"]) == v.CONTENT_TYPES
    assert ingest["properties"]["content"]["maxLength"] == v.MAX_CONTENT
    assert tuple(responses.Detail.model_json_schema()["properties"]["level"]["enum"]) == v.DETAIL_SOURCES
    assert tuple(responses.Match.model_json_schema()["properties"]["level"]["enum"]) == v.SEARCH_SOURCES

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    context_mode = next(a for a in sub.choices["context"]._actions if a.dest == "mode")
    search_mode = next(a for a in sub.choices["search"]._actions if a.dest == "mode")
    search_source = next(a for a in sub.choices["search"]._actions if a.dest == "source")
    assert tuple(context_mode.choices) == v.CONTEXT_MODES
    assert tuple(search_mode.choices) == v.SEARCH_MODES
    assert tuple(search_source.choices) == v.SEARCH_SOURCES


def test_lock_namespaces_are_distinct():
    assert len({v.LOCK_MIGRATE, v.LOCK_PROJECT, v.LOCK_INDEX}) == 3


def test_mcp_tools_offer_exactly_the_vocabulary(runtime):
    import anyio

    from memory_pipelines import Memory
    from memory_pipelines.surfaces.mcp import build_server, config_owner

    server = build_server(Memory(runtime, llm=None), config_owner("alice"))
    tools = {t.name: t.input_schema for t in anyio.run(server.list_tools)}
    context = tools["mem.context"]["properties"]
    assert tuple(context["mode"]["enum"]) == v.CONTEXT_MODES
    assert (context["token_budget"]["minimum"], context["token_budget"]["maximum"]) == (v.MIN_BUDGET, v.MAX_BUDGET)
    ingest = tools["mem.ingest_memory"]["properties"]
    assert tuple(ingest["content_type"]["enum"]) == v.CONTENT_TYPES
    assert ingest["content"]["maxLength"] == v.MAX_CONTENT
    assert tools["mem.search"]["properties"]["limit"]["maximum"] == v.MAX_SEARCH_LIMIT
    assert _nonstandard(tools) == []  # pydantic writes bounds set after a validator as ge / le: clients ignore them


def _nonstandard(schema: object, path: str = "") -> list[str]:
    """Paths of pydantic's constraint names (ge, le, gt, lt) where JSON Schema says minimum / maximum."""
    if isinstance(schema, dict):
        here = [f"{path}/{k}" for k in schema if k in ("ge", "le", "gt", "lt")]
        return here + [p for k, val in schema.items() for p in _nonstandard(val, f"{path}/{k}")]
    if isinstance(schema, list):
        return [p for val in schema for p in _nonstandard(val, path)]
    return []
