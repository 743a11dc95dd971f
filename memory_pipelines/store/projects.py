"""Projects: one per (owner_id, project_key)."""

from __future__ import annotations

import re

import psycopg

_KEY = re.compile(r"[^a-z0-9\u4e00-\u9fff]+")


def project_key_from_name(name: str) -> str:
    """A stable key from a project name: lower case, runs of other characters become '-'."""
    key = _KEY.sub("-", name.strip().lower()).strip("-")
    return key or "default"


def ensure_project(
    conn: psycopg.Connection,
    owner_id: str,
    project_key: str,
    project_name: str | None = None,
    machine_name: str | None = None,
    project_path: str | None = None,
) -> str:
    """The id of the owner's project with this key, created when absent (safe under concurrency)."""
    row = conn.execute(
        "INSERT INTO projects (owner_id, project_key, project_name, machine_name, project_path)"
        " VALUES (%s, %s, %s, %s, %s)"
        " ON CONFLICT (owner_id, project_key) DO UPDATE SET updated_at = now(),"
        "   machine_name = coalesce(excluded.machine_name, projects.machine_name),"
        "   project_path = coalesce(excluded.project_path, projects.project_path)"
        " RETURNING id",
        (owner_id, project_key, project_name or project_key, machine_name, project_path),
    ).fetchone()
    return str(row[0])
