"""Run a Temporal worker (or a process's workers together) until SIGTERM / SIGINT, then shut it down gracefully."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Served(AbstractAsyncContextManager[Any], Protocol):
    """A Temporal worker, or several run as one (``activities.worker.OrchestrationWorkers``): it polls inside
    ``async with`` and stops gracefully on leaving it."""

    @property
    def task_queue(self) -> str: ...


async def serve_until_signalled(worker: Served, started: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
    """Run ``worker``; on SIGTERM or SIGINT stop polling, let running activities finish (up to the worker's
    graceful shutdown timeout) and return. ``started`` runs beside the worker once it polls (e.g. to make its build
    current); it is cancelled at the stop if it has not finished."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with worker:
            log.info("worker started", extra={"task_queue": worker.task_queue})
            hook = asyncio.create_task(started()) if started is not None else None
            await stop.wait()
            if hook is not None:
                hook.cancel()
            log.info("shutting down", extra={"task_queue": worker.task_queue})
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    log.info("worker stopped", extra={"task_queue": worker.task_queue})
