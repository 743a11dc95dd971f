"""The MCP server over stdio, reading stdin itself: the SDK's reader parses each line keeping the last value of a
member named twice, and drops a line it cannot read without an answer, so those lines are answered here with the
errors streamable HTTP answers (`json_body.repeated_member_answer`, `unreadable_answer`) and not passed on. Every
other line reaches the SDK as it came.

As the SDK's own reader does, it reads a private duplicate of fd 0 and points fd 0 at the null device while it
serves (restored after), so handlers and children read EOF; the SDK still claims stdout (fd 1) and writes every
answer, these included, one line at a time.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import contextmanager, suppress
from io import TextIOWrapper
from typing import Any, BinaryIO

import anyio
import mcp_types as types
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from .json_body import repeated_member_answer, unreadable_answer


class _Unowned(TextIOWrapper):
    """A text layer that never closes the buffer under it (it may be sys.stdin's own)."""

    def close(self) -> None:
        with suppress(ValueError):
            self.detach()


@contextmanager
def _stdin_wire() -> Any:
    """The binary stream of the wire: a private duplicate of fd 0, fd 0 diverted to the null device until exit;
    sys.stdin's buffer in place where fd 0 cannot be duplicated or diverted (or stdin is not fd 0)."""
    private: int | None = None
    if sys.platform != "win32" and _backed_by_fd0():
        import fcntl

        try:
            private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
            null = os.open(os.devnull, os.O_RDONLY)
            try:
                os.dup2(null, 0)
            finally:
                os.close(null)
        except OSError:
            if private is not None:
                os.dup2(private, 0)
            private = None
    try:
        # closefd=False: a worker thread may still block on it after exit; it must not be recycled under it
        yield os.fdopen(private, "rb", closefd=False) if private is not None else sys.stdin.buffer
    finally:
        if private is not None:
            with suppress(OSError):
                os.dup2(private, 0)


def _backed_by_fd0() -> bool:
    try:
        return sys.stdin.buffer.fileno() == 0
    except (AttributeError, OSError, ValueError):
        return False


class _Lines:
    """The stdin lines the SDK reads (`async for`), less those naming a member twice: each of those is answered
    on the session's write stream, once the server has it (`answer_on`)."""

    def __init__(self, wire: BinaryIO) -> None:
        self.file = anyio.wrap_file(_Unowned(wire, encoding="utf-8", errors="replace"))  # as the SDK decodes
        self.ready = anyio.Event()
        self.send: Callable[[SessionMessage], Any] | None = None

    def answer_on(self, write_stream: Any) -> None:
        self.send = write_stream.send
        self.ready.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self.file:
            answer = repeated_member_answer(line) or unreadable_answer(line)
            if answer is None:
                yield line
                continue
            await self.ready.wait()
            assert self.send is not None
            await self.send(SessionMessage(types.JSONRPCError.model_validate(answer)))


async def serve_stdio(server: MCPServer) -> None:
    """Serve `server` over stdin and stdout until stdin closes (MCPServer.run_stdio_async, with `_Lines`)."""
    lowlevel = server._lowlevel_server  # what run_stdio_async serves
    with _stdin_wire() as wire:
        lines = _Lines(wire)
        async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            lines.answer_on(write_stream)
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
