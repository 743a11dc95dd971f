"""Load the demo corpus (package data) into the database, idempotently.

Every row's id derives from its stable key (uuid5), and inserts skip existing ids, so loading twice
changes nothing. Ages in the file are relative; they are resolved against `now` at first load.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from ..store.memories import insert_memory
from ..store.projects import ensure_project

NAMESPACE = uuid.UUID("6f1d2c1e-4b0a-4f55-9a64-0d6f5e1b7c01")


def stable_id(key: str) -> uuid.UUID:
    """The uuid of a corpus row, stable across loads and machines."""
    return uuid.uuid5(NAMESPACE, key)


def read_demo() -> dict[str, Any]:
    """The demo corpus as a dict of sections."""
    text = resources.files("memory_pipelines.demo").joinpath("data/demo.json").read_text(encoding="utf-8")
    return json.loads(text)


def _at(now: datetime, item: dict) -> datetime:
    if "age_hours" in item:
        return now - timedelta(hours=float(item["age_hours"]))
    return now - timedelta(days=float(item.get("age_days", 0)))


_ROWS = {
    "tasks": (
        "INSERT INTO tasks (id, owner_id, title, description, task_type, status, project_key, metadata,"
        " created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
        lambda i, at: (
            i["title"],
            i.get("description", ""),
            i.get("task_type"),
            i.get("status", "pending"),
            i.get("project_key"),
            Jsonb(i.get("metadata") or {}),
            at,
            at,
        ),
    ),
    "learnings": (
        "INSERT INTO learnings (id, owner_id, title, content, task_type, failure_class, trigger_event, category,"
        " metadata, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (id) DO NOTHING",
        lambda i, at: (
            i["title"],
            i.get("content", ""),
            i.get("task_type"),
            i.get("failure_class"),
            i.get("trigger_event"),
            i.get("category"),
            Jsonb(i.get("metadata") or {}),
            at,
            at,
        ),
    ),
    "capabilities": (
        "INSERT INTO capabilities (id, owner_id, name, description, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        lambda i, at: (i["name"], i.get("description", ""), at, at),
    ),
    "goals": (
        "INSERT INTO goals (id, owner_id, title, description, status, priority, progress, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
        lambda i, at: (
            i["title"],
            i.get("description", ""),
            i.get("status", "pending"),
            i.get("priority", 2),
            i.get("progress", 0),
            at,
            at,
        ),
    ),
    "events": (
        "INSERT INTO events (id, owner_id, type, payload, created_at) VALUES (%s, %s, %s, %s, %s)"
        " ON CONFLICT (id) DO NOTHING",
        lambda i, at: (i["type"], Jsonb(i.get("payload") or {}), at),
    ),
}


def load_demo(
    pool: ConnectionPool, now: datetime | None = None, corpus: dict | None = None
) -> dict[str, int]:
    """Insert the demo corpus; returns rows inserted per section (all zero on a second load)."""
    now = now or datetime.now(UTC)
    corpus = corpus or read_demo()
    inserted: dict[str, int] = {}
    with pool.connection() as conn, conn.transaction():
        for section, (sql, values) in _ROWS.items():
            count = 0
            with conn.cursor() as cur:
                for item in corpus.get(section, []):
                    cur.execute(sql, (stable_id(item["key"]), item["owner"], *values(item, _at(now, item))))
                    count += cur.rowcount
            inserted[section] = count
        count = 0
        for item in corpus.get("memories", []):
            project_id = ensure_project(conn, item["owner"], item["project_key"], item.get("project_name"))
            count += insert_memory(
                conn,
                memory_id="mem_" + stable_id(item["key"]).hex[:20],
                owner_id=item["owner"],
                project_id=project_id,
                content_type=item["content_type"],
                content=item["content"],
                created_at=_at(now, item),
                speaker=item.get("speaker"),
                metadata=item.get("metadata"),
            )
        inserted["memories"] = count
    return inserted
