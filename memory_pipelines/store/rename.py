"""Renaming a project: its key stays (the stable id writes and filters use), its name changes everywhere it is
shown and in the text the model reads of its memories, which the next refresh embeds and indexes again."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ..infra.db import transaction
from ..infra.errors import NotFoundError, ValidationError
from ..vocabulary import MAX_NAME
from .ingest import validate_owner
from .ingest.inputs import _opt_str
from .ingest.rows import lock_project
from .projects import key_hint, project_key_from_name


def rename_project(pool: ConnectionPool, owner: str, project_key: str, project_name: str) -> dict[str, Any]:
    """Give the owner's project `project_key` the name `project_name`. NotFoundError for an unknown key; a
    ValidationError naming `project_name` when the name is another of her projects' name or the key it derives
    (a write giving only that name would then file its memory there, not here)."""
    owner = validate_owner(owner)
    key = _opt_str("project_key", project_key, MAX_NAME)
    name = _opt_str("project_name", project_name, MAX_NAME)
    if key is None or name is None:
        raise ValidationError("project_key" if key is None else "project_name", "is required")
    with transaction(pool) as conn:
        row = conn.execute("SELECT id::text, project_name FROM projects WHERE owner_id = %s AND project_key = %s"
                           " FOR UPDATE", (owner, key)).fetchone()
        if row is None:
            raise NotFoundError(f"no project {key!r}{key_hint(conn, owner, key)}")
        project_id, previous = row
        if name != previous:
            _check_free(conn, owner, project_id, name)
            lock_project(conn, project_id)  # an ingest in flight reads the name it indexes its fragments with
            # the trigger projects_fragments_hash (sql/005) rehashes its fragments: the next refresh embeds them
            conn.execute("UPDATE projects SET project_name = %s, updated_at = now() WHERE id = %s",
                         (name, project_id))
        pending = conn.execute(
            "SELECT count(*) FROM fragments f JOIN memories m ON m.id = f.memory_id"
            " WHERE m.project_id = %s AND (f.embedding IS NULL OR f.embedded_hash IS DISTINCT FROM f.content_hash)",
            (project_id,)).fetchone()[0]
    return {"project_key": key, "project_name": name, "previous_name": previous, "renamed": name != previous,
            "fragments_pending": int(pending)}


def _check_free(conn: psycopg.Connection, owner: str, project_id: str, name: str) -> None:
    """ValidationError('project_name') when another project of the owner answers to `name`."""
    other = conn.execute(
        "SELECT project_key FROM projects WHERE owner_id = %s AND id <> %s"
        " AND (project_name = %s OR project_key = %s) ORDER BY project_key LIMIT 1",
        (owner, project_id, name, project_key_from_name(name)),
    ).fetchone()
    if other is not None:
        raise ValidationError("project_name", f"{name!r} already names project {other[0]!r} (by its name or the key"
                                              " it derives); give another name")
