"""The inbox: files dropped into `$MEMORY_PIPELINES_HOME/inbox/` are imported once each (the Dagster sensor
`inbox_sensor` launches the runs), then moved to `inbox/done/` or, when not imported, to `inbox/rejected/` beside
a `<name>.rejects.txt` that says why.

Where a file goes: in `inbox/<owner>/` its rows are that owner's (a row naming another owner is rejected), at the
top its rows need an `owner` column or get MEMORY_PIPELINES_OWNER. A file named after a source (`learnings.jsonl`,
`task-2024.csv`, `events_q3.parquet`) holds that source; otherwise each row's `source` column says.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..store.imports import FORMATS, IMPORT_SOURCES, ImportReport
from .export import MANIFEST, RECORD_FILES

DONE, REJECTED = "done", "rejected"
SETTLE_SECONDS = 5.0
"""A file changed more recently than this may still be being copied in: it waits for the next tick."""
_PARTITION_UNSAFE = re.compile(r"[\x00-\x1f,\[\]]")  # what a Dagster partition key may not hold
PARTIAL = (".part", ".tmp")
"""Suffixes of a file still being copied in: left to wait, never refused."""


@dataclass(frozen=True)
class InboxFile:
    """A file waiting in the inbox: its path relative to the inbox (the partition key), size, mtime and ctime."""

    relpath: str
    size: int
    mtime_ns: int
    ctime_ns: int = 0

    @property
    def run_key(self) -> str:
        """Another file, the same name written again, or a file moved back in (a rename changes its ctime) is
        another run; the same file never twice."""
        return f"{self.relpath}:{self.size}:{self.mtime_ns}:{self.ctime_ns}"


def inbox_dir(home: Path) -> Path:
    return home / "inbox"


def _dropped(inbox: Path) -> list[tuple[str, Path]]:
    """(path relative to the inbox, path) of each file at the top or in an owner's folder (or deeper: refused),
    not hidden nor in a hidden folder, not partial (.part, .tmp), not in done/ or rejected/, whatever its suffix."""
    found: list[tuple[str, Path]] = []
    if not inbox.is_dir():
        return found
    for entry in sorted(inbox.iterdir()):
        candidates = [entry]
        if entry.is_dir():
            if entry.name in (DONE, REJECTED) or entry.name.startswith("."):
                continue
            candidates = sorted(p for p in entry.rglob("*")
                                if not any(part.startswith(".") for part in p.relative_to(entry).parts[:-1]))
        for path in candidates:
            if not path.is_file() or path.name.startswith((".", "~")) or path.suffix.lower() in PARTIAL:
                continue
            found.append((path.relative_to(inbox).as_posix(), path))
    return found


def _importable(inbox: Path) -> list[tuple[str, Path]]:
    """The dropped files (`_dropped`) with an importable suffix, at the top or in an owner's folder, but an
    export's record files and the files of another owner's export (`foreign_exports`)."""
    foreign = foreign_exports(inbox)
    return [(relpath, path) for relpath, path in _dropped(inbox)
            if path.suffix.lower() in FORMATS and relpath.count("/") <= 1 and export_record_reason(relpath) is None
            and owner_of(relpath) not in foreign]


def foreign_exports(inbox: Path) -> dict[str, str]:
    """{folder: the owner its export's manifest names} for each folder of the inbox holding an export of another
    owner than the folder's name: an export folder dropped in whole (`inbox/alice-backup/`), whose items would
    otherwise become the folder name's."""
    found: dict[str, str] = {}
    if not inbox.is_dir():
        return found
    for manifest in sorted(inbox.glob(f"*/{MANIFEST}")):
        folder = manifest.parent.name
        try:
            owner = json.loads(manifest.read_text(encoding="utf-8")).get("owner")
        except (OSError, ValueError, AttributeError):
            continue  # not an export's manifest: the folder's files are its name's, as any owner folder's
        if isinstance(owner, str) and owner and owner != folder and folder not in (DONE, REJECTED):
            found[folder] = owner
    return found


def foreign_export_reason(relpath: str, foreign: dict[str, str]) -> str | None:
    """Why a file of another owner's export folder (`foreign_exports`) is not imported, or None."""
    folder = owner_of(relpath)
    if folder not in foreign:
        return None
    owner = foreign[folder]
    return (f"{relpath}: an export of owner '{owner}' in the folder '{folder}', whose files would become "
            f"'{folder}''s: put its files in inbox/{owner}/ to restore {owner}'s items; to give them to '{folder}', "
            f"drop them in again without {MANIFEST}; or import the whole folder with `memory-pipelines import DIR "
            "[--owner O]`")


def _settled(path: Path, settle_seconds: float, now: float) -> bool:
    return now - path.stat().st_mtime >= settle_seconds


def waiting_files(inbox: Path, *, settle_seconds: float = SETTLE_SECONDS, now: float | None = None) -> list[InboxFile]:
    """Files to import, oldest first: importable suffixes, at the top or in an owner's folder, not hidden, not
    partial (.part, .tmp), not in done/ or rejected/, unchanged for `settle_seconds`. A name a partition key
    cannot hold is left to `reject_unusable_names`."""
    now = time.time() if now is None else now
    found: list[tuple[int, InboxFile]] = []
    for relpath, path in _importable(inbox):
        if _PARTITION_UNSAFE.search(relpath) or not _settled(path, settle_seconds, now):
            continue
        st = path.stat()
        found.append((st.st_mtime_ns, InboxFile(relpath, st.st_size, st.st_mtime_ns, st.st_ctime_ns)))
    return [f for _m, f in sorted(found, key=lambda x: (x[0], x[1].relpath))]


def unusable_name_reason(relpath: str) -> str | None:
    """Why a file's path cannot name its import (a Dagster partition key), or None when it can."""
    bad = sorted(set(_PARTITION_UNSAFE.findall(relpath)))
    if not bad:
        return None
    shown = " ".join(repr(c) for c in bad)
    return (f"{relpath}: the file name cannot be used: it holds {shown}. A name in the inbox (its owner folder "
            "included) may not hold '[', ']', ',' or a control character (tab, newline, ...): rename it without "
            "them and drop it in again")


def unreadable_format_reason(relpath: str) -> str | None:
    """Why no import reads a file of this name (its suffix is none of FORMATS), or None when one does."""
    suffix = Path(relpath).suffix.lower()
    if suffix in FORMATS:
        return None
    return (f"{relpath}: not a format the import reads ({f'suffix {suffix}' if suffix else 'no suffix'}): the inbox "
            f"imports {', '.join(FORMATS)} files (a JSON array: one object a line as .jsonl); convert it and drop it "
            "in again")


def export_record_reason(relpath: str) -> str | None:
    """Why a file an export writes for the record (its manifest, the memories' replaced versions, the scoring
    configs) is not imported, or None for any other file. Its item files beside it are."""
    name = Path(relpath).name
    if name not in RECORD_FILES:
        return None
    return (f"{relpath}: an export's record, not items: the inbox imports the item files beside it (tasks.jsonl ... "
            "memories.jsonl). The scoring config is carried over by `memory-pipelines scoring restore "
            "scoring_configs.json`; a whole export folder imports with `memory-pipelines import DIR`")


def misplaced_reason(relpath: str) -> str | None:
    """Why a file is out of the inbox's reach (in a folder inside an owner's folder), or None."""
    if relpath.count("/") <= 1:
        return None
    owner = relpath.split("/", 1)[0]
    return (f"{relpath}: in a folder inside an owner's folder, where the inbox imports nothing: it reads its top "
            f"and owners' folders only; move it to inbox/{owner}/ (for {owner}'s rows) and drop it in again")


def reject_unusable_names(inbox: Path, *, settle_seconds: float = SETTLE_SECONDS,
                          now: float | None = None) -> list[Path]:
    """Move each settled file whose name a partition key cannot hold, whose format no import reads, that lies
    in a folder inside an owner's folder, or in another owner's export folder, to `rejected/`, with a
    `.rejects.txt` that says why; where they went.
    Without this such a file would wait in the inbox forever, unnoticed."""
    now = time.time() if now is None else now
    moved: list[Path] = []
    foreign = foreign_exports(inbox)
    dropped = _dropped(inbox)
    for relpath, path in dropped:
        reason = (misplaced_reason(relpath) or foreign_export_reason(relpath, foreign) or export_record_reason(relpath)
                  or unreadable_format_reason(relpath) or unusable_name_reason(relpath))
        if reason is None or not _settled(path, settle_seconds, now):
            continue
        if Path(relpath).name == MANIFEST and owner_of(relpath) in foreign and any(
                owner_of(other) == owner_of(relpath) and other != relpath for other, _p in dropped):
            continue  # the manifest stays until its folder's other files are set aside: it is what tells them apart
        target = move(inbox, relpath, REJECTED)
        write_rejects(target, None, reason)
        moved.append(target)
    return moved


def owner_of(relpath: str) -> str | None:
    """The owner folder a file sits in, or None at the top of the inbox."""
    parts = relpath.split("/")
    return parts[0] if len(parts) > 1 else None


def source_of(name: str) -> str | None:
    """The source a file's name starts with (`learnings.jsonl`, `task-2024.csv`), or None."""
    stem = name.split(".", 1)[0].lower()
    word = re.split(r"[^a-z]", stem, maxsplit=1)[0]
    plural = {"memories": "memory", "capabilities": "capability"}
    word = plural.get(word, word[:-1] if word.endswith("s") else word)
    return word if word in IMPORT_SOURCES else None


def _free(path: Path) -> Path:
    """`path`, or with the time before its suffix when a file of that name is already there."""
    if not path.exists():
        return path
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    return path.with_name(f"{path.stem}.{stamp}{path.suffix}")


def move(inbox: Path, relpath: str, to: str) -> Path:
    """Move an inbox file to `done/` or `rejected/`, keeping its owner folder; where it went."""
    target = _free(inbox / to / relpath)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(inbox / relpath, target)
    return target


def write_rejects(target: Path, report: ImportReport | None, error: str | None) -> Path:
    """`<file>.rejects.txt` beside a rejected file: the error, or each rejected line as `file:line: field: reason`
    (the command line's `import` says them the same way)."""
    lines = [error] if error else []
    if report is not None:
        name = Path(report.path).name
        lines += [f"{name}:{r.line}: {r.field}: {r.reason}" for r in report.rejects]
    out = target.with_name(target.name + ".rejects.txt")
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out
