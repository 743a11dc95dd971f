"""Importing an export's folder: every item file `export` wrote, in the order it wrote them, into one owner.

All or nothing as one file is: without `skip_invalid`, every file is checked first and one rejected row anywhere
means nothing is written. The scoring configs, the memories' old versions and the log are not read (the first is
shared by every owner: `scoring restore` carries it over).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg_pool import ConnectionPool

from ..infra.llm import ChatLLM
from ..store.imports import ImportFileError, ImportInterrupted, ImportReport, import_file
from .export import FILES, MANIFEST


@dataclass
class FolderReport:
    """One report per file imported (or checked); `refused`: a check found rejects, so nothing was written."""

    owner: str
    reports: list[ImportReport] = field(default_factory=list)
    refused: bool = False

    @property
    def stopped(self) -> str | None:
        return next((r.stopped for r in self.reports if r.stopped), None)

    def as_dict(self) -> dict[str, Any]:
        return {"owner": self.owner, "refused": self.refused, "stopped": self.stopped,
                "files": [r.as_dict() for r in self.reports]}


def export_files(folder: Path) -> tuple[str, list[Path]]:
    """The export's owner and its item files in the order `export` writes them; ImportFileError for a folder that
    is not an export or misses a file its manifest lists."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise ImportFileError(f"{folder}: not an export folder (it has no {MANIFEST}); import its files one at a "
                              "time")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        owner, listed = manifest["owner"], manifest["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ImportFileError(f"{manifest_path}: not an export's manifest ({exc.__class__.__name__}: {exc})") from None
    names = [name for name in FILES.values() if name in listed]
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise ImportFileError(f"{folder}: {missing[0]} is listed in {MANIFEST} but missing; nothing imported")
    return str(owner), [folder / name for name in names]


def import_folder(
    pool: ConnectionPool | None,
    folder: str | Path,
    *,
    embedder: Any = None,
    llm: ChatLLM | None = None,
    owner: str | None = None,
    dry_run: bool = False,
    skip_invalid: bool = False,
    bar: Callable[[int, str], Any] | None = None,
) -> FolderReport:
    """Import every item file of an export folder into `owner` (default: the export's own owner)."""
    exported_owner, files = export_files(Path(folder))
    result = FolderReport(owner or exported_owner)
    if dry_run or not skip_invalid:
        result.reports = [import_file(None, f, owner=result.owner, dry_run=True) for f in files]
        result.refused = any(r.rejects for r in result.reports) and not dry_run
        if dry_run or result.refused:
            return result
    result.reports = []
    for f in files:
        try:
            report = import_file(pool, f, embedder=embedder, llm=llm, owner=result.owner, skip_invalid=skip_invalid,
                                 bar=bar if f.stat().st_size else None)
        except ImportInterrupted as exc:  # what the file wrote before the database failed; the rest is not tried
            report = exc.report
        result.reports.append(report)
        if report.stopped:
            break
    return result
