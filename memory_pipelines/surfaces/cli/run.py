"""What `make run` shows around the pipeline run: embedding progress, counts, searches and contexts.

The pipeline itself is the Dagster code location's `demo_job` and `main_job`, launched through Dagster by
`memory_pipelines.operations.main_job.run_main_job` and read back from the shared Dagster instance.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from ...context.builder import build_memory_context
from ...index.vectors import count_pending
from ...operations.status import collect_status, format_status
from ...retrieval.search import search
from ...text.keywords import has_cjk
from ...vocabulary import CONTEXT_MODES, INDEXED_NAMES

SAMPLE_QUERIES = ("令牌过期导致 401", "auth error expired token")
CONTEXT_QUERY = "auth error after the token expired: 认证失败怎么排查?"


def _lang(text: str) -> str:
    return "zh" if has_cjk(text) else "en"


def print_search(rt, owner: str, query: str, limit: int = 8) -> None:
    """Print the top hybrid results for one query, each tagged with its language."""
    result = search(rt.pool, rt.embedder, owner, query, limit=limit)
    print(f"\nsearch [{owner}] {query!r} ({result.mode}{', ' + result.degraded if result.degraded else ''})")
    for h in result.hits:
        print(f"  {h.score:.3f}  {h.source:<10} [{_lang(h.title)}] {h.title[:90]}")


def print_contexts(rt, owner: str, query: str = CONTEXT_QUERY) -> None:
    """Print the context block of one query in every mode. The builds are shown, not logged: a re-run adds no
    row to the retrieval log the tuning reads (`memory-pipelines context` logs its build)."""
    for mode in CONTEXT_MODES:
        result = build_memory_context(rt.pool, rt.embedder, owner, query, mode=mode, log_build=False)
        print(
            f"\n=== context [{owner}] mode={mode}: {result.token_used}/{result.token_budget} tokens, "
            f"{len(result.items)} of {result.candidates_count} candidates (a sample, not logged)"
        )
        print(result.block)


def print_run_summary(summary: dict) -> None:
    """What the Dagster runs reported: assets, checks, rows; where the log is, and its tail on failure."""
    from ...operations.main_job import tail

    demo = summary.get("demo", {}).get("assets", {}).get("demo_corpus", {})
    if demo:
        print("demo corpus: " + ", ".join(f"{k.removeprefix('inserted_')} {v}" for k, v in demo.items())
              + " inserted")
    print(f"Dagster: {len(summary['assets'])} assets materialised, {len(summary['checks'])} checks "
          f"({len(summary['checks_failed'])} failed), {summary['embedded']} rows embedded, "
          f"{summary['failed']} failed, {summary['keyword_rows_indexed']} rows keyword-indexed")
    for name in summary["checks_failed"]:
        print(f"  failed check: {name}")
    sessions = summary.get("demo_sessions", {})
    log = sessions.get("assets", {}).get("demo_sessions", {})
    if log:
        gate = sessions.get("checks", {}).get("scoring_evaluation:publish_gate")
        verdict = {True: "passed", False: "refused (a WARN; see its reasons in the UI)", None: "not run"}[gate]
        print(f"demo sessions: {log.get('builds_with_implicit_feedback')} builds with implicit feedback, "
              f"{log.get('labelled_candidates')} labelled candidates, {log.get('used_implicit')} used "
              f"(share {log.get('used_share')}); tuning gate {verdict}")
    runs = ", ".join(f"{run['run_id'][:8]}" for run in (summary.get("demo", {}), summary, sessions)
                     if run.get("run_id"))
    print(f"  runs {runs or 'none recorded'} in the Dagster instance {summary['dagster_home']} (`make dagster`)")
    if not summary["success"]:
        print(f"the Dagster run failed (exit codes {summary['exit_codes']})", file=sys.stderr)
        if summary.get("log"):
            print(f"last lines of {summary['log']}:\n{tail(Path(summary['log']))}", file=sys.stderr)


def print_report(rt, owner: str) -> None:
    """What `make run` prints after the pipeline: counts, sample searches, a context in every mode."""
    print()
    print(format_status(collect_status(rt)))
    for query in SAMPLE_QUERIES:
        print_search(rt, owner, query)
    print_contexts(rt, owner)


class EmbeddingProgress:
    """A progress bar for embedding work done elsewhere (a Dagster run): polls the pending counts, and closes once
    every row has held its vector for `settled` polls (left open, it redrew 100 % for the rest of the run, which
    looked hung), saying the run goes on."""

    def __init__(self, rt, interval: float = 0.5, settled: int = 3) -> None:
        self.rt, self.interval, self.settled = rt, interval, settled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _counts(self) -> tuple[int, int]:
        with self.rt.pool.connection() as conn:
            pairs = [count_pending(conn, name, self.rt.embedder.model_name) for name in INDEXED_NAMES]
        pending, total = sum(p for p, _ in pairs), sum(t for _, t in pairs)
        return total - pending, total

    def _poll(self) -> None:
        from tqdm import tqdm

        with tqdm(desc=f"embedding ({self.rt.embedder.model_name})", unit="row", file=sys.stderr) as bar:
            def update() -> bool:
                done, total = self._counts()
                bar.total, bar.n = max(total, 1), done
                bar.refresh()
                return 0 < total == done

            complete = int(update())
            while complete < self.settled and not self._stop.wait(self.interval):
                complete = complete + 1 if update() else 0
        if complete >= self.settled and not self._stop.is_set():
            print("every row embedded; the run goes on (keyword index, checks, demo sessions, tuning)",
                  file=sys.stderr)

    def __enter__(self) -> EmbeddingProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
