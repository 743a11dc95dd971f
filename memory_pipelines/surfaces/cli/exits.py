"""How a command leaves when it is stopped while a thread of it still waits (on a remote call, most often): the
interpreter's exit joins such threads before its exit handlers run, so the process neither ended nor left the
embedded database until the call gave up (minutes, on a provider that hangs)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from types import FrameType

from ...infra.embedded import leave_early

_PACKAGE_DIR = str(Path(__file__).resolve().parents[2]) + os.sep


def threads_still_running() -> bool:
    """Whether a thread the interpreter's exit would wait for is still at work (besides this one): a frame of this
    package on its stack. The search and context pools' idle threads wait in the standard library only, and end
    at the exit at once (counting them, every stop after a search said a request still waited)."""
    me = threading.current_thread()
    frames = sys._current_frames()
    return any(
        t.is_alive() and not t.daemon and t is not me and _in_package(frames.get(t.ident))
        for t in threading.enumerate()
    )


def _in_package(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith(_PACKAGE_DIR):
            return True
        frame = frame.f_back
    return False


def end_now_if_stuck(code: int) -> None:
    """For a stopped command: when a thread of it still works, leave the embedded database and end the process
    now with `code`. What it committed is kept; the call it waited on was never acknowledged."""
    if threads_still_running():
        leave_early("a thread still waits (on a remote call): the command ends without it")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
