"""CLI commands of the online module: `serve` (HTTP API), `mcp` (MCP server), `keys` (API keys)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ...infra.embedded import leave_early
from ...infra.errors import UserError
from .exits import threads_still_running

_EXTRA_HINT = "Fix: pip install 'memory-pipelines[api]' (FastAPI, uvicorn and the mcp SDK)."


def _memory() -> Any:
    from ...face import Memory

    return Memory.open()


def _serving() -> Any:
    """The `Memory` of a long-running server: requests wait at most a couple of seconds for a connection
    (then a 503 with Retry-After), and the embedded database is watched and started again when it goes; its
    most used files are read into the page cache meanwhile (infra/prewarm.py)."""
    from ...infra.embedded import embedded_pgdata, supervise
    from ...infra.prewarm import start_prewarm

    memory = _memory()
    supervise(memory.settings, memory.pool)
    if not memory.settings.database_url:
        start_prewarm(memory.runtime.url, embedded_pgdata(memory.settings))
    return memory


def _need(module: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise UserError(f"the `{module}` package is missing. {_EXTRA_HINT}")


KEEP_ALIVE_SECONDS = 75
"""How long `serve` keeps an idle connection open. Longer than any client's or proxy's idle timeout (httpx 5 s,
load balancers 60 s): when both sides used uvicorn's and httpx's 5 s, a client sometimes sent a request on a
connection the server was closing at that moment, and got a ReadError (1 of 5,975 requests in bench/load.py)."""


INGEST_ENV = "MEMORY_PIPELINES_INGEST"
"""`serve --ingest`'s default: `background` or `wait`. Background keeps ingests off the request path: a long
memory costs ~1.2 ms of CPU per token to embed (2.4 s for 1,300 tokens), which at half the load bench's saturation
made ingests 2.6 s at p99 and delayed the context builds sharing the cores."""


def cmd_serve(args: argparse.Namespace) -> int:
    _need("fastapi")
    _need("uvicorn")
    import uvicorn

    from ...runtime import warm_up
    from ..http import create_app

    if args.ingest not in ("background", "wait"):  # a bad MEMORY_PIPELINES_INGEST (argparse checks the flag)
        raise UserError(f"{INGEST_ENV} must be `background` or `wait`, not {args.ingest!r}")
    memory = _serving()
    warm_up()
    print(f"memory_pipelines API on http://{args.host}:{args.port} (docs at /docs); "
          "every endpoint but /health needs `Authorization: Bearer <key>`", file=sys.stderr)
    # requests still in flight stop_wait seconds after SIGTERM are cut (a write waiting on a hanging provider held
    # the exit for minutes, past any kill grace); what they had not stored was never acknowledged
    try:
        with hangup_as_termination():
            uvicorn.run(create_app(memory, wait_ingest=args.ingest == "wait"), host=args.host, port=args.port,
                        log_level="info", timeout_keep_alive=KEEP_ALIVE_SECONDS,
                        timeout_graceful_shutdown=memory.settings.stop_wait)
    finally:  # uvicorn re-raises the signal once it has shut down: the exit is under way here
        if threads_still_running():  # a cut request's thread still waits on its remote call
            leave_early("a thread still runs (a request cut at the stop may still wait on a remote call)")
    return 0


@contextlib.contextmanager
def hangup_as_termination() -> Iterator[None]:
    """While uvicorn serves, SIGHUP is sent on as SIGTERM, which uvicorn shuts down on gracefully (it handles only
    SIGINT and SIGTERM): SIGHUP's exit, raised inside its event loop, skipped the app's shutdown, printed
    tracebacks, and under load hung the process on its request threads and answered stored writes with 500s."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGHUP)
    if previous is signal.SIG_IGN:  # nohup: stays ignored
        yield
        return
    signal.signal(signal.SIGHUP, lambda _sig, _frame: os.kill(os.getpid(), signal.SIGTERM))
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


STDIO_STOP_WAIT = 1.0
"""Seconds the stdio MCP server's exit waits for the embedding worker's batch before it leaves the database."""


def cmd_mcp(args: argparse.Namespace) -> int:
    _need("mcp")
    from ...runtime import warm_up
    from ...store.ingest.worker import STILL_RUNNING, EmbedWorker
    from ..mcp import run_http, run_stdio

    memory = _serving()
    warm_up()
    memory.embed_worker = EmbedWorker(memory)  # embeds what the tools record, as `serve`'s does
    memory.embed_worker.start()
    try:
        if args.transport == "stdio":
            _until_signalled(run_stdio, memory, memory.settings.default_owner)  # stdout carries the protocol
        else:
            _need("uvicorn")
            print(f"MCP streamable HTTP on http://{args.host}:{args.port}/mcp (bearer key required)",
                  file=sys.stderr)
            with hangup_as_termination():
                run_http(memory, host=args.host, port=args.port)
    finally:
        # a stdio client ends the session by closing stdin and kills the server 4 s later (the SDK's SIGTERM after
        # 2 s, SIGKILL 2 s on): the worker gets a second, then the database is left with its batch unfinished
        wait = min(memory.settings.stop_wait, STDIO_STOP_WAIT) if args.transport == "stdio" else None
        if not memory.embed_worker.stop(wait):
            leave_early(STILL_RUNNING)
        elif threads_still_running():  # a tool call cut at the shutdown's grace still waits on its remote call
            leave_early("a thread still runs (a request cut at the stop may still wait on a remote call)")
    return 0


def _until_signalled(serve: Callable[..., None], *args: Any) -> None:
    """Run `serve` on a daemon thread while this (main) thread waits. The stdio server reads stdin on a thread
    of its own that no cancellation reaches: run here, SIGTERM's and Ctrl-C's exit would wait for the client to
    close stdin before the process could leave the embedded server."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            serve(*args)
        except BaseException as exc:  # re-raised in the main thread, where the CLI reports it
            failed.append(exc)

    thread = threading.Thread(target=run, name="mcp-stdio", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.5)  # a timed wait: signals are handled between them
    if failed:
        raise failed[0]


def cmd_keys_create(args: argparse.Namespace) -> int:
    key_id, key = _memory().create_key(args.owner, name=args.name)
    print(key)
    print(f"created key {key_id} for owner {args.owner!r}. Store it now: it will not be shown again.",
          file=sys.stderr)
    return 0


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return value.strftime("%Y-%m-%d %H:%M") if hasattr(value, "strftime") else str(value)


def cmd_keys_list(args: argparse.Namespace) -> int:
    keys = _memory().list_keys(owner=args.owner)
    if args.json:
        print(json.dumps(keys, indent=2, default=str))
        return 0
    if not keys:
        print("no keys" + (f" for owner {args.owner!r}" if args.owner else ""))
        return 0
    cols = ("id", "prefix", "owner", "name", "created_at", "last_used_at", "revoked_at")
    rows = [[_fmt(k.get(c)) for c in cols] for k in keys]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    if not _memory().revoke_key(args.key):
        raise UserError(f"no active key matches {args.key!r}. Fix: pass a key id or prefix from `keys list`.")
    print(f"revoked {args.key}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `serve`, `mcp` and `keys` to the CLI."""
    p = sub.add_parser("serve", help="run the HTTP API (FastAPI + uvicorn); OpenAPI docs at /docs")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--ingest", choices=["background", "wait"],
                   default=os.environ.get(INGEST_ENV) or "background",
                   help="an ingest's default when the request does not say (`wait`): background answers once the "
                   "memory is stored and embeds and judges it in a low-priority thread; wait answers after both "
                   f"(default background, or ${INGEST_ENV})")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("mcp", help="run the MCP server (mem.* tools): stdio for one configured owner "
                       "(MEMORY_PIPELINES_OWNER), or streamable HTTP with bearer API keys")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="address to bind for http (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8001, help="port for http (default 8001); endpoint /mcp")
    p.set_defaults(func=cmd_mcp)

    keys = sub.add_parser("keys", help="create, list and revoke API keys (each key belongs to one owner)")
    ksub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    p = ksub.add_parser("create", help="create a key for an owner and print it once")
    p.add_argument("--owner", required=True, help="owner id whose memory the key reads and writes")
    p.add_argument("--name", help="a label, e.g. the machine or agent using it")
    p.set_defaults(func=cmd_keys_create)
    p = ksub.add_parser("list", help="list keys (id, prefix, owner, name, dates); never the keys themselves")
    p.add_argument("--owner", help="only this owner's keys")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_keys_list)
    p = ksub.add_parser("revoke", help="revoke a key by its id or prefix")
    p.add_argument("key", metavar="KEY_ID_OR_PREFIX")
    p.set_defaults(func=cmd_keys_revoke)
