"""`memory-pipelines`: the command line. Each command is a thin call into the library."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import signal
import sys
import warnings
from collections.abc import Callable

import psycopg

from ...embeddings.base import EmbeddingError
from ...infra.embedded import exit_on_termination
from ...infra.errors import UserError, ValidationError, database_failed
from ...infra.redact import install_redaction, redact
from ...vocabulary import CONTEXT_MODES, DEFAULT_BUDGET, MAX_BUDGET, MIN_BUDGET, SEARCH_MODES, SEARCH_SOURCES
from ..schema import Name, Owner, Query, check
from .exits import end_now_if_stuck

# Modules that add their own commands: each has `register(sub)` adding sub-parsers with
# `set_defaults(func=...)`. Add a module here to add its commands.
COMMAND_MODULES: list[str] = ["online", "tuning", "feedback", "items", "removal"]

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(name: str):
    def register(fn: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = fn
        return fn

    return register


def _runtime():
    from ...runtime import open_runtime

    return open_runtime()


def _memory():
    from ...face import Memory

    return Memory.open(llm=None)


def _bar(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="row", dynamic_ncols=True, file=sys.stderr)


@command("migrate")
def cmd_migrate(args: argparse.Namespace) -> int:
    from ...embeddings import make_embedder
    from ...index.owner_indexes import sync_owner_indexes
    from ...infra.db import connect, describe_url
    from ...infra.embedded import database_url
    from ...infra.migrate import migrate, reembed
    from ...infra.settings import get_settings

    settings = get_settings()
    embedder = make_embedder(settings)
    url = database_url(settings)
    if args.reembed:
        with contextlib.suppress(UserError):  # the dimension mismatch is what --reembed fixes
            migrate(url, embedder.dimension, embedder.model_name)
        reembed(url, embedder.dimension, embedder.model_name)
        print(
            f"switched {describe_url(url)} to {embedder.dimension}-d vectors of {embedder.model_name}; "
            "run `memory-pipelines embed` (or `run`) to re-embed every row"
        )
        return 0
    applied = migrate(url, embedder.dimension, embedder.model_name, restore_indexes=True)
    with connect(url, vector=False, autocommit=True) as conn:  # owners' own indexes, as the asset keeps them
        owners = sync_owner_indexes(conn, embedder.dimension)
    applied += [f"built owner index {name}" for name in owners.built]
    applied += [f"dropped owner index {name}" for name in owners.dropped]
    print(f"database {describe_url(url)}: " + (f"applied {', '.join(applied)}" if applied else "up to date"))
    return 0


@command("status")
def cmd_status(args: argparse.Namespace) -> int:
    from ...operations.status import collect_status, format_status

    rt = _runtime()
    info = collect_status(rt)
    print(json.dumps(info, indent=2, default=str) if args.json else format_status(info))
    return 0


@command("upgrade-db")
def cmd_upgrade_db(args: argparse.Namespace) -> int:
    from ...infra.engine import upgrade_embedded
    from ...infra.settings import get_settings

    settings = get_settings()
    if settings.database_url:
        raise UserError("upgrade-db moves the embedded database; DATABASE_URL is set, so none is used")
    upgrade_embedded(settings.home, say=lambda line: print(line, file=sys.stderr))
    return 0


@command("embed")
def cmd_embed(args: argparse.Namespace) -> int:
    from ...index.keywords import index_all
    from ...infra.llm import ChatLLM
    from ...store.ingest.deferred import finish_deferred

    rt = _runtime()
    results = embed_with_bar(rt)
    # memories written without waiting (imports, the CLI, a provider outage) are judged against older ones now
    settled = finish_deferred(rt.pool, rt.embedder, ChatLLM.from_settings(rt.settings))
    keywords = index_all(rt.pool, full=args.full_keywords)
    print(f"embedded {sum(r.embedded for r in results)} rows ({sum(r.failed for r in results)} failed, "
          f"{sum(r.pending_after for r in results)} pending); keywords of {sum(k.indexed for k in keywords)} rows "
          f"{'re-indexed (all)' if args.full_keywords else 'indexed'}, {sum(k.removed for k in keywords)} removed")
    if settled["arbitrated"] or settled["still_pending"]:
        actions = ", ".join(f"{n} {a}" for a, n in sorted(settled["actions"].items())) or "none"
        print(f"memories checked against older ones: {settled['arbitrated']} ({actions}); "
              f"{settled['still_pending']} still waiting")
    return 1 if any(r.failed for r in results) else 0  # pending rows stay; the next run retries them


def embed_with_bar(rt) -> list:
    """Embed every pending row with a progress bar on stderr."""
    from ...index.vectors import embed_all, pending_total

    total = pending_total(rt.pool, rt.embedder.model_name)
    with _bar(total, f"embedding ({rt.embedder.model_name})") as bar:
        results = embed_all(rt.pool, rt.embedder, progress=bar.update)
    failed = sum(r.failed for r in results)
    if failed:
        first = next(e for r in results for e in r.errors)
        print(f"warning: {failed} rows could not be embedded and stay pending: {redact(str(first))}",
              file=sys.stderr)
    return results


@command("run")
def cmd_run(args: argparse.Namespace) -> int:
    import time

    from ...operations.main_job import code_location, run_main_job
    from .run import EmbeddingProgress, print_report, print_run_summary

    started = time.perf_counter()
    code_location()  # fails early, with the fix, when Dagster or the code location is not installed
    rt = _runtime()
    print(f"database ready; migrations applied: {', '.join(rt.applied) or 'none pending'}")
    with EmbeddingProgress(rt):  # SIGTERM or SIGHUP (`main` says it stopped): the job's run is marked failed
        summary = run_main_job(rt.settings, verbose=args.verbose)
    print_run_summary(summary)
    print_report(rt, args.owner)
    print(f"\ndone in {time.perf_counter() - started:.1f} s")
    return 0 if summary["success"] else 1


@command("search")
def cmd_search(args: argparse.Namespace) -> int:
    memory = _memory()
    owner = args.owner or memory.settings.default_owner
    try:
        result = memory.search(owner, args.query, mode=args.mode, sources=args.source, limit=args.limit,
                               exclude_session=args.exclude_session)
    except ValidationError as exc:
        if exc.field == "exclude_session":  # the flag the user typed
            raise ValidationError("--exclude-session", exc.message) from None
        raise
    if result.degraded:
        print(f"[degraded] {result.degraded}", file=sys.stderr)
    for h in result.hits:
        print(f"{h.score:.3f}  {h.source:<10} {h.id}  {h.title[:80]}")
    if not result.hits:  # silence read as a command that did nothing, or hid a wrong owner or home
        print(f"no matches for {args.query!r} in the memory of owner {owner!r}")
    return 0


@command("context")
def cmd_context(args: argparse.Namespace) -> int:
    memory = _memory()
    owner = args.owner or memory.settings.default_owner
    try:
        result = memory.context(owner, args.query, mode=args.mode, token_budget=args.budget,
                                exclude_session=args.exclude_session)
    except ValidationError as exc:
        flag = {"token_budget": "--budget", "exclude_session": "--exclude-session"}.get(exc.field)
        if flag:  # the flag the user typed
            raise ValidationError(flag, exc.message) from None
        raise
    if args.json:
        print(json.dumps(result.as_dict(), ensure_ascii=False, indent=2, default=str))
    else:
        print(result.block)
        print(
            f"\n[{result.token_used}/{result.token_budget} tokens, {len(result.items)} items of "
            f"{result.candidates_count} candidates, retrieval {result.retrieval_id}"
            f"{', degraded: ' + result.degraded if result.degraded else ''}]",
            file=sys.stderr,
        )
    return 0


@command("eval")
def cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ...embeddings import make_embedder
    from ...evaluation.run import evaluate, format_table
    from ...infra.embedded import database_url
    from ...infra.settings import get_settings

    settings = get_settings()
    embedder = make_embedder(settings)
    if args.embedding_cache:
        from ...embeddings.cache import CachedEmbedder

        embedder = CachedEmbedder(embedder, args.embedding_cache)
    results = evaluate(database_url(settings), embedder, Path(args.dir), bar=_bar, limit=args.limit,
                       mode=args.mode, budget=args.budget,
                       save_rankings=Path(args.save_rankings) if args.save_rankings else None,
                       sessions=not args.no_sessions, asked_at=args.asked_at,
                       exclude_session=args.exclude_session)
    if args.embedding_cache:
        print(f"embedding cache {args.embedding_cache}: {embedder.hits} texts read, {embedder.misses} embedded",
              file=sys.stderr)
    print(json.dumps(results) if args.json else format_table(results))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory-pipelines",
        description="Long-term memory for AI agents on PostgreSQL + pgvector. Without DATABASE_URL an "
        "embedded PostgreSQL starts under MEMORY_PIPELINES_HOME (default ./.memory_pipelines); without "
        "OPENAI_API_KEY the bundled local model (multilingual-e5-small) embeds.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "run",
        help="the main job: start the database, migrate, load the demo corpus, embed "
        "and index everything, then print counts and sample searches",
    )
    p.add_argument("--owner", default="team-alpha", help="owner whose memory the sample searches read")

    p = sub.add_parser(
        "migrate", help="apply pending schema migrations (also done on start of every surface)"
    )
    p.add_argument(
        "--reembed",
        action="store_true",
        help="switch the database to the configured model's dimension, clearing embeddings",
    )

    p = sub.add_parser("status", help="database, pgvector, model, and row / embedding counts per table")
    p.add_argument("--json", action="store_true", help="print JSON")

    sub.add_parser(
        "upgrade-db",
        help="move an embedded database made by an earlier release (PostgreSQL 16) to PostgreSQL 18 "
        "by dump and restore, keeping the old folder",
    )

    p = sub.add_parser(
        "embed", help="embed every row that has no current-model embedding, then refresh the keyword table"
    )
    p.add_argument("--full-keywords", action="store_true", help="re-index every row's keywords")

    p = sub.add_parser("search", help="search one owner's memory (hybrid by default)")
    p.add_argument("query")
    p.add_argument("--owner", help="owner id (default MEMORY_PIPELINES_OWNER or 'default')")
    p.add_argument("--mode", default="hybrid", choices=SEARCH_MODES)
    p.add_argument("--source", action="append", choices=SEARCH_SOURCES)
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--exclude-session", metavar="SESSION", help="leave out the memories of this conversation")

    p = sub.add_parser("context", help="build the token-budgeted context block for a query (the context-builder spec)")
    p.add_argument("query")
    p.add_argument("--owner", help="owner id (default MEMORY_PIPELINES_OWNER or 'default')")
    p.add_argument("--mode", default="execute", choices=CONTEXT_MODES)
    p.add_argument("--budget", type=int, default=DEFAULT_BUDGET,
                   help=f"token budget, {MIN_BUDGET}-{MAX_BUDGET} (default {DEFAULT_BUDGET})")
    p.add_argument("--exclude-session", metavar="SESSION",
                   help="leave out the memories of this conversation (the one the query is part of)")
    p.add_argument("--json", action="store_true", help="print the block, items and factors as JSON")

    p = sub.add_parser(
        "eval",
        help="evaluate retrieval on DIR (memories.jsonl + queries.jsonl): recall@5, "
        "recall@10 and nDCG@10 of keyword, semantic, hybrid and context ranking with 95%% bootstrap "
        "intervals over queries, in a throwaway database",
    )
    p.add_argument("dir")
    p.add_argument("--json", action="store_true",
                   help="one JSON object keyed by method, then category: every metric, its `_ci` interval, n, "
                   "and for hybrid / hybrid_rrf `vs_best_channel`")
    p.add_argument("--save-rankings", metavar="PATH",
                   help="write every query's gold and per-method rankings (dataset ids) to PATH as JSONL; "
                   "compare two such files with memory_pipelines.evaluation.run.compare_runs")
    p.add_argument("--embedding-cache", metavar="DIR",
                   help="keep embeddings in DIR (SQLite, keyed by model, kind and text) and reuse them in "
                   "later runs; off by default")
    p.add_argument("--no-sessions", action="store_true",
                   help="load the memories without their `session` (no previous-turn context, no neighbour lift): "
                   "an ablation of conversation-aware indexing")
    p.add_argument("--asked-at", default="asked_at", metavar="FIELD",
                   help="the query field (a dotted path) read as the time each question is asked: memories "
                   "written after it are not searched (default asked_at; meta.orig_time evaluates realmem_dev "
                   "causally)")
    p.add_argument("--exclude-session", metavar="FIELD",
                   help="the query field (a dotted path) naming the conversation it is part of: its memories are "
                   "left out, as a caller holding its turns would ask (meta.session on realmem_dev)")
    p.add_argument("--limit", type=int, help="evaluate only the first N queries")
    p.add_argument("--mode", default="chat", choices=CONTEXT_MODES, help="mode of the context builds (default chat)")
    p.add_argument("--budget", type=int, default=MAX_BUDGET,
                   help=f"token budget of the context builds, {MIN_BUDGET}-{MAX_BUDGET} (default {MAX_BUDGET}: "
                   "no cut); `hybrid_matched` is hybrid search cut to as many items as the context injected")
    for name, fn in COMMANDS.items():
        sub.choices[name].set_defaults(func=fn)
    for module in COMMAND_MODULES:
        importlib.import_module(f"{__package__}.{module}").register(sub)
    return parser


# Text arguments, checked wherever a command has them as HTTP and MCP check theirs (schema.py, limits from
# vocabulary): attribute -> (the name the user typed, its type).
_CHECKED = {"owner": ("--owner", Owner), "name": ("--name", Name), "query": ("query", Query),
            "key": ("KEY_ID_OR_PREFIX", Name)}


def check_args(args: argparse.Namespace) -> None:
    """ValidationError naming the argument (`--owner`, `query`) when a value breaks the shared limits: empty,
    too long, a NUL, bytes that are not UTF-8 (the shell passes them through as lone surrogates), or an owner
    padded with whitespace."""
    for field, (name, kind) in _CHECKED.items():
        value = getattr(args, field, None)
        if not isinstance(value, str):
            continue
        if not value.strip():
            raise ValidationError(name, "must not be empty")  # some commands take no default owner
        try:
            check(name, kind, value)
        except ValidationError as exc:
            message = exc.message.replace("(no lone surrogates)", "(bytes that are not UTF-8)")
            raise ValidationError(name, message) from None


def main(argv: list[str] | None = None) -> int:
    """Entry point: expected failures print one line (cause and fix) and exit 2, without a traceback.
    As the process's entry point (no `argv`) it also turns SIGTERM into an exit (`exit_on_termination`)."""
    if argv is None:
        exit_on_termination()
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    warnings.filterwarnings("ignore", message=".*is currently in beta")  # dagster's backfill_policy
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    install_redaction()
    try:
        check_args(args)
        return args.func(args)
    except (UserError, EmbeddingError) as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except psycopg.OperationalError as exc:  # a restart or a lost connection mid-command: not the caller's input
        print(f"error: {redact(database_failed(exc))}; what was written before it is kept: run the command again",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; committed work is kept and the next run resumes", file=sys.stderr)
        if argv is None:  # the process's entry point: ending it is ours (never a test's or a caller's process)
            end_now_if_stuck(130)
        return 130
    except SystemExit as exc:  # SIGTERM or SIGHUP (exit_on_termination): `import` ended without a word
        if exc.code in TERMINATED and args.func.__name__ not in SERVERS:  # a server's stop is its normal end
            print(f"\nstopped (exit {exc.code}); committed work is kept and the next run resumes", file=sys.stderr)
            if argv is None:
                end_now_if_stuck(exc.code)
        raise


TERMINATED = (128 + signal.SIGTERM, 128 + signal.SIGHUP)
SERVERS = ("cmd_serve", "cmd_mcp")


if __name__ == "__main__":
    sys.exit(main())
