"""`create_app(memory)`: the HTTP API, assembled from one router per area (`routes/`).

The owner always comes from the API key (`Authorization: Bearer KEY`), never from the request. Library calls
block, so endpoints are plain `def` and FastAPI runs them in its threadpool.

Besides the JSON endpoints it serves the API docs and the web view of memory (`pages`). Every endpoint documents
its answer (`responses`, examples included) and its errors (one error model, `errors`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from ...face import Memory
from ...infra.embedded import leave_early
from ...store.ingest.worker import STILL_RUNNING, EmbedWorker
from ...vocabulary import MAX_BODY_BYTES
from .deps import Owner
from .errors import BodyLimit, StrictJsonRoute, install_error_handlers
from .pages import install_docs, install_web_view
from .routes import agentmem, context, feedback, history, items, ops, removal, search

ROUTERS = (ops.router, search.router, context.router, feedback.router, history.router, agentmem.router,
           removal.router)
"""Included in this order (the order of the OpenAPI document)."""

_DESCRIPTION = """Long-term memory for AI agents: progressive search (summary → detail → related), the agent-mem
memory centre (ingest, search → get, timeline, projects, versions), token-budgeted context with feedback, and the
retrieval log read back (recent builds, hit rates).

**Auth.** Every endpoint but `/health` needs `Authorization: Bearer <key>` (create one with
`memory-pipelines keys create --owner NAME`; in these docs: *Authorize*). The key decides the owner: an `owner_id`
that names another owner is a `422`, and an id of another owner answers exactly like one that does not exist.

**Errors.** One shape: `{"detail": ...}`; a `422` also names the rejected `field` and changes nothing (a JSON
object that names a member twice is one, at the repeated member). `401`: no usable key. `404`: no such id for this
owner. `413`: a body over """ + f"{MAX_BODY_BYTES:,}" + """ bytes.
`503`: the database is unreachable (retry after the `Retry-After` seconds).

**Web view.** [`/ui/`](/ui/): recent context builds with their items and used marks, hit rates, search."""


def create_app(memory: Memory, *, wait_ingest: bool = True) -> FastAPI:
    """The API over one `Memory` (its database, embedder and chat model). `wait_ingest` is the default of an
    ingest's `wait`; memories stored without waiting are embedded by the app's `EmbedWorker` (`app.state`)."""
    worker = EmbedWorker(memory)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not wait_ingest:
            worker.notify()  # memories queued before a restart
        worker.start()  # sweeps for rows other processes write (the CLI, an import)
        memory.embed_worker = worker  # Memory.write* notify it
        yield
        if not await asyncio.to_thread(worker.stop):
            leave_early(STILL_RUNNING)

    app = FastAPI(
        lifespan=lifespan,
        title="memory_pipelines",
        version="0.1.0",
        description=_DESCRIPTION,
        docs_url=None,
        redoc_url=None,
        openapi_tags=[
            {"name": "progressive search", "description": "Summary → detail → related over tasks, learnings, "
             "capabilities and memories (the progressive-search spec)."},
            {"name": "context", "description": "The token-budgeted context block, feedback on what was used, "
             "and the retrieval log read back."},
            {"name": "memory centre", "description": "agent-mem: write memories; search (snippets) → get (full "
             "content); timeline; projects; versions."},
            {"name": "ops", "description": "Health and the key's owner."},
            {"name": "ways out", "description": "Forget an item, drop a project, erase the key's owner; the "
             "audit trail of removals."},
        ],
    )
    app.router.route_class = StrictJsonRoute  # its own routes too; every router of routes/ sets it
    app.state.memory = memory
    app.state.wait_ingest = wait_ingest
    app.state.embed_worker = worker
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)
    install_error_handlers(app)
    install_docs(app)
    install_web_view(app)
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(items.router(memory, Owner))  # tasks, learnings, capabilities, goals, events
    return app
