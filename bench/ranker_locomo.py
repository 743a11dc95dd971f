"""Does a learned ranker help on LoCoMo? Fit it on half the conversations, measure on the other half.

    .venv/bin/python bench/ranker_locomo.py [DIR] [--embedder local|openai|fake] [--limit N]
        [--embedding-cache DIR] [--save-frames FILE]

DIR (default ../shared/bench/locomo_dev) holds memories.jsonl + queries.jsonl. The turns go into a scratch
database as agent-mem memories (sessions kept, as `memory-pipelines eval` loads them), are embedded (the
local model by default; `--embedding-cache` keeps the vectors for a re-run) and keyword-indexed. Then:

1. **The unranked pass.** Every question with gold evidence is a logged `build_memory_context` (budget 800,
   `as_of` = the question's time, mode round-robin as in bench/tune_locomo.py) under the default scoring
   config: every candidate is logged with its features (sql/009). The gold turns among the logged candidates
   are marked used (oracle labels, as in tune_locomo).
2. **Folds.** By conversation: fold A fits on the first half of the sorted owners and tests on the rest,
   fold B swaps them, so every question is held out exactly once.
3. **Per fold and ranker variant** (class_weight None / balanced): the ranker is fitted on the training
   conversations' labelled candidates (`tuning.ranker.fit_model`), then
   * **replay**: the test builds' logged candidates re-ranked by the ranker vs by the fused score
     (recall@10 of the gold turns; hit@5, nDCG@10 and MRR as `tuning.evaluate` computes them);
   * **online**: a scoring config carrying the ranker is activated and every test question is built again
     (not logged); the injected block is compared with the unranked pass's: hit rate (a gold turn injected),
     recall of the gold turns in the block, recall@10 of the block's first 10 items, MRR of the first gold
     turn in the block. The default config is
     re-activated afterwards (that is the rollback).
   * **the tuner**: `tune_and_evaluate` on the same split (its cross-fitted check decides whether a ranker
     is proposed) and what the gate would decide.
4. Paired bootstrap (2,000 resamples over questions, both folds pooled) gives the 95 % intervals of each
   arm and of the difference.

`--write-ranker FILE` also fits the tuner's ranker on every question and writes it; `--apply-ranker FILE`
measures such a ranker on another dataset (no folds, every question), e.g. a LoCoMo ranker on
memorybank_cross_dev (Chinese ↔ English), to see whether it transfers.

The last stdout line is one JSON object, also written to bench/results/ranker_<dataset>.json
(ranker_transfer_<dataset>.json with --apply-ranker; `--out`); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from _common import add_out_argument, emit, out_path

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.context.config import activate, active_config, add_config
from memory_pipelines.context.features import Ranker
from memory_pipelines.context.log import record_feedback
from memory_pipelines.embeddings import make_embedder
from memory_pipelines.evaluation.run import load_memories, memory_id_for, read_dataset, scratch_database
from memory_pipelines.index.keywords import index_source
from memory_pipelines.index.vectors import embed_source
from memory_pipelines.infra.db import get_pool
from memory_pipelines.infra.embedded import database_url, exit_on_termination
from memory_pipelines.infra.settings import get_settings
from memory_pipelines.tuning.evaluate import feature_matrix, per_build_metrics, ranker_probability
from memory_pipelines.tuning.fit import FitOptions
from memory_pipelines.tuning.frames import FEATURES, load_log
from memory_pipelines.tuning.publish import decide, jsonable
from memory_pipelines.tuning.ranker import RankerOptions, fit_model, training_rows
from memory_pipelines.tuning.run import tune_and_evaluate
from memory_pipelines.vocabulary import CONTEXT_MODES as MODES

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo_dev"
VARIANTS = {"plain": RankerOptions(class_weight=None), "balanced": RankerOptions(class_weight="balanced")}
N_BOOT = 2000


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def recall(gold: set[str], ranked: list[str], k: int | None = None) -> float:
    top = ranked if k is None else ranked[:k]
    return len(gold & set(top)) / len(gold) if gold else 0.0


def first_gold(gold: set[str], ranked: list[str]) -> float:
    """1 / the position of the first gold item (0 if none)."""
    return next((1.0 / k for k, i in enumerate(ranked, start=1) if i in gold), 0.0)


def drive(pool, embedder, queries, qvecs, budget: int) -> list[dict[str, Any]]:
    """The unranked pass: one logged build per question, oracle labels on every logged candidate."""
    rows = []
    started = time.perf_counter()
    for i, q in enumerate(queries):
        mode = MODES[i % len(MODES)]
        r = build_memory_context(pool, embedder, q.owner, q.query, mode, budget, as_of=q.asked_at,
                                 query_vector=qvecs[i], exploration=0.0)
        gold = [memory_id_for(g) for g in q.gold]
        shown = [it.id for it in r.items]
        record_feedback(pool, q.owner, r.retrieval_id, [g for g in gold if g in shown])
        with pool.connection() as conn:
            conn.execute(
                "UPDATE retrieval_candidates SET used = (item_id = ANY(%s)) WHERE retrieval_id = %s AND owner_id = %s",
                (gold, r.retrieval_id, q.owner),
            )
        rows.append({"i": i, "qid": q.id, "owner": q.owner, "category": q.category, "mode": mode,
                     "retrieval_id": r.retrieval_id, "gold": gold, "injected": shown})
        if (i + 1) % 100 == 0:
            log(f"  {i + 1}/{len(queries)} builds ({(i + 1) / (time.perf_counter() - started):.1f}/s)")
    return rows


def replay_rankings(cands: pd.DataFrame, relevance: np.ndarray) -> dict[str, list[str]]:
    """Each build's logged memory candidates ordered by `relevance` (ties: the logged rank)."""
    df = pd.DataFrame({"rid": cands["retrieval_id"].to_numpy(), "id": cands["item_id"].to_numpy(),
                       "rel": relevance, "rank": cands["rank"].to_numpy(dtype=float)})
    df = df.sort_values(["rid", "rel", "rank"], ascending=[True, False, True], kind="mergesort")
    return {rid: list(g["id"]) for rid, g in df.groupby("rid", sort=False)}


def online(pool, embedder, queries, qvecs, rows: list[dict[str, Any]], budget: int) -> dict[str, list[str]]:
    """Build each question again under the active config (not logged): qid -> injected ids in block order."""
    out = {}
    started = time.perf_counter()
    for n, row in enumerate(rows, start=1):
        q = queries[row["i"]]
        r = build_memory_context(pool, embedder, q.owner, q.query, row["mode"], budget, as_of=q.asked_at,
                                 query_vector=qvecs[row["i"]], log_build=False, exploration=0.0)
        out[row["qid"]] = [it.id for it in r.items]
        if n % 200 == 0:
            log(f"    {n}/{len(rows)} ranked builds ({n / (time.perf_counter() - started):.1f}/s)")
    return out


def measure(pool, embedder, queries, qvecs, rows: list[dict[str, Any]], cands: pd.DataFrame, ranker: Ranker,
            base_rank: dict[str, list[str]], budget: int, base_version: int, note: str) -> dict[str, dict[str, float]]:
    """Per question: the replay (logged candidates re-ranked by `ranker` vs the fused score) and the online
    block with `ranker` active (then the base version is re-activated) vs the unranked pass's block."""
    rel = ranker_probability(ranker, feature_matrix(cands[FEATURES].to_numpy(), ranker.features))
    ranked = replay_rankings(cands, rel)
    cfg = dataclasses.replace(active_config(pool), ranker=ranker)
    pu = per_build_metrics(cands, cfg, relevance=cands["relevance"].to_numpy(dtype=float)).set_index("retrieval_id")
    pr = per_build_metrics(cands, cfg, relevance=rel).set_index("retrieval_id")
    version = add_config(pool, cfg, note=f"bench ranker {note}")
    activate(pool, version)
    try:
        injected = online(pool, embedder, queries, qvecs, rows, budget)
    finally:
        activate(pool, base_version)
    assert active_config(pool).ranker is None
    out = {}
    for r in rows:
        gold, rid, block = set(r["gold"]), r["retrieval_id"], injected[r["qid"]]
        out[r["qid"]] = {
            "replay_recall@10_unranked": recall(gold, base_rank.get(rid, []), 10),
            "replay_recall@10_ranked": recall(gold, ranked.get(rid, []), 10),
            **{f"replay_{m}_{arm}": float(pb.loc[rid, m]) if rid in pb.index else 0.0
               for m in ("hit@5", "ndcg@10", "mrr") for arm, pb in (("unranked", pu), ("ranked", pr))},
            "online_hit_unranked": float(bool(gold & set(r["injected"]))),
            "online_hit_ranked": float(bool(gold & set(block))),
            "online_recall_unranked": recall(gold, r["injected"]),
            "online_recall_ranked": recall(gold, block),
            "online_recall@10_unranked": recall(gold, r["injected"], 10),
            "online_recall@10_ranked": recall(gold, block, 10),
            "online_mrr_unranked": first_gold(gold, r["injected"]),
            "online_mrr_ranked": first_gold(gold, block),
        }
    return out


def paired(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> dict[str, Any]:
    """Means of a (unranked) and b (ranked) and of b − a, each with a paired bootstrap 95 % interval."""
    idx = rng.integers(0, len(a), (N_BOOT, len(a)))
    ma, mb, md = a[idx].mean(axis=1), b[idx].mean(axis=1), (b - a)[idx].mean(axis=1)

    def ci(x: np.ndarray) -> list[float]:
        return [round(float(np.percentile(x, 2.5)), 4), round(float(np.percentile(x, 97.5)), 4)]

    return {"n": int(len(a)), "unranked": round(float(a.mean()), 4), "unranked_ci": ci(ma),
            "ranked": round(float(b.mean()), 4), "ranked_ci": ci(mb),
            "delta": round(float((b - a).mean()), 4), "delta_ci": ci(md)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = get_settings()
    if args.embedder:
        settings = dataclasses.replace(settings, embedder=args.embedder)
    embedder = make_embedder(settings)
    if args.embedding_cache:
        from memory_pipelines.embeddings.cache import CachedEmbedder

        embedder = CachedEmbedder(embedder, args.embedding_cache)
    memories, queries = read_dataset(Path(args.dir))
    if args.limit:  # the first N questions of each conversation
        seen: dict[str, int] = defaultdict(int)
        kept = []
        for q in queries:
            seen[q.owner] += 1
            if seen[q.owner] <= args.limit:
                kept.append(q)
        queries = kept
    log(f"{len(memories)} turns, {len(queries)} questions with gold evidence; embedding the questions")
    qvecs = embedder.embed([q.query for q in queries], kind="query")
    t0 = time.perf_counter()
    out: dict[str, Any] = {"dataset": str(Path(args.dir).resolve()), "embedder": embedder.model_name,
                           "questions": len(queries), "turns": len(memories), "token_budget": args.budget}
    with scratch_database(database_url(settings), embedder.dimension, embedder.model_name) as url:
        pool = get_pool(url, max_size=6)
        log(f"loading {len(memories)} turns")
        load_memories(pool, memories)
        log(f"embedding with {embedder.model_name}")
        embed_source(pool, embedder, "fragment")
        index_source(pool, "fragment")
        t_index = time.perf_counter()
        log(f"{len(queries)} logged builds (unranked)")
        base_version = active_config(pool).version
        rows = drive(pool, embedder, queries, qvecs, args.budget)
        t_drive = time.perf_counter()
        frames = load_log(pool)
        by_qid = {r["qid"]: r for r in rows}
        if args.save_frames:
            with open(args.save_frames, "wb") as fh:
                pickle.dump({"frames": frames, "rows": rows}, fh)
        cands = frames.candidates
        logged_feats = int(sum(isinstance(f, dict) for f in cands[FEATURES]))
        log(f"{len(frames.builds)} builds, {len(cands)} candidates ({logged_feats} with features), "
            f"{int(cands['used'].sum())} used")
        owners = sorted(frames.builds["owner_id"].unique())
        half = (len(owners) + 1) // 2
        folds = {"A": (owners[:half], owners[half:]), "B": (owners[half:], owners[:half])}
        per_q: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)  # variant -> qid -> metric
        fold_info: dict[str, Any] = {}
        base_rank = replay_rankings(cands, cands["relevance"].to_numpy(dtype=float))
        if args.apply_ranker:  # a ranker fitted elsewhere, on every question of this dataset
            folds = {}
            given = Ranker.from_params(json.loads(Path(args.apply_ranker).read_text()))
            log(f"  the given ranker: online pass over {len(rows)} questions")
            per_q["given"].update(measure(pool, embedder, queries, qvecs, rows, cands, given, base_rank,
                                          args.budget, base_version, "given"))
            fold_info["given"] = {"ranker": given.params()}
        if args.write_ranker:  # the tuner's default options, fitted on every question
            every = training_rows(cands)
            opt = RankerOptions()
            whole = fit_model(feature_matrix(every[FEATURES].to_numpy(), opt.inputs),
                              every["used"].to_numpy(dtype=int), opt.inputs, opt,
                              {"dataset": out["dataset"], "candidates": len(every), "used": int(every["used"].sum()),
                               "builds": int(every["retrieval_id"].nunique()), "class_weight": opt.class_weight})
            Path(args.write_ranker).write_text(json.dumps(whole.params()))
        for fold, (train_owners, test_owners) in folds.items():
            train_b = frames.builds["owner_id"].isin(train_owners).to_numpy()
            test_b = frames.builds["owner_id"].isin(test_owners).to_numpy()
            train_c = training_rows(cands[cands["owner_id"].isin(train_owners)])
            test_c = cands[cands["owner_id"].isin(test_owners)].reset_index(drop=True)
            test_rows = [r for r in rows if r["owner"] in test_owners]
            info: dict[str, Any] = {"train_owners": train_owners, "test_owners": test_owners,
                                    "train_candidates": len(train_c), "train_used": int(train_c["used"].sum()),
                                    "test_questions": len(test_rows), "variants": {}}
            X = feature_matrix(train_c[FEATURES].to_numpy())
            y = train_c["used"].to_numpy(dtype=int)
            for name, opt in VARIANTS.items():
                ranker = fit_model(X, y, opt.inputs, opt, {"fold": fold, "train_owners": train_owners})
                log(f"  fold {fold} {name}: online pass over {len(test_rows)} questions")
                per_q[name].update(measure(pool, embedder, queries, qvecs, test_rows, test_c, ranker, base_rank,
                                           args.budget, base_version, f"fold {fold} {name}"))
                info["variants"][name] = {
                    "coef": dict(zip(ranker.features, [round(c, 4) for c in ranker.coef], strict=True)),
                    "intercept": round(ranker.intercept, 4),
                }
            log(f"  fold {fold}: the tuner on the same split")
            result = tune_and_evaluate(cands, frames.builds, train_b, test_b, active_config(pool),
                                       options=FitOptions(n_boot=args.bootstrap), n_boot_eval=1000)
            d = decide(result)
            rk = next(p for p in result["fit"]["params"] if p["name"] == "ranker")
            ev = result["evaluation"]
            info["tuner"] = {
                "ranker_row": {k: rk[k] for k in ("active", "estimate", "value", "ci_low", "ci_high", "n",
                                                  "n_used", "status")},
                "ranker_proposed": bool(result["proposed"]["params"].get("ranker")),
                "held_out": {m: [ev["configs"]["active"]["overall"].get(m), ev["configs"]["proposed"]["overall"].get(m)]
                             for m in ("hit@5", "ndcg@10", "mrr")},
                "delta_ci": {m: [ev["deltas"]["proposed"][m]["ci_low"], ev["deltas"]["proposed"][m]["ci_high"]]
                             for m in ("hit@5", "ndcg@10")},
                "gate": {"publish": d["publish"], "failed": [c["name"] for c in d["checks"] if not c["passed"]]},
                "notes": [n for n in result["fit"]["notes"] if n.startswith("ranker")],
            }
            fold_info[fold] = info
        t_folds = time.perf_counter()
    rng = np.random.default_rng(0)
    summary: dict[str, Any] = {}
    for name, qs in per_q.items():
        qids = sorted(qs)
        summary[name] = {}
        for metric in ("replay_recall@10", "replay_hit@5", "replay_ndcg@10", "replay_mrr", "online_hit",
                       "online_recall", "online_recall@10", "online_mrr"):
            a = np.array([qs[q][f"{metric}_unranked"] for q in qids])
            b = np.array([qs[q][f"{metric}_ranked"] for q in qids])
            summary[name][metric] = paired(a, b, rng)
        cats: dict[str, list[str]] = defaultdict(list)
        for q in qids:
            cats[by_qid[q]["category"]].append(q)
        summary[name]["by_category_replay_recall@10"] = {
            c: paired(np.array([qs[q]["replay_recall@10_unranked"] for q in ids]),
                      np.array([qs[q]["replay_recall@10_ranked"] for q in ids]), rng)
            for c, ids in sorted(cats.items())
        }
        summary[name]["by_category_online_hit"] = {
            c: paired(np.array([qs[q]["online_hit_unranked"] for q in ids]),
                      np.array([qs[q]["online_hit_ranked"] for q in ids]), rng)
            for c, ids in sorted(cats.items())
        }
    out.update({
        "tuner_ranker_options": dataclasses.asdict(RankerOptions()),
        "replay_metrics": "per question over every question (0 when no gold turn was among the candidates); "
                          "the tuner's held-out figures average over builds with a used item",
        "candidates_logged": int(len(cands)),
        "candidates_with_features": logged_feats,
        "folds": fold_info,
        "pooled": summary,
        "seconds": {"load_embed_index": round(t_index - t0, 1), "unranked_builds": round(t_drive - t_index, 1),
                    "folds": round(t_folds - t_drive, 1)},
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
    })
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", nargs="?", default=str(DEFAULT_DIR), help="memories.jsonl + queries.jsonl folder")
    p.add_argument("--embedder", choices=("local", "openai", "fake"), help="default: the configured one")
    p.add_argument("--limit", type=int, help="only the first N questions of each conversation")
    p.add_argument("--budget", type=int, default=800, help="token budget per build (default 800)")
    p.add_argument("--bootstrap", type=int, default=20, help="bootstrap refits of the tuner's parameter CIs")
    p.add_argument("--embedding-cache", metavar="DIR", help="keep the vectors in DIR (a re-run reads them)")
    p.add_argument("--save-frames", metavar="FILE", help="pickle the logged frames and the questions")
    p.add_argument("--write-ranker", metavar="FILE", help="also fit the ranker on every question, write it (JSON)")
    p.add_argument("--apply-ranker", metavar="FILE",
                   help="no folds: measure this ranker (a --write-ranker file) on every question of DIR")
    add_out_argument(p)
    args = p.parse_args(argv)
    started = time.perf_counter()
    out = run(args)
    out["seconds"]["total"] = round(time.perf_counter() - started, 1)
    dataset = Path(args.dir).name.removesuffix("_dev")
    name = f"ranker_transfer_{dataset}" if args.apply_ranker else f"ranker_{dataset}"
    emit(jsonable(out), None if args.limit and not args.out else out_path(args.out, name))  # a partial run: no file
    return 0


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    sys.exit(main())
