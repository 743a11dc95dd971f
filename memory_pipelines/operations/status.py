"""What `memory-pipelines status` reports: database, pgvector, model, rows and embeddings per table."""

from __future__ import annotations

from typing import Any

from ..index.keywords import keyword_stale
from ..index.owner_indexes import existing_owner_indexes, missing_owner_indexes, owner_index_tables
from ..index.vectors import count_pending
from ..infra.db import describe_url, pgvector_version
from ..infra.embedded import embedded_pgdata
from ..infra.migrate import missing_vector_indexes, stored_dimension
from ..infra.prewarm import cache_warmth
from ..runtime import Runtime
from ..vocabulary import INDEXED, INDEXED_NAMES
from .retention import format_log_status, log_status

_PLAIN_TABLES = (
    "goals",
    "events",
    "projects",
    "memories",
    "memory_versions",
    "memory_arbitrations",
    "keyword_docs",
    "retrievals",
    "retrieval_candidates",
    "api_keys",
)


def collect_status(rt: Runtime) -> dict[str, Any]:
    """Counts and configuration as a plain dict."""
    with rt.pool.connection() as conn:
        stored = stored_dimension(conn)
        info: dict[str, Any] = {
            "database": describe_url(rt.url),
            "embedded": rt.settings.database_url is None,
            "postgres": conn.execute("SHOW server_version").fetchone()[0],
            "pgvector": ".".join(map(str, pgvector_version(conn))),
            "model": rt.embedder.model_name,
            "dimension": rt.embedder.dimension,
            "database_dimension": stored[0] if stored else None,
            "migrations": [r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY version")],
            "missing_indexes": missing_vector_indexes(conn),
            # owners over the exact-scan cap whose graph is missing: name -> [table, owner, embedded rows]
            "missing_owner_indexes": {name: list(v) for name, v in missing_owner_indexes(conn).items()},
            "owner_indexes": {},
            "embedded_sources": {},
            "tables": {},
            # the embedded server's files are on this machine: how warm they are (infra/prewarm.py)
            "page_cache": cache_warmth(conn, embedded_pgdata(rt.settings))
            if rt.settings.database_url is None else None,
        }
        for name in INDEXED_NAMES:
            pending, active = count_pending(conn, name, rt.embedder.model_name)
            info["embedded_sources"][INDEXED[name].table] = {
                "active": active,
                "embedded": active - pending,
                "pending": pending,
                # rows the next keyword refresh (re)indexes: changed since, or marked by a re-indexing migration
                "keywords_pending": keyword_stale(conn, name)[0],
            }
        for table, _column in owner_index_tables():
            if found := existing_owner_indexes(conn, table):
                valid = sum(found.values())
                info["owner_indexes"][table] = {"valid": valid, "invalid": len(found) - valid}
        for table in _PLAIN_TABLES:
            info["tables"][table] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        info["log"] = log_status(conn)  # the retrieval log's size and oldest rows kept (retention)
    return info


def format_status(info: dict[str, Any]) -> str:
    """Human-readable status."""
    lines = [
        f"database   {info['database']} ({'embedded' if info['embedded'] else 'DATABASE_URL'}), "
        f"PostgreSQL {info['postgres']}, pgvector {info['pgvector']}",
        f"model      {info['model']} ({info['dimension']} d; database built for {info['database_dimension']} d)",
        f"migrations {', '.join(info['migrations'])}",
        "",
        f"{'table':<22}{'rows':>8}{'embedded':>10}{'pending':>9}{'keywords pending':>18}",
    ]
    problems = [f"HNSW index {name} is missing (search scans exactly, slowly). Fix: memory-pipelines migrate"
                f" (or embed)" for name in info["missing_indexes"]]
    problems += [f"HNSW index {name} is missing: owner {owner!r} holds {rows:,} embedded rows of {table} and her "
                 "searches scan them exactly, slowly. Fix: memory-pipelines migrate (or embed)"
                 for name, (table, owner, rows) in info["missing_owner_indexes"].items()]
    problems += [f"{c['invalid']} owner HNSW index(es) on {table} are invalid (a build was interrupted). Fix: "
                 "memory-pipelines migrate" for table, c in info["owner_indexes"].items() if c["invalid"]]
    lines[3:3] = [f"PROBLEM    {p}" for p in problems]
    for table, c in info["embedded_sources"].items():
        lines.append(f"{table:<22}{c['active']:>8}{c['embedded']:>10}{c['pending']:>9}{c['keywords_pending']:>18}")
    for table, n in info["tables"].items():  # events twice: the embedded (live, ranked) ones above, every row here
        label = f"{table} (all rows)" if table in info["embedded_sources"] else table
        lines.append(f"{label:<22}{n:>8}")
    for table, c in info["owner_indexes"].items():
        lines.append(f"owner indexes on {table}: {c['valid']}")
    if warmth := info.get("page_cache"):
        lines.insert(3, f"page cache {warmth['resident_share']:.0%} of the {warmth['megabytes']:,.1f} MB the server "
                        f"reads most ({warmth['relations']} relations; `serve` and `mcp` prewarm them at start)")
    if "log" in info:
        lines += ["", *format_log_status(info["log"])]
    return "\n".join(lines)
