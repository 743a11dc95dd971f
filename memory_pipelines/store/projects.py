"""Projects: one per (owner_id, project_key)."""

from __future__ import annotations

import re

import psycopg

from ..infra.errors import ValidationError
from ..vocabulary import LOCK_PROJECT_NAMES

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
    """The id of the owner's project with this key, created when absent (safe under concurrency). A new project
    may not take a name another of her projects answers to: ValidationError('project_name')."""
    name = project_name or project_key
    exists = conn.execute("SELECT 1 FROM projects WHERE owner_id = %s AND project_key = %s",
                          (owner_id, project_key)).fetchone()
    if exists is None:
        lock_project_names(conn, owner_id)
        check_name_free(conn, owner_id, project_key, name)
    row = conn.execute(
        "INSERT INTO projects (owner_id, project_key, project_name, machine_name, project_path)"
        " VALUES (%s, %s, %s, %s, %s)"
        " ON CONFLICT (owner_id, project_key) DO UPDATE SET updated_at = now(),"
        "   machine_name = coalesce(excluded.machine_name, projects.machine_name),"
        "   project_path = coalesce(excluded.project_path, projects.project_path)"
        " RETURNING id",
        (owner_id, project_key, name, machine_name, project_path),
    ).fetchone()
    return str(row[0])


def lock_project_names(conn: psycopg.Connection, owner: str) -> None:
    """Serialise the owner's project creations and renames until the transaction ends."""
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LOCK_PROJECT_NAMES, owner))


def check_name_free(conn: psycopg.Connection, owner: str, project_key: str, name: str) -> None:
    """ValidationError('project_name') when a project of the owner other than `project_key` answers to `name` (by
    its name, or by the key the name derives): a write giving only that name would file its memory there."""
    other = conn.execute(
        "SELECT project_key FROM projects WHERE owner_id = %s AND project_key <> %s"
        " AND (project_name = %s OR project_key = %s) ORDER BY project_key LIMIT 1",
        (owner, project_key, name, project_key_from_name(name)),
    ).fetchone()
    if other is not None:
        raise ValidationError("project_name", f"{name[:60]!r} already names project {other[0]!r} (by its name or"
                                              " the key it derives); give that project's key or another name")


def key_for_name(conn: psycopg.Connection, owner: str, name: str) -> str | None:
    """The key of the owner's project a name means: the key it derives if that project exists, else the first
    project of that name (one a rename gave it); None if neither exists."""
    derived = project_key_from_name(name)
    row = conn.execute(
        "SELECT project_key FROM projects WHERE owner_id = %s AND (project_key = %s OR project_name = %s)"
        " ORDER BY project_key = %s DESC, created_at LIMIT 1",
        (owner, derived, name.strip(), derived),
    ).fetchone()
    return row[0] if row else None


def key_hint(conn: psycopg.Connection, owner: str, name: str) -> str:
    """A hint for a project name given as its key: the keys of the owner's projects named so, or ''."""
    keys = [r[0] for r in conn.execute(
        "SELECT project_key FROM projects WHERE owner_id = %s AND project_name = %s ORDER BY project_key",
        (owner, name))]
    if not keys:
        return ""
    if len(keys) == 1:
        return f" (key); the project named {name!r} has key {keys[0]!r}"
    return f" (key); the projects named {name!r} have keys {', '.join(repr(k) for k in keys)}"
