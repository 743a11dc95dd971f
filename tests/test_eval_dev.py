"""The dev battery (`bench/eval_dev.py`) end to end on a small set: its table, the per-owner changes against a
previous result, and the exit status that refuses a set fallen below its previous interval."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.test_evaluation import _folder

REPO = Path(__file__).resolve().parents[1]


def _battery(
    db_url: str, bench: Path, out: Path, previous: Path, plot: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / "eval_dev.py"), "--bench", str(bench), "--out", str(out),
         "--previous", str(previous), "--embedding-cache", str(out.parent / "cache"),
         "--rankings", str(out.parent / "rankings"), *(["--plot", str(plot)] if plot else ["--no-plot"])],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "DATABASE_URL": db_url, "MEMORY_PIPELINES_EMBEDDER": "fake"})


def test_the_battery_reports_each_owner_and_refuses_a_fall(db_url, tmp_path):
    bench = tmp_path / "bench"
    (bench / "tiny").mkdir(parents=True)
    _folder(bench / "tiny")  # owners alice and bob, six questions each
    runs = tmp_path / "runs"
    runs.mkdir()
    missing = runs / "none.json"
    missing.write_text(json.dumps({"commit": "none", "sets": {}}))
    first = _battery(db_url, bench, runs / "first.json", missing)
    assert first.returncode == 0, first.stderr
    result = json.loads((runs / "first.json").read_text())
    tiny = result["sets"]["tiny"]
    owners = tiny["owners"]["hybrid"]
    assert set(owners) == {"alice", "bob"} and all(o["n"] == 6 for o in owners.values())
    ranks = [json.loads(x) for x in (runs / "rankings" / "tiny.jsonl").read_text().splitlines()]
    alice = [r for r in ranks if r["owner"] == "alice"]
    want = sum(len(set(r["gold"]) & set(r["rankings"]["hybrid"][:10])) / len(r["gold"]) for r in alice) / len(alice)
    assert abs(owners["alice"]["recall@10"] - round(want, 4)) < 1e-9
    assert "tiny: 2 owners (no per-owner figures in the previous run)" in first.stdout

    # A previous run where alice scored more and bob less, and hybrid's whole-set interval sat above today's.
    before = json.loads(json.dumps(result))
    prev_owners = before["sets"]["tiny"]["owners"]["hybrid"]
    prev_owners["alice"]["recall@10"] = owners["alice"]["recall@10"] + 0.25
    prev_owners["bob"]["recall@10"] = owners["bob"]["recall@10"] - 0.1
    overall = before["sets"]["tiny"]["results"]["hybrid"]["overall"]
    overall["recall@10_ci"] = [overall["recall@10"] + 0.05, overall["recall@10"] + 0.2]
    (runs / "before.json").write_text(json.dumps(before))
    second = _battery(db_url, bench, runs / "second.json", runs / "before.json", plot=runs / "plot.png")
    assert second.returncode == 1, second.stdout + second.stderr
    assert "tiny: 2 owners, 1 up, 1 down, 0 unchanged; largest fall alice -0.250" in second.stdout, second.stdout
    assert "LOWER tiny / overall / hybrid" in second.stdout
    png = (runs / "plot.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # the sets' bars and the owners' bars
