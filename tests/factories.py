"""Small helpers that write rows the way the library's users would (plain SQL inserts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from psycopg.types.json import Jsonb

from memory_pipelines.store.memories import insert_memory, new_memory_id
from memory_pipelines.store.projects import ensure_project


def ago(days: float = 0.0, hours: float = 0.0) -> datetime:
    return datetime.now(UTC) - timedelta(days=days, hours=hours)


def add_task(
    conn,
    owner: str,
    title: str,
    description: str = "",
    *,
    days: float = 1.0,
    task_type: str = "dev",
    status: str = "completed",
    project_key: str | None = None,
    metadata: dict | None = None,
) -> str:
    row = conn.execute(
        "INSERT INTO tasks (owner_id, title, description, task_type, status, project_key, metadata, created_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id::text",
        (owner, title, description, task_type, status, project_key, Jsonb(metadata or {}), ago(days)),
    ).fetchone()
    return row[0]


def add_learning(
    conn,
    owner: str,
    title: str,
    content: str = "",
    *,
    days: float = 1.0,
    task_type: str | None = "dev",
    failure_class: str | None = None,
    trigger_event: str | None = None,
    category: str | None = "insight",
) -> str:
    row = conn.execute(
        "INSERT INTO learnings (owner_id, title, content, task_type, failure_class, trigger_event, category,"
        " created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id::text",
        (owner, title, content, task_type, failure_class, trigger_event, category, ago(days)),
    ).fetchone()
    return row[0]


def add_capability(conn, owner: str, name: str, description: str = "", *, days: float = 100.0) -> str:
    row = conn.execute(
        "INSERT INTO capabilities (owner_id, name, description, created_at) VALUES (%s, %s, %s, %s)"
        " RETURNING id::text",
        (owner, name, description, ago(days)),
    ).fetchone()
    return row[0]


def add_goal(
    conn, owner: str, title: str, *, status: str = "in_progress", priority: int = 1, progress: int = 40
) -> str:
    row = conn.execute(
        "INSERT INTO goals (owner_id, title, status, priority, progress) VALUES (%s, %s, %s, %s, %s)"
        " RETURNING id::text",
        (owner, title, status, priority, progress),
    ).fetchone()
    return row[0]


def add_event(conn, owner: str, type_: str, payload: dict, *, hours: float = 1.0) -> str:
    row = conn.execute(
        "INSERT INTO events (owner_id, type, payload, created_at) VALUES (%s, %s, %s, %s) RETURNING id::text",
        (owner, type_, Jsonb(payload), ago(hours=hours)),
    ).fetchone()
    return row[0]


def add_memory(
    conn,
    owner: str,
    content: str,
    *,
    project: str = "demo",
    content_type: str = "insight",
    days: float = 1.0,
    speaker: str | None = None,
) -> str:
    project_id = ensure_project(conn, owner, project, project)
    memory_id = new_memory_id()
    insert_memory(
        conn,
        memory_id=memory_id,
        owner_id=owner,
        project_id=project_id,
        content_type=content_type,
        content=content,
        created_at=ago(days),
        speaker=speaker,
    )
    return memory_id
