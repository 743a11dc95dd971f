"""Numbered SQL migrations from `sql/`, applied once each under an advisory lock.

Migration text may contain `{{EMBED_DIM}}`, replaced by the configured model's dimension. The
dimension is recorded in `meta`; a start with a model of another dimension stops with a message
that says how to switch (`memory-pipelines migrate --reembed`).
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg

from ..vocabulary import LOCK_INDEX, LOCK_MIGRATE, VECTOR_COLUMNS
from .db import connect, describe_url
from .errors import ConfigError

log = logging.getLogger(__name__)

INDEX_BUILD_MEMORY_MIN_MB = 512
INDEX_GRAPH_BYTES_PER_ROW = 800  # an element's neighbour lists and header, beside its vector (m = 16)


def index_build_memory_mb(rows: int, dimension: int, total_memory: int | None = None) -> int:
    """maintenance_work_mem (MB) for an HNSW build over `rows` vectors: enough for the whole graph, since
    pgvector builds far slower once it no longer fits ("hnsw graph no longer fits into maintenance_work_mem"),
    from 512 MB up to a quarter of the machine's memory. About 2.3 kB a row at 384 dimensions: 1M rows, 2.6 GB."""
    if total_memory is None:
        total_memory = psutil.virtual_memory().total
    need = rows * (4 * dimension + INDEX_GRAPH_BYTES_PER_ROW) * 1.2 / (1 << 20)
    return int(max(INDEX_BUILD_MEMORY_MIN_MB, min(need, total_memory / 4 / (1 << 20))))

_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")



@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]


def sql_dir() -> Path:
    """The migrations folder: packaged copy first, else the repository's `sql/`."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "sql"  # in a wheel: memory_pipelines/sql
    return packaged if packaged.is_dir() else package.parent / "sql"


def load_migrations(folder: Path | None = None) -> list[Migration]:
    """All migrations in version order."""
    folder = folder or sql_dir()
    found = []
    for path in sorted(folder.glob("*.sql")):
        match = _NAME.match(path.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), path.read_text(encoding="utf-8")))
    return found


def _render(sql: str, dimension: int) -> str:
    if not isinstance(dimension, int) or not 1 <= dimension <= 16000:
        raise ConfigError(f"embedding dimension {dimension!r} is not a positive integer up to 16000")
    return sql.replace("{{EMBED_DIM}}", str(dimension))


def migrate(url: str, dimension: int, model_name: str, *, restore_indexes: bool = False) -> list[str]:
    """Apply pending migrations; return the names applied. Safe to call from many processes at once.

    `restore_indexes` (the `migrate` command) also builds any missing HNSW index no load is building; a
    surface's start only warns of one (a build on a large table would hold the start for minutes)."""
    applied: list[str] = []
    with connect(url, vector=False, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.errors.UniqueViolation:
            pass  # another process created it between our check and create
        except psycopg.Error as exc:
            raise ConfigError(
                f"the database at {describe_url(url)} has no pgvector extension and it cannot be created: "
                f"{exc}. Fix: install pgvector on that server (CREATE EXTENSION vector) or unset DATABASE_URL."
            ) from exc
        conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_MIGRATE,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            for mig in load_migrations():
                if mig.version in done:
                    continue
                with conn.transaction():
                    conn.execute(_render(mig.sql, dimension))
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                        (mig.version, mig.name, mig.checksum),
                    )
                    if mig.version == 1:
                        _record_dimension(conn, dimension, model_name)
                applied.append(f"{mig.version:03d}_{mig.name}")
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_MIGRATE,))
        check_dimension(conn, dimension, model_name, url)
        if restore_indexes:
            for position in range(len(VECTOR_COLUMNS)):
                if restore_vector_index(conn, position):
                    applied.append(f"restored {VECTOR_COLUMNS[position][2]}")
                    log.warning("HNSW index %s was missing (an interrupted bulk load?); rebuilt it",
                                VECTOR_COLUMNS[position][2])
        elif missing := missing_vector_indexes(conn):
            log.warning("HNSW indexes missing: %s; `memory-pipelines migrate` or `embed` rebuilds them",
                        ", ".join(missing))
    return applied


def index_exists(conn: psycopg.Connection, index: str) -> bool:
    """Whether the named index exists (in the search path)."""
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (index,)).fetchone()[0]


def missing_vector_indexes(conn: psycopg.Connection) -> list[str]:
    """The HNSW indexes of VECTOR_COLUMNS that do not exist (an interrupted bulk load dropped them)."""
    return [index for _t, _c, index in VECTOR_COLUMNS if index and not index_exists(conn, index)]


def restore_vector_index(conn: psycopg.Connection, position: int) -> bool:
    """Build the HNSW index of VECTOR_COLUMNS[position] if it is missing and no bulk load holds its lock
    (a load in progress builds it itself when done); True when built now.

    Every bulk loader holds (LOCK_INDEX, position) shared while the index is dropped for it; taking it
    exclusively here means none is loading. The caller's open transaction, if any, is committed.
    """
    table, column, index = VECTOR_COLUMNS[position]
    if not index or index_exists(conn, index):
        return False
    if not conn.autocommit:
        conn.commit()
    if not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_INDEX, position)).fetchone()[0]:
        return False
    try:
        if index_exists(conn, index):  # built by another process meanwhile
            return False
        with conn.transaction():
            # The table's row estimate (no extra scan before the build's own) and the column's declared
            # dimension (vector(384) has typmod 384).
            rows, dimension = conn.execute(
                "SELECT greatest(c.reltuples, 0)::bigint, a.atttypmod FROM pg_class c"
                " JOIN pg_attribute a ON a.attrelid = c.oid WHERE c.oid = %s::regclass AND a.attname = %s",
                (table, column),
            ).fetchone()
            memory = index_build_memory_mb(rows, max(dimension, 1))
            conn.execute(f"SET LOCAL maintenance_work_mem = '{memory}MB'")
            conn.execute(f"CREATE INDEX IF NOT EXISTS {index} ON {table} USING hnsw ({column} vector_cosine_ops)")
        log.info("built the missing HNSW index %s on %s", index, table)
        return True
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_INDEX, position))
        if not conn.autocommit:
            conn.commit()


def _record_dimension(conn: psycopg.Connection, dimension: int, model_name: str) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('embedding_dimension', %s), ('embedding_model', %s) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (str(dimension), model_name),
    )


def stored_dimension(conn: psycopg.Connection) -> tuple[int, str] | None:
    """(dimension, model) the database was built for, or None before the first migration."""
    try:
        rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except psycopg.errors.UndefinedTable:
        return None
    if "embedding_dimension" not in rows:
        return None
    return int(rows["embedding_dimension"]), rows.get("embedding_model", "?")


def check_dimension(conn: psycopg.Connection, dimension: int, model_name: str, url: str) -> None:
    """Stop with one clear message when the database was built for another dimension."""
    stored = stored_dimension(conn)
    if stored is None or stored[0] == dimension:
        return
    raise ConfigError(
        f"the database at {describe_url(url)} holds {stored[0]}-d embeddings (model {stored[1]}), but the "
        f"configured model {model_name} makes {dimension}-d vectors. Fix: run `memory-pipelines migrate "
        "--reembed` to switch the database to the new model (stored embeddings are cleared and the next "
        "backfill re-embeds every row), or point DATABASE_URL / MEMORY_PIPELINES_HOME at another database, "
        "or configure the previous model again."
    )


def reembed(url: str, dimension: int, model_name: str) -> None:
    """Switch every vector column to `dimension`, clearing embeddings so the backfill redoes them."""
    with connect(url, vector=False, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_MIGRATE,))
        try:
            with conn.transaction():
                for table, column, index in VECTOR_COLUMNS:
                    if index:
                        conn.execute(f"DROP INDEX IF EXISTS {index}")
                    conn.execute(
                        f"ALTER TABLE {table} ALTER COLUMN {column} TYPE vector({int(dimension)}) USING NULL"
                    )
                    if index:
                        conn.execute(
                            f"CREATE INDEX {index} ON {table} USING hnsw ({column} vector_cosine_ops)"
                        )
                for table in ("tasks", "learnings", "capabilities", "fragments", "memories"):
                    conn.execute(f"UPDATE {table} SET embedding_model = NULL, embedded_hash = NULL")
                conn.execute("UPDATE memories SET embedding_status = 'pending'")
                _record_dimension(conn, dimension, model_name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_MIGRATE,))
