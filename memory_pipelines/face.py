"""`Memory`: the public face. Its methods are what the surfaces (HTTP, MCP, CLI, Dagster's context job) do.

A surface opens one `Memory` (database started or joined and migrated, pool, embedder, chat model),
resolves the caller's owner, calls a method and only encodes the result. Every method takes the owner
first and reads or writes that owner's rows only.

    from memory_pipelines import Memory

    memory = Memory.open()
    memory.ingest("alice", content="Deploys go out on Tuesdays.", content_type="plan", project_name="ops")
    print(memory.context("alice", "when do we deploy?", mode="plan").block)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .runtime import Runtime, open_runtime
from .vocabulary import DEFAULT_BUDGET, SEARCH_SOURCES

if TYPE_CHECKING:
    from pathlib import Path

    from psycopg_pool import ConnectionPool

    from .context.builder import ContextResult
    from .embeddings import Embedder
    from .infra.llm import ChatLLM
    from .infra.settings import Settings
    from .retrieval.search import SearchResult
    from .store.ingest import IngestResult

_UNSET: Any = object()


def _owner(owner: object) -> str:
    """The owner as writes store it (stripped; ValidationError('owner') when blank or unprintable): ' alice '
    reads alice's rows, as it writes them."""
    from .store.ingest import validate_owner

    return validate_owner(owner)


class Memory:
    """One database, its embedder and chat model; the operations every surface offers."""

    def __init__(self, runtime: Runtime, llm: ChatLLM | None = _UNSET) -> None:
        """`llm` defaults to the configured chat model (None: the deterministic fallbacks)."""
        if llm is _UNSET:
            from .infra.llm import ChatLLM

            llm = ChatLLM.from_settings(runtime.settings)
        self.runtime = runtime
        self.llm = llm

    @classmethod
    def open(cls, settings: Settings | None = None, embedder: Embedder | None = None,
             llm: ChatLLM | None = _UNSET) -> Memory:
        """Start or join the database (DATABASE_URL or the embedded server), migrate, open the pool."""
        return cls(open_runtime(settings, embedder), llm)

    @property
    def pool(self) -> ConnectionPool:
        return self.runtime.pool

    @property
    def embedder(self) -> Embedder:
        return self.runtime.embedder

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    # -- operations ------------------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Whether the database answers (within `db.PROBE_WAIT` seconds), and which models serve."""
        from .infra.db import probe

        database = probe(self.pool)
        return {"status": "ok" if database == "ok" else "degraded", "database": database,
                "embedding_model": self.embedder.model_name, "dimension": self.embedder.dimension,
                "llm": getattr(self.llm, "model", None)}

    def owner_of_key(self, key: str | None) -> str | None:
        """The owner of an API key, or None for a missing, malformed, unknown or revoked one."""
        from .infra.auth import resolve_key

        return resolve_key(self.pool, key) if key else None

    def search(self, owner: str, query: str, *, mode: str = "hybrid", sources: Sequence[str] | None = None,
               limit: int = 10, exclude_session: str | None = None) -> SearchResult:
        """Semantic, keyword or hybrid search over the owner's tasks, learnings, capabilities and memories;
        `exclude_session` leaves out the memories of that conversation (the one the query is part of)."""
        from .retrieval.search import SearchFilters, search

        owner = _owner(owner)
        filters = SearchFilters(sources=tuple(sources) if sources else SEARCH_SOURCES, exclude_session=exclude_session)
        return search(self.pool, self.embedder, owner, query, mode=mode, filters=filters, limit=limit)

    def summary(self, owner: str, query: str, *, top_k: int = 5, mode: str = "hybrid",
                exclude_session: str | None = None) -> dict[str, Any]:
        """Progressive disclosure, first layer: id, level, title, similarity, preview per match
        (`exclude_session`: that conversation's memories left out)."""
        from .retrieval.disclosure import summary_search
        from .retrieval.filters import SearchFilters

        owner = _owner(owner)
        return summary_search(self.pool, self.embedder, owner, query, top_k=top_k, mode=mode,
                              filters=SearchFilters(exclude_session=exclude_session))

    def detail(self, owner: str, item_id: str) -> dict[str, Any]:
        """Progressive disclosure, second layer: the full record of one item."""
        from .retrieval.disclosure import detail

        owner = _owner(owner)
        return detail(self.pool, owner, item_id)

    def related(self, owner: str, base_id: str, *, top_k: int = 5, exclude_self: bool = True) -> dict[str, Any]:
        """Progressive disclosure, third layer: the neighbours of one item."""
        from .retrieval.disclosure import related

        owner = _owner(owner)
        return related(self.pool, self.embedder, owner, base_id, top_k=top_k, exclude_self=exclude_self)

    def context(self, owner: str, query: str, *, mode: str = "execute", token_budget: int = DEFAULT_BUDGET,
                task: Mapping[str, Any] | None = None, exclude_session: str | None = None) -> ContextResult:
        """The token-budgeted context block for a query (logged for feedback and tuning). `task`: {task_type,
        failure_class, event_type} of the work at hand; learnings matching it rank higher (the learnings spec).
        `exclude_session`: the conversation the query is part of, whose memories the agent holds already."""
        from .context.builder import build_memory_context

        owner = _owner(owner)
        return build_memory_context(self.pool, self.embedder, owner, query, mode=mode, token_budget=token_budget,
                                    exploration=self.settings.explore_rate, task=task,
                                    exclude_session=exclude_session)

    def feedback(self, owner: str, retrieval_id: str, used_ids: Sequence[str]) -> int:
        """Mark which injected items of one of the owner's builds were used; returns how many were marked."""
        from .context.log import record_feedback

        owner = _owner(owner)
        return record_feedback(self.pool, owner, retrieval_id, used_ids)

    def implicit_feedback(self, owner: str, retrieval_id: str, output: str) -> dict[str, Any]:
        """Mark the injected items of one of the owner's builds that the agent's final `output` (answer, summary,
        diff or tool calls as text) demonstrably used; explicit feedback wins. Returns the marks and evidence."""
        from .context.log import record_implicit_feedback

        owner = _owner(owner)
        return record_implicit_feedback(self.pool, self.embedder, owner, retrieval_id, output)

    def builds(self, owner: str, *, limit: int = 20, cursor: str | None = None) -> dict[str, Any]:
        """The owner's recent context builds, newest first, with their injected items, scores and used marks."""
        from .context.history import recent_builds

        owner = _owner(owner)
        return recent_builds(self.pool, owner, limit=limit, cursor=cursor)

    def build(self, owner: str, retrieval_id: str) -> dict[str, Any]:
        """One of the owner's context builds with every scored candidate, injected or not."""
        from .context.history import build_detail

        owner = _owner(owner)
        return build_detail(self.pool, owner, retrieval_id)

    def hit_rates(self, owner: str, *, days: int = 30) -> dict[str, Any]:
        """Per day of the last `days`: builds, feedback, injected and used items, hit rate used / injected."""
        from .context.history import hit_rates

        owner = _owner(owner)
        return hit_rates(self.pool, owner, days=days)

    def ingest(self, owner: str, *, wait: bool = True, **fields: Any) -> IngestResult:
        """Store one memory: chunked, embedded, summarised, tagged and arbitrated against similar ones. `fields`:
        content, content_type, project_name or project_key, and optionally machine_name, project_path, ts,
        speaker, session (`MemoryInput`). A memory with a `session` is that conversation's next turn: indexed
        with the turn before it, and lifted by search when a neighbouring turn is a strong hit. `wait=False`
        stores it unembedded (action DEFERRED) for a background worker or the pipelines to embed and judge."""
        from .store.ingest import ingest_memory

        return ingest_memory(self.pool, self.embedder, self.llm, owner, wait=wait, **fields)

    def find(self, owner: str, query: str, *, project_key: str | None = None, project_name: str | None = None,
             scope: str = "all", limit: int = 20, exclude_session: str | None = None) -> dict[str, Any]:
        """Memory centre, stage 1: snippets (≤ 200 characters) and ids of matching memories
        (`exclude_session`: that conversation's memories left out)."""
        from .store.read import search_memories

        owner = _owner(owner)
        return search_memories(self.pool, self.embedder, owner, query, project_key=project_key,
                               project_name=project_name, scope=scope, limit=limit,
                               exclude_session=exclude_session)

    def get(self, owner: str, ids: Sequence[str]) -> dict[str, Any]:
        """Memory centre, stage 2: the full content of memories by id (unknown ids reported as not found)."""
        from .store.read import get_memories

        owner = _owner(owner)
        return get_memories(self.pool, owner, ids)

    def timeline(self, owner: str, *, project_key: str | None = None, project_name: str | None = None,
                 since: int | datetime | None = None, until: int | datetime | None = None,
                 content_type: str | None = None, limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
        """Memories in time order, a page at a time."""
        from .store.read import timeline

        owner = _owner(owner)
        return timeline(self.pool, owner, project_key=project_key, project_name=project_name, since=since,
                        until=until, content_type=content_type, limit=limit, cursor=cursor)

    def versions(self, owner: str, memory_id: str) -> list[dict[str, Any]]:
        """The replaced versions of one memory."""
        from .store.read import memory_versions

        owner = _owner(owner)
        return memory_versions(self.pool, owner, memory_id)

    def projects(self, owner: str) -> list[dict[str, Any]]:
        """The owner's projects with their memory counts."""
        from .store.read import list_projects

        owner = _owner(owner)
        return list_projects(self.pool, owner)

    def rename_project(self, owner: str, project_key: str, project_name: str) -> dict[str, Any]:
        """Give one of the owner's projects a new name (its key stays); its memories are embedded and indexed
        again with it by the next refresh."""
        from .store.rename import rename_project

        owner = _owner(owner)
        return rename_project(self.pool, owner, project_key, project_name)

    # -- keys --------------------------------------------------------------------------------------------------

    def create_key(self, owner: str, name: str | None = None) -> tuple[str, str]:
        """A new API key for `owner`: (key id, the key itself, shown once)."""
        from .infra.auth import create_key

        return create_key(self.pool, owner, name)

    def list_keys(self, owner: str | None = None) -> list[dict[str, Any]]:
        """Keys (never their secret), of one owner or all."""
        from .infra.auth import list_keys

        return list_keys(self.pool, owner)

    def revoke_key(self, key_id_or_prefix: str) -> bool:
        """Revoke a key by id or prefix; False when none matched."""
        from .infra.auth import revoke_key

        return revoke_key(self.pool, key_id_or_prefix)

    # -- items: tasks, learnings, capabilities, goals, events ----------------------------------------------------

    embed_worker: Any = None
    """The server's background embedder (`EmbedWorker`), notified after every write when one runs."""

    def _written(self, changed: int) -> None:
        if changed and self.embed_worker is not None:
            self.embed_worker.notify()

    def write(self, owner: str, source: str, item: Mapping[str, Any]) -> dict[str, Any]:
        """Write one task, learning, capability, goal or event (vocabulary.WRITE_CONTRACTS); with a `key`, the
        owner's item of that key is updated. Keyword-searchable on return, embedded in the background.
        Returns {id, key, action}: created, updated or unchanged."""
        from .store.items import ItemError, write_items

        try:
            done = write_items(self.pool, owner, source, [item])
        except ItemError as exc:
            raise type(exc)(exc.field, exc.message) from None  # one item: no index to name
        result = {k: v for k, v in done.results[0].items() if k != "index"}
        self._written(result["action"] != "unchanged")
        return result

    def write_many(self, owner: str, source: str, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Write a batch of one source in one transaction: all or, when one item is bad (ItemError names its
        index and field), none. Returns {source, results: [{index, id, key, action}], counts}."""
        from .store.items import write_items

        done = write_items(self.pool, owner, source, items)
        self._written(done.counts["created"] + done.counts["updated"])
        return done.as_dict()

    def update(self, owner: str, source: str, ref: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Change some fields of one item found by id or key (a task's status, a goal's progress, `active: false`
        to deactivate it). Another owner's id or key is not found, like an unknown one. Returns {id, key, action}."""
        from .store.items import update_item

        done = update_item(self.pool, owner, source, ref, changes)
        self._written(done["action"] == "updated")
        return done

    def relevant_learnings(self, owner: str, *, task_type: str | None = None, failure_class: str | None = None,
                           event_type: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
        """The owner's learnings most relevant to a task (task type, failure class, trigger event, failure
        patterns first, then freshness), best first, each with the parts of its score."""
        from .store.items import relevant_learnings

        owner = _owner(owner)
        return relevant_learnings(self.pool, owner, task_type=task_type, failure_class=failure_class,
                                  event_type=event_type, limit=limit)
    # -- ways out ----------------------------------------------------------------------------------------------

    def forget(self, owner: str, source: str, item_id: str, *, actor: str = "cli") -> dict[str, Any]:
        """Forget one of the owner's items (task, learning, capability, goal, event or memory, by id or key) with
        everything of it: no read returns it after. `actor` (an API key's id, or 'cli') goes to the audit trail."""
        from .store.removal import forget

        owner = _owner(owner)
        return forget(self.pool, owner, source, item_id, actor=actor)

    def drop_project(self, owner: str, project_key: str, *, actor: str = "cli") -> dict[str, Any]:
        """Drop one of the owner's projects with all its memories."""
        from .store.removal import drop_project

        owner = _owner(owner)
        return drop_project(self.pool, owner, project_key, actor=actor)

    def erase(self, owner: str, *, confirm: str | None = None, dry_run: bool = False,
              actor: str = "cli") -> dict[str, Any]:
        """Remove every row of the owner, her API keys included (`confirm` repeats the owner id); `dry_run`
        counts what would go. An erase that finds nothing of hers records nothing (`audit_id` None)."""
        from .store.removal import erase_owner

        if isinstance(confirm, str):  # it repeats the owner as given, and the owner is taken stripped
            confirm = confirm.strip()
        return erase_owner(self.pool, _owner(owner), confirm=confirm, dry_run=dry_run, actor=actor)

    def removals(self, owner: str, *, limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
        """The owner's audit trail of removals, newest first (no removed content)."""
        from .store.removal import audit_trail

        owner = _owner(owner)
        return audit_trail(self.pool, owner, limit=limit, cursor=cursor)

    def key_id(self, key: str | None) -> str | None:
        """The id of an active API key (what the audit trail names as who removed), or None."""
        from .store.removal.audit import key_id

        return key_id(self.pool, key) if key else None

    def export(self, owner: str, directory: str | Path, *, include_log: bool = False) -> dict[str, Any]:
        """Write every source of the owner into a new folder as files `import` reads back; the manifest."""
        from .operations.export import export_owner

        return export_owner(self.pool, owner, directory, include_log=include_log)

    def export_lines(self, owner: str) -> Iterator[str]:
        """Every item and memory of the owner as JSON lines (each naming its `source`), in one snapshot on a
        connection of its own (not the pool's): one file `import` reads back. Close the iterator to end it early."""
        from .operations.export import export_lines

        return export_lines(self.pool, _owner(owner))

    def import_path(self, path: str | Path, *, owner: str | None = None, source: str | None = None,
                    dry_run: bool = False, skip_invalid: bool = False) -> dict[str, Any]:
        """Import a JSON Lines, CSV or Parquet file, or the folder `export` wrote (into its owner unless `owner`);
        the report (a folder's: one per file). ImportFileError when the file or folder is not what it claims."""
        from pathlib import Path

        from .operations.import_folder import import_folder
        from .store.imports import import_file

        if Path(path).is_dir():
            if source:
                from .infra.errors import ValidationError

                raise ValidationError("source", "applies to one file; an export's folder says what each file is")
            return import_folder(self.pool, path, embedder=self.embedder, llm=self.llm, owner=owner and _owner(owner),
                                 dry_run=dry_run, skip_invalid=skip_invalid).as_dict()
        return import_file(self.pool, path, embedder=self.embedder, llm=self.llm, source=source,
                           owner=owner and _owner(owner), default_owner=self.settings.default_owner,
                           dry_run=dry_run, skip_invalid=skip_invalid).as_dict()

    def prune(self, *, dry_run: bool = False, **ages: Any) -> dict[str, Any]:
        """Prune the retrieval log and the events past their retention ages (the settings', or `candidates=`,
        `builds=`, `events=` given as '30d', '36h'..., at least a day), the hit rates rolled up first; the rows
        removed (`dry_run`: that would be, nothing removed)."""
        from .operations.retention import RetentionPolicy, prune, would_prune

        policy = RetentionPolicy.from_env(**ages)
        return (would_prune(self.pool, policy) if dry_run else prune(self.pool, policy)).as_dict()

    def log_status(self) -> dict[str, Any]:
        """The retrieval log's size and the oldest row kept, per table."""
        from .operations.retention import log_status

        with self.pool.connection() as conn:
            return log_status(conn)
