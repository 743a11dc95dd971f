"""The server's background embedder: memories stored with `wait=false` are embedded and judged here.

An ingest that does not wait is stored at once (keyword-searchable, action DEFERRED) and wakes this worker,
which runs `finish_deferred`: embed the pending fragments, then the duplicate check and arbitration a live
ingest runs. One thread per server, at a lower CPU priority (`infra.priority`): on a busy machine context
builds and searches take the cores first, and the queue drains in the gaps. Several servers may run one each;
`finish_deferred` claims its rows, so none is embedded or judged twice. Rows another process writes (the CLI, an
import, a sync, a script) notify no one here, so the thread also sweeps every few seconds while idle.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ...index.vectors import embed_pending_items
from ...infra.priority import BACKGROUND_NICE, set_thread_nice
from .deferred import finish_deferred

log = logging.getLogger(__name__)

RETRY_SECONDS = 30.0
"""After a pass that left memories pending (provider down) or failed (database away), the next one."""
SWEEP_SECONDS = 5.0
"""While idle, a pass this often (one that finds nothing took about 10 ms on the demo store)."""


STILL_RUNNING = "the embedding worker's batch still runs (what it has not stored stays pending for the next process)"
"""Why a process leaves the embedded database before its exit when the worker's `stop` timed out."""

class EmbedWorker:
    """A daemon thread that drains the deferred memories whenever `notify` is called, and every `sweep_seconds`
    from `start` (or the first `notify`) on."""

    def __init__(self, memory: Any, *, nice: int = BACKGROUND_NICE, retry_seconds: float = RETRY_SECONDS,
                 sweep_seconds: float = SWEEP_SECONDS) -> None:
        """`memory`: a `Memory` (or anything with its `pool`, `embedder`, `llm` and `settings`), read at each pass."""
        self.memory = memory
        self.nice = nice
        self.retry_seconds = retry_seconds
        self.sweep_seconds = sweep_seconds
        self.passes = 0
        self.last: dict[str, Any] | None = None  # the last pass's summary (counts, seconds)
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def start(self) -> None:
        """Start the thread, if it is not running: from now on it sweeps even when nothing notifies it."""
        with self._start_lock:
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="embed-worker", daemon=True)
                self._thread.start()

    def notify(self) -> None:
        """Something was queued: run a pass soon (passes coalesce; one runs at a time)."""
        self.start()
        with self._idle:
            self._busy = True
        self._wake.set()

    def wait_idle(self, timeout: float) -> bool:
        """Block until no pass is due or running (True), or `timeout` seconds passed (False)."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._busy, timeout)

    def stop(self, timeout: float | None = None) -> bool:
        """Finish the running pass (if any) and end the thread; False when the pass still runs after `timeout`
        seconds (default: the settings' `stop_wait`; a provider that hangs: the caller leaves the database
        without it, see `embedded.leave_early`)."""
        self._stopping = True
        self._wake.set()
        if timeout is None:
            timeout = self.memory.settings.stop_wait
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def _stop_requested(self) -> bool:
        return self._stopping

    def _run(self) -> None:
        set_thread_nice(self.nice)
        timeout = self.sweep_seconds  # idle until notified or the sweep is due; after a pass that left work, retry
        while True:
            self._wake.wait(timeout)
            if self._stopping:
                break
            self._wake.clear()
            left = self._pass()
            with self._idle:
                if not self._wake.is_set():
                    self._busy = False
                    self._idle.notify_all()
            timeout = self.retry_seconds if left else self.sweep_seconds

    def _pass(self) -> bool:
        """One `finish_deferred`; True when memories are left pending."""
        started = time.perf_counter()
        try:
            m = self.memory
            # asked between batches: a shutdown waits for one batch, not the whole pass (minutes for an import)
            out = finish_deferred(m.pool, m.embedder, m.llm, live=True, stop=self._stop_requested)
            # then the tasks, learnings, ... written through Memory.write*
            items = embed_pending_items(m.pool, m.embedder, stop=self._stop_requested)
        except Exception:  # the database restarting, the provider failing: retried later, nothing lost
            log.exception("background embedding failed; retried in %.0f s", self.retry_seconds)
            return True
        self.passes += 1
        self.last = {
            "embedded_fragments": out["embedded_fragments"],
            "arbitrated": out["arbitrated"],
            "still_pending": out["still_pending"],
            "embedded_items": items["embedded"],
            "seconds": round(time.perf_counter() - started, 3),
        }
        if any(self.last[k] for k in ("embedded_fragments", "arbitrated", "still_pending", "embedded_items")):
            log.info("background embedding: %s", self.last)
        return bool(out["still_pending"] or out["failed_fragments"] or items["pending"])
