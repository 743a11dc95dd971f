"""Measure the implicit-feedback decision on the demo corpus's simulated sessions (ground truth: `uses`).

Loads the demo corpus into a throwaway database on the configured server, embeds it with the configured model
(the bundled multilingual-e5-small by default), keyword-indexes it, replays every session (build → implicit
feedback), then reads back the evidence logged on every injected item and compares the decision with the items
each output really uses. Prints the channel distributions and, per threshold, precision and recall on the even
sessions (where the threshold is chosen: best F1 with precision ≥ 0.8) and on the odd ones (held out), overall,
per output style and per language pair of output and item.

    python scripts/calibrate_implicit.py [--limit N] [--json FILE] [--database NAME]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from datetime import timedelta
from typing import Any

import numpy as np
from psycopg.conninfo import make_conninfo

from memory_pipelines.context import implicit
from memory_pipelines.demo.corpus import load_demo, read_demo, stable_id
from memory_pipelines.demo.sessions import corpus_loaded_at, load_demo_sessions
from memory_pipelines.embeddings import make_embedder
from memory_pipelines.evaluation.run import scratch_database
from memory_pipelines.index.keywords import index_all
from memory_pipelines.index.vectors import embed_all, finish_memories
from memory_pipelines.infra.db import get_pool
from memory_pipelines.infra.embedded import database_url
from memory_pipelines.infra.settings import get_settings

THRESHOLDS = [round(t, 2) for t in np.arange(0.10, 0.91, 0.05)]
MIN_PRECISION = 0.8
"""A false 'used' teaches the tuner more harm than a missed one: the threshold keeps precision at least this."""


def item_ids(corpus: dict[str, Any]) -> dict[str, str]:
    """Logged item id → corpus key."""
    out = {str(stable_id(x["key"])): x["key"] for s in ("tasks", "learnings", "capabilities") for x in corpus[s]}
    out.update({"mem_" + stable_id(x["key"]).hex[:20]: x["key"] for x in corpus["memories"]})
    return out


def collect(pool, corpus: dict[str, Any], limit: int | None) -> list[dict[str, Any]]:
    """One row per injected item of every replayed session: its evidence and whether the output uses it."""
    keys = item_ids(corpus)
    texts = {x["key"]: (x.get("title", "") + " " + (x.get("content") or x.get("description") or "")) for s in
             ("tasks", "learnings", "memories") for x in corpus[s]}
    sessions = sorted(corpus["sessions"], key=lambda s: (-float(s["age_days"]), s["key"]))[:limit]
    rows = []
    with pool.connection() as conn:
        loaded = corpus_loaded_at(conn, corpus)
        for n, s in enumerate(sessions):
            as_of = loaded - timedelta(days=float(s["age_days"]))
            found = conn.execute(
                "SELECT c.source, c.item_id, c.evidence FROM retrievals r JOIN retrieval_candidates c"
                " ON c.retrieval_id = r.id WHERE r.owner_id = %s AND r.query = %s AND r.as_of = %s AND c.injected"
                " AND jsonb_typeof(c.evidence->'semantic') = 'number'",  # null: not measured (the embedder failed)
                (s["owner"], s["query"], as_of),
            ).fetchall()
            out_lang = implicit.language(s["output"])
            for source, item_id, ev in found:
                key = keys.get(item_id)
                rows.append({
                    "session": s["key"], "half": "even" if n % 2 == 0 else "odd", "style": s["style"],
                    "source": source, "truth": key in s["uses"], "semantic": ev["semantic"],
                    "lexical": ev["lexical"], "cosine": ev["cosine"],
                    "pair": f"{out_lang}-{implicit.language(texts.get(key, ''))}",
                })
    return rows


def scores(rows: list[dict[str, Any]], t: float, channel: str = "max") -> dict[str, Any]:
    def pred(r):
        v = max(r["semantic"], r["lexical"]) if channel == "max" else r[channel]
        return v >= t

    tp = sum(1 for r in rows if r["truth"] and pred(r))
    fp = sum(1 for r in rows if not r["truth"] and pred(r))
    fn = sum(1 for r in rows if r["truth"] and not pred(r))
    p = tp / (tp + fp) if tp + fp else None
    rc = tp / (tp + fn) if tp + fn else None
    f1 = 2 * p * rc / (p + rc) if p and rc else 0.0
    return {"threshold": t, "tp": tp, "fp": fp, "fn": fn, "precision": p, "recall": rc, "f1": f1}


def quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    q = np.quantile(values, [0.1, 0.5, 0.9])
    return f"p10 {q[0]:.2f}  median {q[1]:.2f}  p90 {q[2]:.2f}  (n={len(values)})"


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    even = [r for r in rows if r["half"] == "even"]
    odd = [r for r in rows if r["half"] == "odd"]
    for channel in ("semantic", "lexical"):
        for truth in (True, False):
            vals = [r[channel] for r in rows if r["truth"] == truth]
            print(f"{channel:<9} {'used' if truth else 'unused':<7} {quantiles(vals)}")
    print("\nthreshold  precision/recall (even: choose)   precision/recall (odd: held out)")
    sweep = []
    for t in THRESHOLDS:
        a, b = scores(even, t), scores(odd, t)
        sweep.append({"threshold": t, "even": a, "odd": b})
        print(f"  {t:.2f}     {_pr(a):<32} {_pr(b)}")
    ok = [s for s in sweep if (s["even"]["precision"] or 0) >= MIN_PRECISION] or sweep
    chosen = max(ok, key=lambda s: s["even"]["f1"])["threshold"]
    print(f"\nchosen on the even half (best F1 with precision ≥ {MIN_PRECISION}): {chosen}; constant in use: "
          f"{implicit.IMPLICIT_THRESHOLD}")
    t = implicit.IMPLICIT_THRESHOLD
    groups: dict[str, Any] = {"all (held out)": scores(odd, t), "all": scores(rows, t)}
    for ch in ("semantic", "lexical"):
        groups[f"{ch} alone"] = scores(rows, t, ch)
    for style in sorted({r["style"] for r in rows}):
        groups[f"style {style}"] = scores([r for r in rows if r["style"] == style], t)
    for pair in sorted({r["pair"] for r in rows}):
        groups[f"output-item {pair}"] = scores([r for r in rows if r["pair"] == pair], t)
    print(f"\nat {t}:")
    for name, s in groups.items():
        print(f"  {name:<24} {_pr(s)}  (tp {s['tp']}, fp {s['fp']}, fn {s['fn']})")
    return {"rows": len(rows), "positives": sum(r["truth"] for r in rows), "sweep": sweep, "chosen": chosen,
            "at_threshold": groups}


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _pr(s: dict[str, Any]) -> str:
    return f"P {_f(s['precision'])}  R {_f(s['recall'])}  F1 {s['f1']:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="replay only the first N sessions")
    parser.add_argument("--json", help="also write the rows and the report to this file")
    parser.add_argument("--database", help="resume in this database of the server (kept), e.g. after a timeout")
    args = parser.parse_args()
    settings = get_settings()
    embedder = make_embedder(settings)
    corpus = read_demo()
    server = database_url(settings)
    scratch = (contextlib.nullcontext(make_conninfo(server, dbname=args.database)) if args.database
               else scratch_database(server, embedder.dimension, embedder.model_name))
    with scratch as url:
        pool = get_pool(url, max_size=4)
        if not args.database:
            load_demo(pool)
            embed_all(pool, embedder)
            with pool.connection() as conn:
                finish_memories(conn, embedder.model_name)
            index_all(pool)
        print("replaying sessions...", file=sys.stderr)
        counts = load_demo_sessions(pool, embedder, corpus, limit=args.limit,
                                    progress=lambda n, total: print(f"\r{n}/{total}", end="", file=sys.stderr))
        print(f"\n{counts}", file=sys.stderr)
        rows = collect(pool, corpus, args.limit)
        pool.close()
    result = report(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"report": result, "rows": rows, "load": counts}, f, ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
