"""CLI command `feedback`: explicit (`--used ID`, or `--none`) or implicit (`--output TEXT` /
`--output-file FILE|-`) feedback on one context build, as HTTP's POST /api/brain/memory/feedback[/implicit] and
MCP's mem.feedback / mem.implicit_feedback do."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ...infra.errors import ValidationError
from ...infra.ids import canonical_uuid
from ...vocabulary import MAX_OUTPUT


def read_output(args: argparse.Namespace) -> str:
    """The output given inline, or read from a file or stdin ('-'), at most MAX_OUTPUT characters."""
    if args.output is not None:
        text, where = args.output, "--output"
    else:
        text, where = _read_output_file(args.output_file), "--output-file"
    if not text.strip():  # the library would name its own field, `output`, not the option given
        raise ValidationError(where, "must not be empty: give what the agent produced")
    return text


def _read_output_file(name: str) -> str:
    """The output in file `name` ('-': stdin), at most MAX_OUTPUT characters."""
    if name == "-":
        text = sys.stdin.read(MAX_OUTPUT + 1)
    else:
        try:
            with Path(name).open(encoding="utf-8", errors="surrogateescape") as f:
                text = f.read(MAX_OUTPUT + 1)
        except OSError as exc:
            raise ValidationError("--output-file", f"cannot be read ({exc.strerror or exc})") from None
    if len(text) > MAX_OUTPUT:  # only MAX_OUTPUT + 1 characters were read: say so, not that count
        raise ValidationError("--output-file", f"holds more than the {MAX_OUTPUT:,} characters an output may have")
    return text


def _measure(value: float | None) -> str:
    """A measure of the evidence, or '-' when it was not measured (the embedder failed)."""
    return "   -" if value is None else f"{value:.2f}"


def cmd_feedback(args: argparse.Namespace) -> int:
    from ...face import Memory

    explicit = args.used is not None or args.none
    output = None if explicit else read_output(args)
    memory = Memory.open(llm=None)
    owner = args.owner or memory.settings.default_owner
    if explicit:
        result = {"retrieval_id": canonical_uuid(args.retrieval_id),
                  "marked": memory.feedback(owner, args.retrieval_id, [] if args.none else list(args.used))}
        print(json.dumps(result) if args.json else f"{result['marked']} item(s) marked used (explicit)")
        return 0
    result = memory.implicit_feedback(owner, args.retrieval_id, output)
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=2))
        return 0
    for item in result["items"]:
        ev = item["evidence"] or {}
        mark = "used" if item["used"] else "-"
        print(f"{mark:<5} {item['used_by'] or '':<9} {item['source']:<10} {item['id']}  semantic "
              f"{_measure(ev.get('semantic'))}  lexical {ev.get('lexical', 0):.2f}  "
              f"{', '.join(ev.get('matched_terms', [])[:6])}")
    note = " (explicit feedback already given: nothing changed)" if result["explicit_feedback"] else ""
    print(f"{result['marked']} newly marked, {result['used']} used of {len(result['items'])} injected, "
          f"threshold {result['threshold']}{note}", file=sys.stderr)
    if result["degraded"]:
        print(f"[degraded] {result['degraded']}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `feedback` to the CLI."""
    p = sub.add_parser(
        "feedback",
        help="feedback on one context build: the items the agent used (--used), or what it produced "
        "(--output / --output-file: the items it demonstrably used are marked, used_by implicit)",
    )
    p.add_argument("retrieval_id", help="retrieval_id of a context build (`context --json` prints it)")
    p.add_argument("--owner", help="owner id (default MEMORY_PIPELINES_OWNER or 'default')")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--used", action="append", metavar="ID", help="an item the agent used (repeat); explicit")
    what.add_argument("--none", action="store_true",
                      help="the agent used none of the injected items (explicit: every one marked unused)")
    what.add_argument("--output", help=f"the agent's final output as text (at most {MAX_OUTPUT:,} characters)")
    what.add_argument("--output-file", metavar="FILE", help="read the output from FILE ('-': stdin)")
    p.add_argument("--json", action="store_true", help="print the marks and evidence as JSON")
    p.set_defaults(func=cmd_feedback)
