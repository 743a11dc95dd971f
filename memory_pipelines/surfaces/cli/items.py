"""CLI commands for items: `import` (a JSON Lines, CSV or Parquet file), `write` and `update` (one item, or a
batch, as JSON), `rename-project`, `learnings-relevant` (the learnings spec's relevance search). They call the
library as HTTP's /api/{source} routes and MCP's mem.record_* tools do."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ...infra.errors import ValidationError
from ...infra.json_members import RepeatedMemberError, loads_unique
from ...vocabulary import MAX_BATCH, MAX_SEARCH_LIMIT, TASK_TYPES, WRITABLE_SOURCES
from ..encode import jsonable

OWNER_HELP = "owner id (default MEMORY_PIPELINES_OWNER or 'default')"


def _memory() -> Any:
    from ...face import Memory

    return Memory.open(llm=None)


def _print_json(value: Any) -> None:
    print(json.dumps(jsonable(value), ensure_ascii=False, indent=2))  # times as ISO 8601, as HTTP and MCP


def read_json_arg(args: argparse.Namespace, name: str = "--json") -> Any:
    """The JSON given inline (`--json`), or read from a file or stdin (`--file`, '-')."""
    if args.json_text is not None:
        text, where = args.json_text, name
    else:
        where = "--file"
        try:
            text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValidationError("--file", f"cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        return loads_unique(text)
    except RepeatedMemberError as exc:
        raise ValidationError(where, f"{exc}; name each member once") from None
    except json.JSONDecodeError as exc:
        raise ValidationError(where, f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def _owner(args: argparse.Namespace, memory: Any) -> str:
    return args.owner or memory.settings.default_owner


def _checked_memories(owner: str, value: Any) -> list[dict[str, Any]]:
    """The memories of a `write memory` (an object, or an array of them), every one checked as an imported memory
    row is (`import_checks.prepare_row`: `at` read as its time, an unknown field named) before any is stored; in
    an array a bad one is named by its place (`items[2].content_type`)."""
    from ...store.import_checks import prepare_row
    from ...store.ingest import validate_owner

    validate_owner(owner)  # the owner's own error, not every item's
    now = datetime.now(UTC)
    batch = isinstance(value, list)
    checked = []
    for i, item in enumerate(value if batch else [value]):
        if not isinstance(item, dict):
            raise ValidationError(f"items[{i}]" if batch else "memory",
                                  f"must be a JSON object, got {type(item).__name__}")
        try:
            checked.append(prepare_row(item, source="memory", owner=owner, default_owner=None, now=now).item)
        except ValidationError as exc:
            if not batch:
                raise
            raise ValidationError(f"items[{i}].{exc.field}", exc.message) from None
    return checked


def _write_memories(memory: Any, owner: str, value: Any) -> Any:
    """Memories through the ingest, as HTTP's /ingest/memory and MCP's mem.ingest_memory write them, in order
    (a conversation's turns follow each other); each embedded before the command returns."""
    results = [memory.ingest(owner, **item).as_dict() for item in _checked_memories(owner, value)]
    return results if isinstance(value, list) else results[0]


def cmd_write(args: argparse.Namespace) -> int:
    value = read_json_arg(args)
    memory = _memory()
    owner = _owner(args, memory)
    if isinstance(value, list):
        if not value:  # as HTTP answers an empty batch: a 0 exit would read as "written"
            raise ValidationError("items", f"must hold 1 to {MAX_BATCH} items, got an empty list")
        if len(value) > MAX_BATCH:
            raise ValidationError("items", f"at most {MAX_BATCH} items per write; import a file for more "
                                           "(`memory-pipelines import`)")
    if args.source == "memory":
        _print_json(_write_memories(memory, owner, value))
    elif isinstance(value, list):
        _print_json(memory.write_many(owner, args.source, value))
    else:
        _print_json(memory.write(owner, args.source, value))
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    changes = read_json_arg(args)
    memory = _memory()
    _print_json(memory.update(_owner(args, memory), args.source, args.ref, changes))
    return 0


def cmd_rename_project(args: argparse.Namespace) -> int:
    memory = _memory()
    out = memory.rename_project(_owner(args, memory), args.project_key, args.project_name)
    if args.json:
        _print_json(out)
    elif out["renamed"]:
        print(f"renamed project {out['project_key']}: {out['previous_name']!r} -> {out['project_name']!r} "
              f"({out['fragments_pending']} fragments to embed again on the next refresh)")
    else:
        print(f"project {out['project_key']} is named {out['project_name']!r} already")
    return 0


def cmd_learnings_relevant(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= MAX_SEARCH_LIMIT:
        raise ValidationError("--limit", f"must be from 1 to {MAX_SEARCH_LIMIT}, got {args.limit}")
    memory = _memory()
    found = memory.relevant_learnings(_owner(args, memory), task_type=args.task_type,
                                      failure_class=args.failure_class, event_type=args.event_type, limit=args.limit)
    if args.json:
        _print_json({"learnings": found})
        return 0
    for item in found:
        print(f"{item['score']:>5}  {item['id']}  {item['title'][:80]}")
    if not found:
        print("no learnings", file=sys.stderr)
    return 0


def _print_rejects(report: Any) -> None:
    name = Path(report.path).name
    for r in report.rejects:
        print(f"{name}:{r.line}: {r.field}: {r.reason}", file=sys.stderr)


def _print_stopped(stopped: str) -> None:
    print(f"stopped: {stopped}: the rows counted above are written; fix it and import again (rows already written "
          "come back unchanged)")


def print_report(report: Any, as_json: bool) -> None:
    """Every reject as `file:line: field: reason` on stderr, then the counts (or the whole report as JSON)."""
    _print_rejects(report)
    if as_json:
        _print_json(report.as_dict())
        return
    print(f"{Path(report.path).name}: {report.rows} rows read, {report.valid} valid, {len(report.rejects)} rejected "
          f"({report.read_seconds:.1f} s)")
    if report.dry_run:
        for source, n in report.valid_by_source.items():
            print(f"  {source}: {n} valid")
        print("dry run: nothing written")
        return
    if not report.written:
        print(f"nothing written: {len(report.rejects)} rows rejected. Fix them, or pass --skip-invalid to write "
              "the valid rows only")
        return
    for source, counts in report.counts.items():
        print(f"  {source}: " + ", ".join(f"{n} {action}" for action, n in counts.items()))
    done = sum(report.totals.values())
    if report.stopped and not done:  # nothing committed before the failure: no "written" line to contradict
        print(f"stopped: {report.stopped}: nothing was written; import again once it is back")
        return
    rate = f" ({done / report.write_seconds:,.0f} rows/s)" if report.write_seconds > 0 and done else ""
    print(f"written in {report.write_seconds:.1f} s{rate}; embeddings follow in the background "
          "(`serve`, the Dagster sensor) or with `memory-pipelines embed`")
    if report.stopped:
        _print_stopped(report.stopped)


def _print_folder(result: Any, folder: str) -> None:
    """One line per file with rows; then what was written, or why nothing was."""
    from ...operations.export import CONFIGS

    print(f"{folder} into owner {result.owner}:")
    empty = 0
    for report in result.reports:
        if not report.rows:
            empty += 1
            continue
        done = ", ".join(f"{n} {action}" for action, n in report.totals.items())
        read = f"{report.rows} rows, {report.valid} valid, {len(report.rejects)} rejected"
        print(f"  {Path(report.path).name}: {read}" + (f"; {done}" if report.written else ""))
    if empty:
        print(f"  ({empty} empty files)")
    dry_run = bool(result.reports) and result.reports[0].dry_run
    if result.refused:
        print("nothing written from any file. Fix the rejected rows, or pass --skip-invalid to write the valid rows "
              "only")
    elif dry_run:
        print("dry run: nothing written")
    else:
        print("embeddings follow in the background (`serve`, the Dagster sensor) or with `memory-pipelines embed`; "
              f"the export's scoring config is carried over by `memory-pipelines scoring restore "
              f"{Path(folder) / CONFIGS}`")
    if result.stopped:
        _print_stopped(result.stopped)


def _import_folder(args: argparse.Namespace) -> int:
    """`import DIR`: an export's folder, every item file of it into one owner (the export's unless --owner)."""
    from ...operations.import_folder import export_files, import_folder
    from .main import _bar

    export_files(Path(args.path))  # not an export: said before the database starts
    for flag in ("source", "format"):
        if getattr(args, flag):
            raise ValidationError(f"--{flag}", "applies to one file; an export's folder says what each file is")
    memory = None if args.dry_run else _memory()
    result = import_folder(memory.pool if memory else None, args.path, embedder=memory and memory.embedder,
                           owner=args.owner, dry_run=args.dry_run, skip_invalid=args.skip_invalid,
                           bar=None if args.json else _bar)
    for report in result.reports:
        _print_rejects(report)
    if args.json:
        _print_json(result.as_dict())
    else:
        _print_folder(result, args.path)
    if result.stopped:
        return 1
    rejects = any(r.rejects for r in result.reports)
    writes = any(r.written for r in result.reports) or (args.dry_run and args.skip_invalid)
    return 1 if rejects and not writes else 0


def cmd_import(args: argparse.Namespace) -> int:
    from ...infra.settings import get_settings
    from ...store.imports import ImportInterrupted, file_format, import_file
    from .main import _bar

    if Path(args.path).is_dir():
        return _import_folder(args)
    file_format(Path(args.path), args.format)  # an unknown format fails before the database starts
    pool = embedder = None
    default_owner = get_settings().default_owner
    if not args.dry_run:
        memory = _memory()
        pool, embedder, default_owner = memory.pool, memory.embedder, memory.settings.default_owner
    try:
        report = import_file(pool, args.path, embedder=embedder, source=args.source, owner=args.owner,
                             default_owner=default_owner, fmt=args.format, dry_run=args.dry_run,
                             skip_invalid=args.skip_invalid, bar=None if args.json else _bar)
    except ImportInterrupted as exc:  # the database failed: what it wrote, and that a re-import resumes
        report = exc.report
    print_report(report, args.json)
    if report.stopped:
        return 1
    # A dry run exits as the import would: 1 when its rejects would keep every row out.
    writes = (args.skip_invalid and report.valid > 0) if report.dry_run else report.written
    return 1 if report.rejects and not writes else 0


def _json_input(p: argparse.ArgumentParser, what: str) -> None:
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--json", dest="json_text", metavar="JSON", help=what)
    given.add_argument("--file", metavar="FILE", help="read that JSON from FILE ('-': stdin)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add `import`, `write`, `update` and `learnings-relevant` to the CLI."""
    sources = list(WRITABLE_SOURCES)
    p = sub.add_parser(
        "import",
        help="import a JSON Lines, CSV or Parquet file of tasks, learnings, capabilities, goals, events or "
        "memories: every row checked first, original times kept, idempotent by key (a re-import changes nothing)",
    )
    p.add_argument("path", help="the file (.jsonl / .ndjson, .csv with a header row, .parquet), or the folder "
                   "`export` wrote (every item file of it, into the export's owner unless --owner)")
    p.add_argument("--source", choices=[*sources, "memory"],
                   help="what every row is; without it, each row's `source` column says")
    p.add_argument("--owner", help="whose rows these are; without it, each row's `owner` column, else "
                   "MEMORY_PIPELINES_OWNER or 'default'. A row naming another owner than --owner (its cell "
                   "stripped) is rejected")
    p.add_argument("--format", choices=["jsonl", "csv", "parquet"], help="the format, when the suffix does not say")
    p.add_argument("--dry-run", action="store_true", help="check and count every row; write nothing")
    p.add_argument("--skip-invalid", action="store_true",
                   help="write the valid rows even when some are rejected (each reject is still reported); "
                   "without it, one rejected row means nothing is written")
    p.add_argument("--json", action="store_true", help="print the report (counts, every reject) as JSON")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("write", help="write one item (a JSON object) or a batch (a JSON array) of one source; an "
                       "item with a `key` updates the owner's item of that key; a memory takes content, "
                       "content_type, project_name (or project_key) and optionally speaker, session, ts")
    p.add_argument("source", choices=[*sources, "memory"])
    p.add_argument("--owner", help=OWNER_HELP)
    _json_input(p, "the item, e.g. '{\"title\": \"...\", \"content\": \"...\"}', or a JSON array of items "
                   f"(at most {MAX_BATCH})")
    p.set_defaults(func=cmd_write)

    p = sub.add_parser("update", help="change some fields of one item, by id or key (a task's status, a goal's "
                       "progress, {\"active\": false} to deactivate it)")
    p.add_argument("source", choices=sources)
    p.add_argument("ref", metavar="ID_OR_KEY")
    p.add_argument("--owner", help=OWNER_HELP)
    _json_input(p, "the fields to change, e.g. '{\"status\": \"completed\"}'")
    p.set_defaults(func=cmd_update)

    p = sub.add_parser("rename-project", help="give a project a new name (its key stays; writes by the new name "
                       "file there too)")
    p.add_argument("project_key", help="the project's key (GET /projects)")
    p.add_argument("project_name", metavar="name", help="the new name")
    p.add_argument("--owner", help=OWNER_HELP)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_rename_project)

    p = sub.add_parser("learnings-relevant", help="the owner's learnings most relevant to a task: task type, "
                       "failure class, trigger event, failure patterns, freshness (the learnings spec)")
    p.add_argument("--owner", help=OWNER_HELP)
    p.add_argument("--task-type", choices=TASK_TYPES)
    p.add_argument("--failure-class", metavar="CLASS", help="e.g. TIMEOUT")
    p.add_argument("--event-type", metavar="TYPE", help="e.g. task_failed")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--json", action="store_true", help="print the learnings with their score parts as JSON")
    p.set_defaults(func=cmd_learnings_relevant)
