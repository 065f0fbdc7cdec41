"""Run a Temporal worker until SIGTERM / SIGINT, then shut it down gracefully."""

from __future__ import annotations

import asyncio
import logging
import signal

from temporalio.worker import Worker

log = logging.getLogger(__name__)


async def serve_until_signalled(worker: Worker) -> None:
    """Run ``worker``; on SIGTERM or SIGINT stop polling, let running activities finish (up to the worker's
    graceful shutdown timeout) and return."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with worker:
            log.info("worker started", extra={"task_queue": worker.task_queue})
            await stop.wait()
            log.info("shutting down", extra={"task_queue": worker.task_queue})
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    log.info("worker stopped", extra={"task_queue": worker.task_queue})
