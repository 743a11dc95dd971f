"""Renaming a project: its key stays (the stable id writes and filters use), its name changes everywhere it is
shown and in the text the model reads of its memories, which the next refresh embeds and indexes again."""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool

from ..infra.db import transaction
from ..infra.errors import NotFoundError, ValidationError
from ..vocabulary import MAX_NAME
from .ingest import validate_owner
from .ingest.inputs import _opt_str
from .ingest.rows import lock_project
from .projects import check_name_free, key_hint, lock_project_names


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
        lock_project_names(conn, owner)  # before the row, as a write creating a project takes them
        row = conn.execute("SELECT id::text, project_name FROM projects WHERE owner_id = %s AND project_key = %s"
                           " FOR UPDATE", (owner, key)).fetchone()
        if row is None:
            raise NotFoundError(f"no project {key!r}{key_hint(conn, owner, key)}")
        project_id, previous = row
        if name != previous:
            check_name_free(conn, owner, key, name)
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

