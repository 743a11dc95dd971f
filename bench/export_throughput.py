"""Export throughput: `GET /api/owner/export` of a real `memory-pipelines serve` against reading the same rows
in-process, same run, same owner.

An owner of `--rows` items (learnings and tasks, half each, imported from a JSON Lines file) is exported three ways:
`export_lines` in this process (the snapshot read and serialised, no HTTP: the baseline), the download streamed by
one httpx client from `serve` on loopback (what the key's owner and the web view's "Download export" get), and the
CLI's folder export (`export_owner`, files on disk). Each is timed from the request to the last byte, best of
`--repeat`; the download is checked line for line against the baseline.

Reported: rows/s of each and the ratio download / in-process (the cost of HTTP on top of the read).
Floor: the download at least half the in-process rate.

    python bench/export_throughput.py [--rows 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import httpx
from _common import log, machine, save_result, scratch, sentence
from import_throughput import learning, serving

from memory_pipelines.infra.auth import create_key
from memory_pipelines.infra.db import get_pool
from memory_pipelines.infra.embedded import exit_on_termination
from memory_pipelines.operations.export import export_lines, export_owner
from memory_pipelines.store.imports import import_file

OWNER = "team-export"
RESULTS = Path(__file__).parent / "results" / "export_throughput.json"
FLOOR_RATIO = 0.5


def write_rows(path: Path, rows: int, seed: int = 3) -> Path:
    """Half learnings (as the import bench writes them), half tasks, each with a key and an original time."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        for i in range(rows):
            row = {"source": "learning", **learning(rng, i, "l")}
            if i % 2:
                row = {"source": "task", "key": f"t-{i}", "title": row["title"], "description": sentence(rng),
                       "task_type": row["task_type"], "at": row["at"]}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def best(seconds: list[float]) -> float:
    return round(min(seconds), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    out: dict = {"benchmark": "export_throughput", "rows": args.rows, "machine_before": machine()}
    with tempfile.TemporaryDirectory(prefix="mp-export-bench-") as tmp, scratch(384) as url:
        tmp_path = Path(tmp)
        pool = get_pool(url)
        report = import_file(pool, write_rows(tmp_path / "rows.jsonl", args.rows), owner=OWNER)
        assert report.totals["created"] == args.rows and not report.rejects, report.as_dict()
        log(f"{args.rows} items written for {OWNER}")

        inproc, baseline = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            baseline = list(export_lines(pool, OWNER))
            inproc.append(time.perf_counter() - t0)
        log(f"  in-process: {best(inproc)} s")

        folder = []
        for i in range(args.repeat):
            t0 = time.perf_counter()
            manifest = export_owner(pool, OWNER, tmp_path / f"folder-{i}")
            folder.append(time.perf_counter() - t0)
        assert sum(manifest["files"][f] for f in ("tasks.jsonl", "learnings.jsonl")) == args.rows, manifest
        log(f"  CLI folder export: {best(folder)} s")

        key = create_key(pool, OWNER)[1]
        download, size = [], 0
        with serving(url, tmp_path) as (base, _server):
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                with httpx.stream("GET", f"{base}/api/owner/export", headers={"Authorization": f"Bearer {key}"},
                                  timeout=600) as answer:
                    answer.raise_for_status()
                    body = answer.read()
                download.append(time.perf_counter() - t0)
                size = len(body)
                assert body.decode("utf-8").splitlines(keepends=True) == baseline, "the download differs"
        log(f"  download over HTTP: {best(download)} s ({size / 1e6:.1f} MB)")

    rate = {name: round(args.rows / best(s), 1) for name, s in
            (("in_process", inproc), ("download", download), ("cli_folder", folder))}
    ratio = round(rate["download"] / rate["in_process"], 3)
    out.update({
        "seconds_best_of": args.repeat,
        "seconds": {"in_process": best(inproc), "download": best(download), "cli_folder": best(folder)},
        "rows_per_second": rate, "download_mb": round(size / 1e6, 1),
        "ratio_download_vs_in_process": ratio, "floor_ratio": FLOOR_RATIO, "meets_floor": ratio >= FLOOR_RATIO,
    })
    log(f"download / in-process = {ratio} (floor {FLOOR_RATIO})")
    save_result(out, args.out)


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    main()
