"""The embedded sources: where each lives and which words of it are embedded and keyword-indexed.

The indexed text is the item's own words plus the context a question would name (type, project,
speaker, date), so that "what did Alice decide in March" can match.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """One table whose rows are embedded and keyword-indexed."""

    name: str
    table: str
    id_type: str
    from_sql: str
    text_sql: str
    active_sql: str = "t.is_active"


_DATE = "to_char(t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')"

SOURCES: dict[str, Source] = {
    "task": Source(
        name="task",
        table="tasks",
        id_type="uuid",
        from_sql="tasks t",
        text_sql=(
            "t.title || E'\\n' || t.description || E'\\n[task · ' || coalesce(t.task_type, '-') || ' · '"
            f" || t.status || coalesce(' · ' || t.project_key, '') || ' · ' || {_DATE} || ']'"
        ),
    ),
    "learning": Source(
        name="learning",
        table="learnings",
        id_type="uuid",
        from_sql="learnings t",
        text_sql=(
            "t.title || E'\\n' || t.content || E'\\n[learning · ' || coalesce(t.task_type, '-')"
            " || coalesce(' · ' || t.failure_class, '') || coalesce(' · ' || t.category, '')"
            f" || ' · ' || {_DATE} || ']'"
        ),
    ),
    "capability": Source(
        name="capability",
        table="capabilities",
        id_type="uuid",
        from_sql="capabilities t",
        text_sql="t.name || E'\\n' || t.description",
    ),
    "fragment": Source(
        name="fragment",
        table="fragments",
        id_type="text",
        from_sql="fragments t JOIN memories m ON m.id = t.memory_id JOIN projects p ON p.id = m.project_id",
        text_sql=(
            "coalesce(m.speaker || ': ', '') || t.content || E'\\n[' || p.project_name || ' · ' || m.content_type"
            " || ' · ' || to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') || ']'"
        ),
        active_sql="m.is_active",
    ),
}

EMBEDDED_SOURCES = ("task", "learning", "capability", "fragment")
