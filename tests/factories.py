"""Small helpers that write rows the way the library's users would (plain SQL inserts)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from psycopg import sql
from psycopg.types.json import Jsonb

from memory_pipelines.store.memories import insert_memory, new_memory_id
from memory_pipelines.store.projects import ensure_project


def ago(days: float = 0.0, hours: float = 0.0) -> datetime:
    return datetime.now(UTC) - timedelta(days=days, hours=hours)


def _inserted(conn, table: str, row: dict) -> str:
    """Insert one row ({column: value}) into `table`; the new row's id."""
    query = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING id::text").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, row)),
        sql.SQL(", ").join([sql.Placeholder()] * len(row)))
    return conn.execute(query, tuple(row.values())).fetchone()[0]


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
    return _inserted(conn, "tasks", {
        "owner_id": owner, "title": title, "description": description, "task_type": task_type, "status": status,
        "project_key": project_key, "metadata": Jsonb(metadata or {}), "created_at": ago(days)})


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
    return _inserted(conn, "learnings", {
        "owner_id": owner, "title": title, "content": content, "task_type": task_type,
        "failure_class": failure_class, "trigger_event": trigger_event, "category": category,
        "created_at": ago(days)})


def add_capability(conn, owner: str, name: str, description: str = "", *, days: float = 100.0) -> str:
    return _inserted(conn, "capabilities",
                     {"owner_id": owner, "name": name, "description": description, "created_at": ago(days)})


def add_goal(
    conn, owner: str, title: str, *, status: str = "in_progress", priority: int = 1, progress: int = 40
) -> str:
    return _inserted(conn, "goals",
                     {"owner_id": owner, "title": title, "status": status, "priority": priority, "progress": progress})


def add_event(conn, owner: str, type_: str, payload: dict, *, hours: float = 1.0) -> str:
    return _inserted(conn, "events",
                     {"owner_id": owner, "type": type_, "payload": Jsonb(payload), "created_at": ago(hours=hours)})


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


def add_auth_history(conn, owner: str, *, goal: str, tasks: int, error: str) -> None:
    """A goal, `tasks` login auth-error tasks five days apart, the learning they taught and a recent failure."""
    add_goal(conn, owner, goal, priority=0)
    for i in range(tasks):
        add_task(conn, owner, f"login auth error {i}", f"token expired variant {i}", days=1 + 5 * i)
    add_learning(conn, owner, "auth error: expired token", "refresh before expiry", days=20)
    add_event(conn, owner, "task_failed", {"error": error}, hours=3)


def waiting_on_a_lock(pool, seconds: float = 10.0) -> bool:
    """Whether some session of the test database waits on a lock within `seconds` (a race caught midway)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with pool.connection() as conn:
            if conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                            " AND datname = current_database()").fetchone()[0]:
                return True
        time.sleep(0.05)
    return False
