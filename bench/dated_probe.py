"""Dated everyday facts: questions that name only a day, over MemoryBank's daily conversations.

    .venv/bin/python bench/dated_probe.py [--embedding-cache DIR]     # writes bench/results/dated_probe.json

The issue's held-out "dated everyday facts" shape has no dev set, so this builds one from the dev battery's
memorybank_cross_dev (MIT): each of its 15 users (one owner each) talked with the companion on ten days, a few
exchanges a day; every (user, day) becomes the question "我5月3号跟你聊了些什么？" (Chinese memories) or "What did
I tell you on May 3?" (the same users' English memories), asked on June 1st, whose gold is that day's exchanges.
Neither channel can find them by their words: only the day named tells them apart. A third set, `spread`, keeps
memorybank_cross_dev's own questions and memories but moves its ten days forty days apart (January to December
2022, asked on 2023-02-01): the issue's "data whose dates spread over months", where recency must reorder
relevant items without burying old ones (context within 0.01 of hybrid). The sets are written to
bench/out/dated_probe/ and run like the battery's (keyword, semantic, hybrid, context; recall@10, 95 % intervals).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import eval_dev  # noqa: E402

from memory_pipelines.infra.embedded import exit_on_termination  # noqa: E402

OUT = REPO / "bench" / "out" / "dated_probe"
RESULT = REPO / "bench" / "results" / "dated_probe.json"
ASKED = "2023-06-01T00:00:00+00:00"
FORMS = {
    "en2zh": ("dated_zh", ["我{m}月{d}号跟你聊了些什么？", "{m}月{d}日那天我们说了什么？",
                           "还记得{m}月{d}号我跟你说的事吗？"]),
    "zh2en": ("dated_en", ["What did I tell you on {month} {d}?", "What did we talk about on {month} {d}?",
                           "Do you remember what I said on {month} {d}?"]),
}
MONTHS = {4: "April", 5: "May"}
SPREAD_START, SPREAD_GAP_DAYS, SPREAD_ASKED = datetime(2022, 1, 3), 40, "2023-02-01T00:00:00+00:00"


def build(source: Path) -> list[Path]:
    """Write one set per language of `source`'s memorybank_cross_dev memories; return their folders."""
    rng = random.Random(13)
    memories = [json.loads(line) for line in (source / "memories.jsonl").open()]
    folders = []
    for owner, (name, forms) in FORMS.items():
        folder = OUT / name
        folder.mkdir(parents=True, exist_ok=True)
        days: dict[tuple[str, str], list[str]] = defaultdict(list)
        with (folder / "memories.jsonl").open("w") as out:
            for m in (m for m in memories if m["owner"] == owner):
                user = "user" + m["id"].split("-")[1]  # ids are <owner>-<user>-<day>-<turn>
                out.write(json.dumps({**m, "owner": user}, ensure_ascii=False) + "\n")
                days[(user, m["created_at"][:10])].append(m["id"])
        with (folder / "queries.jsonl").open("w") as out:
            for i, ((user, day), gold) in enumerate(sorted(days.items())):
                month, d = int(day[5:7]), int(day[8:10])
                query = rng.choice(forms).format(m=month, d=d, month=MONTHS[month])
                out.write(json.dumps({"id": f"{name}-{i}", "owner": user, "query": query, "gold_ids": gold,
                                      "category": name, "asked_at": ASKED}, ensure_ascii=False) + "\n")
        folders.append(folder)
    return folders + [spread(source)]


def spread(source: Path) -> Path:
    """memorybank_cross_dev with its days `SPREAD_GAP_DAYS` apart (each turn keeps its time of day)."""
    folder = OUT / "spread"
    folder.mkdir(parents=True, exist_ok=True)
    memories = [json.loads(line) for line in (source / "memories.jsonl").open()]
    days = sorted({m["created_at"][:10] for m in memories})
    moved = {d: SPREAD_START + timedelta(days=SPREAD_GAP_DAYS * i) for i, d in enumerate(days)}
    with (folder / "memories.jsonl").open("w") as out:
        for m in memories:
            at = datetime.fromisoformat(m["created_at"])
            new = moved[m["created_at"][:10]].replace(tzinfo=at.tzinfo) + (at - at.replace(hour=0, minute=0,
                                                                                          second=0))
            out.write(json.dumps({**m, "created_at": new.isoformat(), "session": new.date().isoformat()},
                                 ensure_ascii=False) + "\n")
    with (folder / "queries.jsonl").open("w") as out:
        for line in (source / "queries.jsonl").open():
            out.write(json.dumps({**json.loads(line), "asked_at": SPREAD_ASKED}, ensure_ascii=False) + "\n")
    return folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", type=Path, default=None, help="the folder holding memorybank_cross_dev")
    ap.add_argument("--embedding-cache", type=Path, default=eval_dev.CACHE)
    args = ap.parse_args()
    source = (args.bench or eval_dev.default_bench()) / "memorybank_cross_dev"
    sets = eval_dev.run_sets(build(source), args.embedding_cache)
    model = sets.pop("_model")
    print(eval_dev.table(sets, None))
    for line in eval_dev.target_misses(sets):
        print(f"  miss  {line}")
    RESULT.write_text(json.dumps({"model": model, "metric": eval_dev.METRIC, "sets": sets}, indent=1) + "\n")
    print(f"wrote {RESULT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    raise SystemExit(main())
