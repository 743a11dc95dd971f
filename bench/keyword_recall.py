"""Keyword-channel recall at scale: the BM25 top k the channel returns against exact BM25, on the kept
context-latency database (one owner: tasks, learnings and conversational memories).

The channel reads each query term's `per_term` highest-impact postings (index order) and ranks what it read,
so a document whose score comes from several common terms, none of them among its top postings, is missed.
Exact BM25 sums every posting of every term (seconds at 1M documents). For each source and the bench's
queries (short ones, and as many of the long dialogues text/focus.py weights), recall@10 and @60 against the exact
ranking, counting a document whose exact score ties the exact k-th as found (these corpora give many
documents the same score), and the channel's milliseconds, at the channel's own `per_term` and at others
(the trade-off curve, plotted to `bench/results/keyword_recall.png`). The exact ranking comes from the
channel's own query with every posting read. Prints one JSON object on its last line
and writes it to bench/results/keyword_recall_<size>.json (`--out`).

    python bench/context_latency.py --sizes 1000000 --keep cl    # loads the database once (if not kept)
    python bench/keyword_recall.py --size 1000000 --keep cl [--queries 10] [--per-term 120 240 480 960]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from _common import add_out_argument, emit, loaded_facts, log, machine, out_path, pyplot, save_plot, scratch, size_label
from context_latency import make_queries

from memory_pipelines.infra.db import get_pool
from memory_pipelines.infra.embedded import exit_on_termination
from memory_pipelines.retrieval import keyword as s
from memory_pipelines.text.focus import focus

K = 60  # the channel's depth in a context build (hybrid search at limit 20)
DEEP = 3000  # the exact ranking's length: enough to score every document the channel returns
SOURCES = ("task", "learning", "memory")


def _params(source: str, qterms: dict[str, float], per_term: int, k: int) -> tuple[list[str], dict]:
    """The clauses and parameters `_keyword_source` builds, with `per_term` set."""
    params = {
        "terms": list(qterms), "weights": list(qterms.values()), "k": k, "k1": s.BM25_K1, "b": s.BM25_B,
        "per_term": per_term,
        "over": (s.KEYWORD_OVERFETCH_FRAGMENTS if s.SOURCES[source].chunked else s.KEYWORD_OVERFETCH) * k,
    }
    clauses = s.where_clauses(source, "owner", s.SearchFilters(sources=(source,)), params)
    params["ksource"] = s.SOURCES[source].indexed_as
    return clauses, params


def _ranked(conn, source: str, qterms: dict[str, float], per_term: int | None) -> tuple[list, float]:
    """(hits, ms): the channel's ranking with `per_term` postings a term, or exact BM25 (None)."""
    if per_term is None:
        clauses, params = _params(source, qterms, 0, DEEP)
        doc = s._EXACT_DOC
    else:
        clauses, params = _params(source, qterms, per_term, K)
        doc = s._PRUNED_DOC + " ORDER BY bm25 DESC, item_id LIMIT %(over)s"
    t = time.perf_counter()
    with conn.transaction():
        hits, _ = s._keyword_query(conn, source, clauses, params, doc)
    return hits, (time.perf_counter() - t) * 1000


def _recall(got: list, exact: list, k: int) -> float:
    """Share of the exact top k found, a document tying the exact k-th counted as found."""
    top = exact[:k]
    if not top:
        return 1.0
    score = {h.id: h.keyword for h in exact}
    kth = top[-1].keyword
    return min(1.0, sum(score.get(h.id, 0.0) >= kth - 1e-9 for h in got[:k]) / len(top))


def measure(conn, queries: list[str], per_terms: list[int]) -> dict:
    out: dict = {}
    for kind in ("short", "long"):
        chosen = [q for q in queries if focus(q).long == (kind == "long")]
        for source in SOURCES:
            rows: dict = {p: {"r10": [], "r60": [], "ms": []} for p in per_terms}
            exact_ms = []
            for q in chosen:
                qterms = s.query_terms(q)
                exact, ms = _ranked(conn, source, qterms, None)
                exact_ms.append(ms)
                for p in per_terms:
                    _ranked(conn, source, qterms, p)  # warm: the timed run reads cached pages, as a server does
                    got, ms = _ranked(conn, source, qterms, p)
                    rows[p]["r10"].append(_recall(got, exact, 10))
                    rows[p]["r60"].append(_recall(got, exact, K))
                    rows[p]["ms"].append(ms)
            out.setdefault(kind, {})[source] = {
                "queries": len(chosen),
                "exact_p50_ms": round(statistics.median(exact_ms), 1),
                "per_term": {
                    str(p): {
                        "recall_at_10": round(statistics.fmean(r["r10"]), 3),
                        "recall_at_60": round(statistics.fmean(r["r60"]), 3),
                        "p50_ms": round(statistics.median(r["ms"]), 2),
                    }
                    for p, r in rows.items()
                },
            }
            log(f"[{kind} {source}] " + ", ".join(
                f"{p}: r@10 {v['recall_at_10']} {v['p50_ms']} ms" for p, v in out[kind][source]["per_term"].items()))
    return out


def plot(result: dict, path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for kind, marker in (("short", "o-"), ("long", "s--")):
        for source, by in result["sources"][kind].items():
            pts = sorted((int(p), v) for p, v in by["per_term"].items())
            ax.plot([v["p50_ms"] for _, v in pts], [v["recall_at_10"] for _, v in pts], marker,
                    label=f"{source}, {kind} queries")
            for p, v in pts:
                ax.annotate(str(p), (v["p50_ms"], v["recall_at_10"]), fontsize=6)
    ax.set_xlabel("keyword query p50 (ms), one source")
    ax.set_ylabel("recall@10 against exact BM25 (ties counted)")
    ax.set_title(f"keyword channel at {result['size']:,} rows: postings read per term (labels)")
    ax.set_ylim(0, 1.02)
    save_plot(fig, ax, path)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="the context-latency database's size")
    parser.add_argument("--keep", default="cl", help="its --keep name (bench/context_latency.py)")
    parser.add_argument("--queries", type=int, default=10, help="of each kind, short and long (exact BM25: seconds)")
    parser.add_argument("--per-term", type=int, nargs="+", default=None, help="postings read per term")
    add_out_argument(parser)
    args = parser.parse_args()
    own = max(s.KEYWORD_POSTINGS_PER_TERM, 4 * K)
    per_terms = sorted(set(args.per_term or [own // 2, own, own * 2, own * 4]) | {own})
    with scratch(keep=f"{args.keep}_{args.size}") as url:
        facts = loaded_facts(url, "context_latency")
        if facts is None:
            sys.exit(f"no loaded database {args.keep}_{args.size}: run bench/context_latency.py --sizes "
                     f"{args.size} --keep {args.keep} first")
        pool = [q for q, _ in make_queries(random.Random(6), 20 * args.queries)]  # one in ten is long
        queries = [q for q in pool if not focus(q).long][: args.queries] + [q for q in pool if focus(q).long][
            : args.queries
        ]
        with get_pool(url).connection() as conn:
            result = {
                "benchmark": "keyword_recall",
                "size": args.size,
                "rows": facts["rows"],
                "k": K,
                "channel_per_term": own,
                "sources": measure(conn, queries, per_terms),
                "machine": machine(),
            }
    path = Path(__file__).parent / "results" / "keyword_recall.png"
    result["plot"] = str(path.relative_to(Path(__file__).parent.parent)) if plot(result, path) else None
    emit(result, out_path(args.out, f"keyword_recall_{size_label(args.size)}"))


if __name__ == "__main__":
    exit_on_termination()  # SIGTERM leaves the embedded server as Ctrl-C does
    main()
