"""The stdio transport. pygls reads stdin through a thread, one hop per
header line and per body: three thread round trips for every message. When
an editor opens 200 files at once, a hover queued behind them waited for all
those hops. Here the event loop reads the pipe itself, in large chunks, and
the messages already buffered are parsed without waiting on any thread."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import sys
from threading import Event
from typing import BinaryIO

from pygls.io_ import StdinAsyncReader, StdoutWriter, run_async

logger = logging.getLogger(__name__)


def loop_can_read(stdin: BinaryIO, stdout: BinaryIO) -> bool:
    """A pipe or socket the event loop may make non-blocking: not a file or a
    terminal, and not shared with stdout (whose writes must stay blocking)."""
    try:
        mode = os.fstat(stdin.fileno())
        out = os.fstat(stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    shared = (mode.st_dev, mode.st_ino) == (out.st_dev, out.st_ino)
    return (stat.S_ISFIFO(mode.st_mode) or stat.S_ISSOCK(mode.st_mode)) and not shared


class PipeReader:
    """pygls' AsyncReader interface over an asyncio stream on stdin."""

    def __init__(self, stdin: BinaryIO):
        self.stdin = stdin
        self.stream: asyncio.StreamReader | None = None

    async def _connected(self) -> asyncio.StreamReader:
        if self.stream is None:
            stream = asyncio.StreamReader(limit=1 << 20)
            await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), self.stdin)
            self.stream = stream
        return self.stream

    async def readline(self) -> bytes:
        return await (await self._connected()).readline()

    async def readexactly(self, n: int) -> bytes:
        try:
            return await (await self._connected()).readexactly(n)
        except asyncio.IncompleteReadError as error:  # the client went away mid-message
            return error.partial


def start_io(server, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
    """pygls' start_io, with stdin read by the loop where it can be."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    reader: PipeReader | StdinAsyncReader
    if loop_can_read(stdin, stdout):
        reader = PipeReader(stdin)
    else:
        reader = StdinAsyncReader(stdin, server.thread_pool)
    server._stop_event = Event()
    server.protocol.set_writer(StdoutWriter(stdout))
    try:
        asyncio.run(
            run_async(
                stop_event=server._stop_event,
                reader=reader,
                protocol=server.protocol,
                logger=logger,
                error_handler=server.report_server_error,
            )
        )
    except BrokenPipeError:
        logger.error("the client closed the connection; shutting down")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
