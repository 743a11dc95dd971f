"""Offline tuning on a real retrieval log: LoCoMo questions drive the context builder, gold evidence = used.

    .venv/bin/python bench/tune_locomo.py [DIR] [--embedder local|openai|fake] [--limit N]

DIR (a LoCoMo folder; format: docs/retrieval-quality.md) has memories.jsonl + queries.jsonl. For each of two variants
the memories go into a scratch database on the configured server (dropped afterwards), are embedded with
the configured model (the local one by default) and keyword-indexed; then every question with gold
evidence is a `build_memory_context` call (budget 800, `as_of` = the question's time, logged), its mode
taken round-robin over plan / execute / debug / chat in question order (the data has no mode; with one
source per variant the mode cannot change a ranking anyway). Feedback: `record_feedback` marks the gold
turns among the injected items (what a caller would report), then the gold turns among all logged
candidates are marked too (oracle labels: the replay can then re-rank everything the retrievers found).

- variant `memory`: the turns as agent-mem memories (source `memory`: no decay, weight 1.0 in every
  mode), as `memory-pipelines eval` loads them. The tuner has nothing to move here.
- variant `task`: the same turns as task rows (title = speaker, description = text, created_at = the
  session time), so the task half-life (30 d by default) applies and can be fitted.

Split by conversation: tune on the first half of the owners (sorted), evaluate on the other half with
`tune_and_evaluate`, and the swapped split as a second fold. Progress goes to stderr; the last stdout line
is one JSON object with the before / after held-out figures, the fitted parameters and the gate decision,
for both label scopes (oracle: all candidates; feedback: injected items only), also written to
bench/results/tune_<dataset>.json (`--out`; a run with `--limit` writes no file unless asked).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_out_argument, emit, out_path

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.context.config import active_config
from memory_pipelines.context.log import record_feedback
from memory_pipelines.embeddings import Embedder, make_embedder
from memory_pipelines.evaluation.run import Query, load_memories, memory_id_for, read_dataset, scratch_database
from memory_pipelines.index.keywords import index_source
from memory_pipelines.index.vectors import embed_source
from memory_pipelines.infra.db import get_pool
from memory_pipelines.infra.embedded import database_url, exit_on_termination
from memory_pipelines.infra.settings import get_settings
from memory_pipelines.tuning.fit import FitOptions
from memory_pipelines.tuning.frames import LogFrames, load_log
from memory_pipelines.tuning.publish import Gate, decide, jsonable
from memory_pipelines.tuning.run import tune_and_evaluate
from memory_pipelines.vocabulary import CONTEXT_MODES as MODES

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo_dev"
TASK_NS = uuid.UUID("6f1d3c52-8a4e-4b1c-9d59-3f0e6c1a7b20")
METRICS = ("hit@1", "hit@3", "hit@5", "ndcg@10", "mrr", "tokens_per_hit")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_time(value: str) -> datetime:
    """Dataset times are naive ISO strings: UTC, as `memory_pipelines.evaluation.run` reads them."""
    ts = datetime.fromisoformat(value)
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def task_id_for(eval_id: str) -> str:
    return str(uuid.uuid5(TASK_NS, eval_id))


def load_as_tasks(pool, memories: list[dict[str, Any]]) -> None:
    """The turns as completed task rows: title = speaker, description = text, created_at = session time."""
    with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO tasks (id, owner_id, title, description, task_type, status, metadata, created_at)"
            " VALUES (%s, %s, %s, %s, 'talk', 'completed', '{}'::jsonb, %s)",
            [
                (
                    task_id_for(m["id"]),
                    m["owner"],
                    m.get("speaker") or "speaker",
                    m["text"],
                    parse_time(m["created_at"]),
                )
                for m in memories
            ],
        )


VARIANTS: dict[str, tuple[str, Callable[[str], str]]] = {
    "memory": ("fragment", memory_id_for),
    "task": ("task", task_id_for),
}


def drive(
    pool,
    embedder: Embedder,
    queries: list[Query],
    qvecs: np.ndarray,
    stored_id: Callable[[str], str],
    budget: int,
    explore: float,
) -> dict[str, Any]:
    """One logged build per question, feedback on the injected gold items, then oracle labels on all."""
    stats = {"builds": 0, "gold_in_candidates": 0, "gold_injected": 0, "injected": 0, "candidates": 0}
    started = time.perf_counter()
    for i, q in enumerate(queries):
        mode = MODES[i % len(MODES)]
        r = build_memory_context(
            pool, embedder, q.owner, q.query, mode, budget, as_of=q.asked_at, query_vector=qvecs[i], exploration=explore
        )
        gold = [stored_id(g) for g in q.gold]
        shown = {it.id for it in r.items}
        record_feedback(pool, q.owner, r.retrieval_id, [g for g in gold if g in shown])
        with pool.connection() as conn:
            found = conn.execute(
                "UPDATE retrieval_candidates SET used = (item_id = ANY(%s))"
                " WHERE retrieval_id = %s AND owner_id = %s RETURNING used",
                (gold, r.retrieval_id, q.owner),
            ).fetchall()
        stats["builds"] += 1
        stats["candidates"] += len(found)
        stats["injected"] += len(shown)
        stats["gold_in_candidates"] += any(u for (u,) in found)
        stats["gold_injected"] += bool(shown & set(gold))
        if (i + 1) % 100 == 0:
            rate = (i + 1) / (time.perf_counter() - started)
            log(f"  {i + 1}/{len(queries)} builds ({rate:.1f}/s)")
    n = max(stats["builds"], 1)
    return {
        "builds": stats["builds"],
        "candidates_per_build": round(stats["candidates"] / n, 2),
        "injected_per_build": round(stats["injected"] / n, 2),
        "share_with_gold_among_candidates": round(stats["gold_in_candidates"] / n, 4),
        "share_with_gold_injected": round(stats["gold_injected"] / n, 4),
    }


def _round(v: Any, digits: int = 4) -> Any:
    return None if v is None else round(float(v), digits)


def summarise(result: dict[str, Any], gate: Gate) -> dict[str, Any]:
    ev = result["evaluation"]
    act, pro = ev["configs"]["active"]["overall"], ev["configs"]["proposed"]["overall"]
    deltas = ev.get("deltas", {}).get("proposed", {})
    decision = decide(result, gate)
    fit = result["fit"]
    return {
        "train_builds": result["data"]["train_builds"],
        "test_builds": result["data"]["test_builds"],
        "test_builds_with_use": act["n_with_use"],
        "labels": result["data"]["population"],
        "before": {m: _round(act.get(m), 1 if m == "tokens_per_hit" else 4) for m in METRICS},
        "after": {m: _round(pro.get(m), 1 if m == "tokens_per_hit" else 4) for m in METRICS},
        "delta_95ci": {
            m: [_round(deltas[m]["ci_low"]), _round(deltas[m]["ci_high"])]
            for m in ("hit@5", "ndcg@10", "mrr")
            if deltas.get(m) and deltas[m]["delta"] is not None
        },
        "by_mode_hit@5": {
            mode: [_round(a.get("hit@5")), _round(ev["configs"]["proposed"]["by_mode"][mode].get("hit@5"))]
            for mode, a in ev["configs"]["active"]["by_mode"].items()
        },
        "relevance_coef": _round(fit["relevance_coef"]),
        "signal": fit["signal"],
        "params": [
            {
                k: (_round(p[k], 3) if isinstance(p[k], float) else p[k])
                for k in ("name", "active", "estimate", "value", "ci_low", "ci_high", "n", "n_used", "status")
            }
            for p in fit["params"]
            if p["status"] in ("fitted", "clamped") or p["n"]
        ],
        "notes": fit["notes"],
        "gate": {"publish": decision["publish"], "failed": [c["name"] for c in decision["checks"] if not c["passed"]]},
    }


def tune(frames: LogFrames, active, owners: list[str], opt: FitOptions, n_boot_eval: int, gate: Gate) -> dict[str, Any]:
    """Both label scopes × both folds (train on one half of the owners, evaluate on the other)."""
    half = (len(owners) + 1) // 2
    folds = {"A": (owners[:half], owners[half:]), "B": (owners[half:], owners[:half])}
    owner_col = frames.builds["owner_id"]
    cands_oracle = frames.candidates
    cands_feedback = cands_oracle.assign(used=cands_oracle["used"] & cands_oracle["injected"])
    out: dict[str, Any] = {}
    for labels, cands in (("oracle", cands_oracle), ("feedback", cands_feedback)):
        out[labels] = {}
        for fold, (train_owners, test_owners) in folds.items():
            train = owner_col.isin(train_owners).to_numpy()
            test = owner_col.isin(test_owners).to_numpy()
            result = tune_and_evaluate(cands, frames.builds, train, test, active, options=opt, n_boot_eval=n_boot_eval)
            out[labels][fold] = {"train_owners": train_owners, "test_owners": test_owners, **summarise(result, gate)}
            s = out[labels][fold]
            log(
                f"  {labels} labels, fold {fold}: hit@5 {s['before']['hit@5']} -> {s['after']['hit@5']}, "
                f"ndcg@10 {s['before']['ndcg@10']} -> {s['after']['ndcg@10']}, gate "
                f"{'PASS' if s['gate']['publish'] else 'fail: ' + ', '.join(s['gate']['failed'])}"
            )
    return out


def run_variant(
    name: str,
    server: str,
    embedder: Embedder,
    memories: list[dict[str, Any]],
    queries: list[Query],
    qvecs: np.ndarray,
    args: argparse.Namespace,
) -> dict[str, Any]:
    source, stored_id = VARIANTS[name]
    t0 = time.perf_counter()
    with scratch_database(server, embedder.dimension, embedder.model_name) as url:
        pool = get_pool(url, max_size=6)
        log(f"[{name}] loading {len(memories)} turns")
        if name == "memory":
            load_memories(pool, memories)
        else:
            load_as_tasks(pool, memories)
        log(f"[{name}] embedding with {embedder.model_name}")
        emb = embed_source(pool, embedder, source)
        index_source(pool, source)
        t_index = time.perf_counter()
        log(f"[{name}] {len(queries)} logged builds")
        stats = drive(pool, embedder, queries, qvecs, stored_id, args.budget, args.explore)
        t_builds = time.perf_counter()
        frames = load_log(pool)
        active = active_config(pool)
        owners = sorted(frames.builds["owner_id"].unique())
        log(f"[{name}] tuning on {len(frames.builds)} builds, {len(frames.candidates)} candidates")
        opt = FitOptions(n_boot=args.bootstrap)
        folds = tune(frames, active, owners, opt, args.eval_bootstrap, Gate())
        return {
            "source": "memory" if name == "memory" else "task",
            "active_version": active.version,
            "active_half_life": active.half_lives.get("memory" if name == "memory" else "task"),
            "embedded": emb.embedded,
            **stats,
            "seconds": {
                "load_embed_index": round(t_index - t0, 1),
                "builds": round(t_builds - t_index, 1),
                "tune": round(time.perf_counter() - t_builds, 1),
            },
            "results": folds,
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", default=str(DEFAULT_DIR), help="memories.jsonl + queries.jsonl folder")
    p.add_argument(
        "--embedder",
        choices=("local", "openai", "fake"),
        help="embedding provider (default: the configured one, local without a key)",
    )
    p.add_argument("--limit", type=int, help="only the first N questions (a quick run)")
    p.add_argument("--budget", type=int, default=800, help="token budget per build (default 800)")
    p.add_argument("--explore", type=float, default=0.0, help="share of randomised builds (default 0)")
    p.add_argument("--bootstrap", type=int, default=50, help="bootstrap refits for parameter CIs")
    p.add_argument("--eval-bootstrap", type=int, default=1000, help="paired bootstrap resamples for deltas")
    p.add_argument("--variants", default="memory,task", help="comma-separated: memory, task")
    add_out_argument(p)
    args = p.parse_args(argv)
    started = time.perf_counter()
    settings = get_settings()
    if args.embedder:
        settings = dataclasses.replace(settings, embedder=args.embedder)
    embedder = make_embedder(settings)
    memories, queries = read_dataset(Path(args.dir))
    if args.limit:
        queries = queries[: args.limit]
    log(f"{len(memories)} turns, {len(queries)} questions with gold evidence; embedding the questions")
    qvecs = embedder.embed([q.query for q in queries], kind="query")
    server = database_url(settings)
    out: dict[str, Any] = {
        "dataset": str(Path(args.dir).resolve()),
        "embedder": embedder.model_name,
        "questions": len(queries),
        "turns": len(memories),
        "token_budget": args.budget,
        "modes": "round-robin plan/execute/debug/chat in question order",
        "split": "by conversation: fold A trains on the first half of the sorted owners, tests on the rest; "
        "fold B swaps them",
        "variants": {},
    }
    for name in [v.strip() for v in args.variants.split(",") if v.strip()]:
        if name not in VARIANTS:
            p.error(f"unknown variant {name!r}")
        out["variants"][name] = run_variant(name, server, embedder, memories, queries, qvecs, args)
    out["seconds"] = round(time.perf_counter() - started, 1)
    name = "tune_" + Path(args.dir).name.removesuffix("_dev")
    emit(jsonable(out), None if args.limit and not args.out else out_path(args.out, name))  # a partial run: no file
    return 0


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    sys.exit(main())
