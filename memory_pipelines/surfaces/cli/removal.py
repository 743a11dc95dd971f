"""CLI commands of the ways out: `forget`, `drop-project`, `erase`, `removals` (the audit trail), `export` and
`prune`. An operator at the command line may act for any owner; the audit trail names the actor 'cli'."""

from __future__ import annotations

import argparse
import json
import sys

from ...infra.errors import ValidationError
from ...store.removal.forget import FORGETTABLE


def _memory():
    from ...face import Memory

    return Memory.open(llm=None)


def _print(result: dict, as_json: bool, line: str) -> None:
    print(json.dumps(result, ensure_ascii=False, indent=2, default=str) if as_json else line)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{table} {n}" for table, n in counts.items()) or "nothing"


def cmd_forget(args: argparse.Namespace) -> int:
    out = _memory().forget(args.owner, args.source, args.id)
    _print(out, args.json, f"forgot {out['source']} {out['id']}: {_counts(out['removed'])}")
    return 0


def cmd_drop_project(args: argparse.Namespace) -> int:
    out = _memory().drop_project(args.owner, args.project_key)
    _print(out, args.json, f"dropped project {out['project_key']}: {_counts(out['removed'])}")
    return 0


def cmd_erase(args: argparse.Namespace) -> int:
    if not args.dry_run and not args.yes:
        raise ValidationError("--yes", f"an erase removes every row of {args.owner!r} for good, her API keys "
                                       "included: add --yes to confirm, or --dry-run to count what would go")
    out = _memory().erase(args.owner, confirm=args.owner if args.yes else None, dry_run=args.dry_run)
    verb = "would remove" if out["dry_run"] else "removed"
    graphs = f"; her vector graphs: {', '.join(out['indexes'])}" if out["indexes"] else ""
    _print(out, args.json, f"{verb} every row of {out['owner']}: {_counts(out['counts'])}{graphs}")
    return 0


def cmd_removals(args: argparse.Namespace) -> int:
    out = _memory().removals(args.owner, limit=args.limit, cursor=args.cursor)
    if args.json:
        _print(out, True, "")
        return 0
    if not out["removals"]:  # silence read as a failed or unfinished command
        print(f"no removals for {args.owner.strip()}")
    for r in out["removals"]:
        what = " ".join(x for x in (r["source"], r["item_id"]) if x)
        print(f"{r['at']}  {r['action']:<12} {what:<52} by {r['actor']}: {_counts(r['counts'])}")
    if out.get("next_cursor"):
        print(f"older removals: --cursor {out['next_cursor']}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ...operations.export import owner_has_rows

    memory = _memory()
    if not args.allow_empty and not owner_has_rows(memory.pool, args.owner):
        # a typo in --owner would otherwise give an empty backup and exit 0
        raise ValidationError("--owner", f"{args.owner!r} has no item and no memory: nothing to export (is the "
                                         "owner right?). Add --allow-empty to write an empty export anyway")
    out = memory.export(args.owner, args.dir, include_log=args.with_log)
    files = ", ".join(f"{name} {n}" for name, n in out["files"].items())
    _print(out, args.json, f"exported {out['owner']} to {args.dir}: {files}")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from ...operations.retention import RetentionPolicy, parse_setting_age, prune, would_prune

    common = parse_setting_age("--older-than", args.older_than) if args.older_than is not None else None
    ages = {part: parse_setting_age(f"--{part}", getattr(args, part)) if getattr(args, part) is not None else common
            for part in ("candidates", "builds", "events")}
    memory = _memory()
    policy = RetentionPolicy.from_env(**ages)
    if args.dry_run:
        out = would_prune(memory.pool, policy).as_dict()
        _print(out, args.json, f"would prune {_counts(out['removed'])} (dry run: nothing removed;"
                               f" {_kept_from(out['cutoffs'])})")
        return 0

    def show(done) -> None:
        print(f"\r{done.batches} batches, {sum(done.removed.values()):,} rows", end="", file=sys.stderr, flush=True)

    result = prune(memory.pool, policy, progress=None if args.json else show)
    out = result.as_dict()
    if not args.json:
        print(file=sys.stderr)
    _print(out, args.json, f"pruned {_counts(out['removed'])} in {out['seconds']} s ({out['batches']} batches;"
                           f" {_kept_from(out['cutoffs'])})")
    return 0


def _kept_from(cutoffs: dict[str, str]) -> str:
    return (f"kept from {cutoffs['candidates']} (candidates), {cutoffs['builds']} (builds), {cutoffs['events']}"
            " (events)")


AGE_HELP = "an age of at least a day, such as 30d, 2w, 36h or 1440m (a bare number is days)"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ways out to the CLI."""
    p = sub.add_parser("forget", help="forget one item of an owner (memory, task, learning, capability, goal or "
                                      "event) with everything of it")
    p.add_argument("source", choices=FORGETTABLE)
    p.add_argument("id", help="the item's id, or the key it was written with")
    p.add_argument("--owner", required=True, help="the owner whose item it is")
    p.add_argument("--json", action="store_true", help="print the rows removed per table as JSON")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser("drop-project", help="drop an owner's project with all its memories")
    p.add_argument("project_key")
    p.add_argument("--owner", required=True, help="the owner whose project it is")
    p.add_argument("--json", action="store_true", help="print the rows removed per table as JSON")
    p.set_defaults(func=cmd_drop_project)

    p = sub.add_parser("erase", help="remove every row of an owner in every table, her API keys included")
    p.add_argument("--owner", required=True, help="the owner to erase")
    p.add_argument("--dry-run", action="store_true", help="count what would go per table; remove nothing")
    p.add_argument("--yes", action="store_true", help="confirm the erase (required unless --dry-run)")
    p.add_argument("--json", action="store_true", help="print the rows per table as JSON")
    p.set_defaults(func=cmd_erase)

    p = sub.add_parser("removals", help="an owner's audit trail of removals (who, what, when; no content)")
    p.add_argument("--owner", required=True)
    p.add_argument("--limit", type=int, default=50, help="removals to show, newest first (1-200)")
    p.add_argument("--cursor", help="the next page: the cursor the previous page printed (`next_cursor`)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_removals)

    p = sub.add_parser("export", help="write every source of an owner into DIR as files `import` reads back")
    p.add_argument("dir", help="a new (or empty) folder")
    p.add_argument("--owner", required=True)
    p.add_argument("--with-log", action="store_true", help="also the retrieval log (builds, candidates, roll-up)")
    p.add_argument("--allow-empty", action="store_true",
                   help="export an owner with no item and no memory (refused without it: most likely a typo)")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("prune", help="prune the retrieval log and the events past their retention ages, the hit "
                                     "rates rolled up per day first (defaults: candidates 30d, builds 90d, "
                                     "events 90d, or MEMORY_PIPELINES_RETAIN_*)")
    p.add_argument("--older-than", metavar="AGE", help=f"one age for all three: {AGE_HELP}")
    p.add_argument("--candidates", metavar="AGE", help="the scored candidates of each build")
    p.add_argument("--builds", metavar="AGE", help="the builds (one row each)")
    p.add_argument("--events", metavar="AGE", help="events (the build log's and the owners', imported ones by "
                                                   "their original time)")
    p.add_argument("--dry-run", action="store_true", help="count what would go per table; remove nothing")
    p.add_argument("--json", action="store_true", help="print the rows removed as JSON")
    p.set_defaults(func=cmd_prune)
