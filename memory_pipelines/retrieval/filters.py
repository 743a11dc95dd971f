"""What a search is narrowed to, and the SQL that narrows it: every filter applies inside the query, before
the limit."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from ..infra.errors import ValidationError
from ..vocabulary import CONTENT_TYPES, MAX_NAME, RANKED_SOURCES, SEARCH_SOURCES, SOURCES


@dataclass(frozen=True)
class SearchFilters:
    """Filters applied inside every query. `memory_types` keeps only memories of those content types;
    `exclude_session` leaves out the memories written with that session (the conversation a query is part of,
    whose turns its caller holds already)."""

    sources: tuple[str, ...] = SEARCH_SOURCES
    memory_types: tuple[str, ...] | None = None
    project: str | None = None
    time_range_days: float | None = None
    as_of: datetime | None = None
    exclude_session: str | None = None

    def validated(self) -> SearchFilters:
        bad = [s for s in self.sources if s not in RANKED_SOURCES]
        if bad or not self.sources:
            raise ValidationError(
                "sources", f"must be a non-empty subset of {list(RANKED_SOURCES)}, got {bad}"
            )
        if self.memory_types is not None:
            wrong = [t for t in self.memory_types if t not in CONTENT_TYPES]
            if wrong or not self.memory_types:
                raise ValidationError("memory_types", f"must be a non-empty subset of {list(CONTENT_TYPES)}")
        if self.time_range_days is not None and not self.time_range_days > 0:
            raise ValidationError("time_range_days", "must be a positive number of days")
        if self.exclude_session is not None and (
            not isinstance(self.exclude_session, str) or not self.exclude_session.strip()
            or len(self.exclude_session) > MAX_NAME
        ):
            raise ValidationError("exclude_session", f"must be a non-empty string of at most {MAX_NAME} characters")
        sources = self.sources
        if self.memory_types is not None:
            chunked = tuple(s for s in SEARCH_SOURCES if SOURCES[s].chunked)  # content types are theirs
            sources = tuple(s for s in sources if s in chunked) or chunked
        session = self.exclude_session.strip() if self.exclude_session is not None else None
        return replace(self, sources=sources, exclude_session=session)


def where_clauses(source: str, owner: str, f: SearchFilters, params: dict) -> list[str]:
    """WHERE clauses (with their parameters added to `params`) for one source."""
    params["owner"] = owner
    src = SOURCES[source]
    clauses = ["t.owner_id = %(owner)s", src.active_sql]
    if f.project is not None:
        params["project"] = f.project
        clauses.append(f"{src.project_sql} = %(project)s" if src.project_sql else "false")
    if f.memory_types is not None and src.chunked:
        params["memory_types"] = list(f.memory_types)
        clauses.append("t.content_type = ANY(%(memory_types)s)")
    if f.exclude_session is not None and src.chunked:  # memories are the source written with sessions
        params["exclude_session"] = f.exclude_session
        clauses.append("t.session IS DISTINCT FROM %(exclude_session)s")
    if f.as_of is not None:
        params["as_of"] = f.as_of
        clauses.append("t.created_at <= %(as_of)s")
    if f.time_range_days is not None:
        params["since"] = (f.as_of or datetime.now(UTC)) - timedelta(days=f.time_range_days)
        clauses.append("t.created_at >= %(since)s")
    return clauses


def has_extra_filters(f: SearchFilters) -> bool:
    """Filters beyond the owner that can make the set much smaller than the owner's rows."""
    return any(x is not None for x in (f.project, f.memory_types, f.time_range_days, f.as_of))
