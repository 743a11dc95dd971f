"""The dev battery: `memory-pipelines eval` over every set of a bench folder, one table, and a regression check.

    make eval-dev                      # every set of ../shared/bench, the committed result as the reference
    .venv/bin/python bench/eval_dev.py [--bench DIR] [--sets a,b] [--embedding-cache DIR] [--out PATH]
                                       [--previous PATH] [--rankings DIR] [--plot PNG | --no-plot]

Every sub-folder of `--bench` holding memories.jsonl + queries.jsonl is evaluated as `memory-pipelines eval`
does (a throwaway database each, the configured embedder, chat-mode context builds at 32,000 tokens), running
the keyword and semantic channels, hybrid search and the context builder. The table shows recall@10 with its
95 % bootstrap interval per set and per category, and how each set moved against the previous result; below it,
per set, how many of its owners (conversations, users) hybrid moved up or down (each set's figures per owner and
method are kept in the result as `owners`).

The previous result is the committed `bench/results/eval_dev.json` (`git show HEAD:...`), else the file on
disk, else `--previous`. A set or category whose recall@10 (any method) falls below the previous run's 95 %
interval is flagged and the command exits 1. The two quality targets (hybrid within 0.005 of its better
channel, context within 0.01 of hybrid) are printed beside it. A run of every set writes
`bench/results/eval_dev.json` and `eval_dev.png` (before / after bars, per set and per owner); a run of some sets writes
`bench/out/eval_dev.json` instead, so a partial run never replaces the reference. Each set's per-query
rankings go to `bench/out/rankings/<set>.jsonl` (or `--rankings`) (compare two runs with `evaluation.compare_runs`).
Embeddings are kept in `--embedding-cache` (default bench/out/embedding_cache), so a rerun embeds only what
changed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from memory_pipelines.evaluation.run import METHODS  # noqa: E402
from memory_pipelines.infra.embedded import exit_on_termination  # noqa: E402

RESULT = REPO / "bench" / "results" / "eval_dev.json"
PARTIAL = REPO / "bench" / "out" / "eval_dev.json"
PLOT = REPO / "bench" / "results" / "eval_dev.png"
RANKINGS = REPO / "bench" / "out" / "rankings"
CACHE = REPO / "bench" / "out" / "embedding_cache"
SHOWN = ("keyword", "semantic", "hybrid", "context")
RUN = (*SHOWN, "hybrid_matched")
METRIC = "recall@10"
FUSION_SLACK, CONTEXT_SLACK = 0.005, 0.01  # the targets: hybrid ≥ best channel − 0.005, context ≥ hybrid − 0.01


def default_bench() -> Path:
    """../shared/bench beside the repository; from a git worktree, beside its main checkout."""
    common = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--path-format=absolute", "--git-common-dir"],
                            capture_output=True, text=True).stdout.strip()
    roots = [REPO, *([Path(common).parent] if common else [])]
    found = [r / ".." / "shared" / "bench" for r in roots if (r / ".." / "shared" / "bench").is_dir()]
    return (found or [REPO / ".." / "shared" / "bench"])[0].resolve()


def dev_sets(bench: Path) -> list[Path]:
    """The sub-folders of `bench` that hold a data set, by name."""
    return sorted(p for p in bench.iterdir() if (p / "memories.jsonl").is_file() and (p / "queries.jsonl").is_file())


def previous_result(explicit: Path | None) -> tuple[dict[str, Any] | None, str]:
    """The reference run and where it came from: `explicit`, else the committed result, else the file."""
    if explicit is not None:
        return json.loads(explicit.read_text()), str(explicit)
    rel = RESULT.relative_to(REPO).as_posix()
    shown = subprocess.run(["git", "-C", str(REPO), "show", f"HEAD:{rel}"], capture_output=True, text=True)
    if shown.returncode == 0:
        return json.loads(shown.stdout), f"HEAD:{rel}"
    if RESULT.is_file():
        return json.loads(RESULT.read_text()), str(RESULT)
    return None, "none"


def run_sets(folders: list[Path], cache: Path, rankings: Path = RANKINGS) -> dict[str, Any]:
    """{set: {"n_memories", "seconds", "results"}} of every folder (`evaluation.evaluate`)."""
    from memory_pipelines.embeddings import make_embedder
    from memory_pipelines.embeddings.cache import CachedEmbedder
    from memory_pipelines.evaluation.run import evaluate
    from memory_pipelines.infra.embedded import database_url
    from memory_pipelines.infra.settings import get_settings

    settings = get_settings()
    embedder = CachedEmbedder(make_embedder(settings), cache)
    url = database_url(settings)
    out: dict[str, Any] = {}
    for folder in folders:
        t0 = time.perf_counter()
        print(f"[{folder.name}] evaluating ...", file=sys.stderr, flush=True)
        ranks = rankings / f"{folder.name}.jsonl"
        results = evaluate(url, embedder, folder, methods=RUN, save_rankings=ranks)
        out[folder.name] = {"seconds": round(time.perf_counter() - t0, 1), "results": results,
                            "owners": owner_scores(ranks)}
        print(f"[{folder.name}] done in {out[folder.name]['seconds']} s (cache: {embedder.hits} read, "
              f"{embedder.misses} embedded)", file=sys.stderr, flush=True)
    out["_model"] = embedder.model_name
    return out


def owner_scores(rankings: Path) -> dict[str, dict[str, dict[str, float]]]:
    """{method: {owner: {"recall@10", "n"}}} from a set's per-query rankings (`write_rankings`)."""
    from memory_pipelines.evaluation.stats import query_scores

    per: dict[str, dict[str, list[float]]] = {}
    for line in rankings.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for method, ranked in row["rankings"].items():
            per.setdefault(method, {}).setdefault(row["owner"], []).append(query_scores(ranked, row["gold"])[METRIC])
    return {m: {o: {METRIC: round(sum(v) / len(v), 4), "n": len(v)} for o, v in sorted(owners.items())}
            for m, owners in per.items()}


def owner_changes(sets: dict[str, Any], previous: dict[str, Any] | None, method: str = "hybrid") -> list[str]:
    """Per set, how many owners (conversations, users) `method` moved up or down against the previous run and
    the largest fall: a change that helps one owner and costs the rest will not carry over to other owners."""
    lines = []
    for name, entry in sets.items():
        now = entry.get("owners", {}).get(method, {})
        before = ((previous or {}).get("sets") or {}).get(name, {}).get("owners", {}).get(method, {})
        deltas = {o: now[o][METRIC] - before[o][METRIC] for o in now if o in before}
        if not deltas:
            lines.append(f"{name}: {len(now)} owners (no per-owner figures in the previous run)")
            continue
        up = sum(1 for d in deltas.values() if d > 0.0005)
        down = sum(1 for d in deltas.values() if d < -0.0005)
        worst = min(deltas, key=deltas.get)
        fall = f"; largest fall {worst} {deltas[worst]:+.3f}" if deltas[worst] < -0.0005 else ""
        lines.append(f"{name}: {len(deltas)} owners, {up} up, {down} down, {len(deltas) - up - down} unchanged{fall}")
    return lines


def _cell(m: dict[str, Any]) -> str:
    lo, hi = m[f"{METRIC}_ci"]
    return f"{m[METRIC]:.3f} [{lo:.3f},{hi:.3f}]"


def table(sets: dict[str, Any], previous: dict[str, Any] | None) -> str:
    """One row per set and category: each method's recall@10 [95 % interval], then hybrid's and context's
    change against the previous run."""
    head = f"{'set / category':<34}{'n':>5}  " + "".join(f"{m:<22}" for m in SHOWN) + "Δhybrid  Δcontext"
    lines = [head, "-" * len(head)]
    for name, entry in sets.items():
        res = entry["results"]
        prev = ((previous or {}).get("sets") or {}).get(name, {}).get("results")
        for cat in res["hybrid"]:
            label = name if cat == "overall" else f"  {cat}"
            row = f"{label:<34}{res['hybrid'][cat]['n']:>5}  " + "".join(f"{_cell(res[m][cat]):<22}" for m in SHOWN)
            for m in ("hybrid", "context"):
                before = (prev or {}).get(m, {}).get(cat)
                row += f"{res[m][cat][METRIC] - before[METRIC]:+.3f}   " if before else "   -     "
            lines.append(row.rstrip())
    return "\n".join(lines)


def regressions(sets: dict[str, Any], previous: dict[str, Any] | None) -> list[str]:
    """Every (set, category, method) whose recall@10 is below the previous run's 95 % interval."""
    found = []
    for name, entry in sets.items():
        prev = ((previous or {}).get("sets") or {}).get(name, {}).get("results")
        if not prev:
            continue
        for m in SHOWN:
            for cat, now in entry["results"][m].items():
                before = prev.get(m, {}).get(cat)
                if before and now[METRIC] < before[f"{METRIC}_ci"][0]:
                    found.append(f"{name} / {cat} / {m}: {now[METRIC]:.3f} < {before[METRIC]:.3f} "
                                 f"[{before[f'{METRIC}_ci'][0]:.3f}, {before[f'{METRIC}_ci'][1]:.3f}]")
    return found


def target_misses(sets: dict[str, Any]) -> list[str]:
    """Where hybrid is below its better channel − FUSION_SLACK, or context below hybrid − CONTEXT_SLACK."""
    misses = []
    for name, entry in sets.items():
        res = entry["results"]
        for cat in res["hybrid"]:
            hybrid = res["hybrid"][cat][METRIC]
            best = max(res["keyword"][cat][METRIC], res["semantic"][cat][METRIC])
            if hybrid < best - FUSION_SLACK:
                misses.append(f"{name} / {cat}: hybrid {hybrid:.3f} < best channel {best:.3f} − {FUSION_SLACK}")
            context = res["context"][cat][METRIC]
            if context < hybrid - CONTEXT_SLACK:
                misses.append(f"{name} / {cat}: context {context:.3f} < hybrid {hybrid:.3f} − {CONTEXT_SLACK}")
    return misses


def plot(sets: dict[str, Any], previous: dict[str, Any] | None, path: Path) -> None:
    """Top: per set, recall@10 of each method before (the previous run) and after, with 95 % intervals. Bottom:
    per set, hybrid's recall@10 of each owner before and after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(sets)
    prev_sets = (previous or {}).get("sets") or {}
    fig = plt.figure(figsize=(4.2 * max(len(SHOWN), len(names)), 8.6))
    top, bottom = fig.subfigures(2, 1)
    axes = top.subplots(1, len(SHOWN), sharey=True)
    x = np.arange(len(names))
    for ax, method in zip(axes, SHOWN, strict=True):
        for i, (label, run) in enumerate((("before", prev_sets), ("after", sets))):
            vals, errs = [], [[], []]
            for n in names:
                m = (run.get(n) or {}).get("results", {}).get(method, {}).get("overall")
                vals.append(m[METRIC] if m else 0.0)
                errs[0].append(max(0.0, m[METRIC] - m[f"{METRIC}_ci"][0]) if m else 0.0)
                errs[1].append(max(0.0, m[f"{METRIC}_ci"][1] - m[METRIC]) if m else 0.0)
            ax.bar(x + (i - 0.5) * 0.38, vals, 0.38, yerr=errs, capsize=3, label=label,
                   color=("#b0b7c3", "#3b6fb6")[i])
        ax.set_title(method)
        ax.set_xticks(x, [n.replace("_", "\n", 1) for n in names], fontsize=8)
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("recall@10 (95 % interval)")
    axes[0].legend(loc="lower left")
    top.suptitle("dev battery: before (committed) / after")
    for ax, name in zip(np.atleast_1d(bottom.subplots(1, len(names), sharey=True)), names, strict=True):
        now = sets[name].get("owners", {}).get("hybrid", {})
        before = prev_sets.get(name, {}).get("owners", {}).get("hybrid", {})
        owners = list(now)
        ox = np.arange(len(owners))
        for i, run in enumerate((before, now)):
            ax.bar(ox + (i - 0.5) * 0.38, [run.get(o, {}).get(METRIC, np.nan) for o in owners], 0.38,
                   color=("#b0b7c3", "#3b6fb6")[i])
        ax.set_title(name, fontsize=9)
        ax.set_xticks(ox, [o.split(":")[-1][:12] for o in owners], rotation=60, ha="right", fontsize=7)
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    bottom.suptitle("hybrid recall@10 per owner: before (grey) / after (blue)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _commit() -> str:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", type=Path, help="folder of data sets (default ../shared/bench beside the repository, or "
                    "beside its main checkout from a worktree)")
    ap.add_argument("--sets", help="comma-separated set names (default: every set of --bench)")
    ap.add_argument("--embedding-cache", type=Path, default=CACHE, help="embedding cache folder")
    ap.add_argument("--out", type=Path, help="result file (default: bench/results/eval_dev.json for every set, "
                    "bench/out/eval_dev.json for some)")
    ap.add_argument("--previous", type=Path, help="reference result (default: the committed eval_dev.json)")
    ap.add_argument("--no-plot", action="store_true", help="do not write the before / after plot")
    ap.add_argument("--plot", type=Path, default=PLOT, help="where a run of every set draws its plot")
    ap.add_argument("--rankings", type=Path, default=RANKINGS, help="folder of the per-query rankings")
    args = ap.parse_args(argv)
    args.bench = args.bench or default_bench()
    if not set(RUN) <= set(METHODS):
        raise SystemExit(f"unknown methods in {RUN}")
    folders = dev_sets(args.bench) if args.bench.is_dir() else []
    if not args.bench.is_dir() or not folders:
        raise SystemExit(f"--bench {args.bench}: no folder with memories.jsonl and queries.jsonl")
    if args.sets:
        wanted = args.sets.split(",")
        missing = [w for w in wanted if w not in {f.name for f in folders}]
        if missing:
            raise SystemExit(f"--sets: no such set in {args.bench}: {missing}")
        folders = [f for f in folders if f.name in wanted]
    every = not args.sets or len(folders) == len(dev_sets(args.bench))
    out = args.out or (RESULT if every else PARTIAL)
    previous, source = previous_result(args.previous)
    ran = run_sets(folders, args.embedding_cache, args.rankings)
    model = ran.pop("_model")
    result = {"commit": _commit(), "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "model": model,
              "metric": METRIC, "bench": str(args.bench), "sets": ran}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nrecall@10 [95 % interval]; Δ against {source}"
          f" ({(previous or {}).get('commit', '-')})\n")
    print(table(ran, previous))
    misses = target_misses(ran)
    print("\ntargets (hybrid ≥ best channel − 0.005, context ≥ hybrid − 0.01): "
          + ("all met" if not misses else f"{len(misses)} missed"))
    for line in misses:
        print(f"  miss  {line}")
    print("\nhybrid recall@10 per owner against the previous run:")
    for line in owner_changes(ran, previous):
        print(f"  {line}")
    found = regressions(ran, previous)
    print(f"\nregressions beyond the previous 95 % interval: {len(found) or 'none'}")
    for line in found:
        print(f"  LOWER {line}")
    if every and not args.no_plot:
        plot(ran, previous, args.plot)
    print(f"\nwrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")
    return 1 if found else 0


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    raise SystemExit(main())
