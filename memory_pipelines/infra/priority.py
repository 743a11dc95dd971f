"""CPU priority of one thread: background work (embedding queued memories) yields the cores to requests.

Linux keeps a nice value per thread, and a thread starts with its creator's; elsewhere `setpriority` would
apply to the whole process, so these do nothing there. An unprivileged thread can raise its nice value but
never lower it again: a thread that lowers its priority keeps it (use a dedicated thread).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

BACKGROUND_NICE = 10
"""Added to the nice value of background threads. CFS gives a nice-10 thread about a tenth of the CPU of a
nice-0 one when both want it, and all of it when nothing else runs."""

_PER_THREAD = sys.platform.startswith("linux") and hasattr(os, "setpriority")


def thread_nice() -> int:
    """The calling thread's nice value (0 where priorities are not per thread)."""
    if not _PER_THREAD:
        return 0
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except OSError:
        return 0


def set_thread_nice(nice: int) -> None:
    """Raise the calling thread's nice value to `nice` (never lowers it; a no-op where not per thread)."""
    if not _PER_THREAD or nice <= thread_nice():
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(nice, 19))
