"""Every running activity heartbeats on its own, so a worker lost mid-activity is noticed within seconds.

Temporal notices a lost worker only through a missed heartbeat: an activity that never heartbeats is retried when its
start-to-close timeout runs out (minutes). :class:`KeepBeating` is a worker interceptor that sends a heartbeat every
:data:`~workflows.contract.HEARTBEAT_INTERVAL` while an activity runs, repeating the details the activity last gave
(a provider's task id, a RunPod job map), so a beat of its own never erases them. It beats from the event loop: an
activity that blocked the loop would miss its beats and be retried elsewhere, which is why blocking work runs in
threads. Workers also set their heartbeat throttle to the same interval, so every beat reaches the server.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from workflows.contract import HEARTBEAT_INTERVAL


class KeepBeating(Interceptor):
    """Heartbeat every running activity of a worker every ``interval_s`` seconds, with its latest details."""

    def __init__(self, interval_s: float = HEARTBEAT_INTERVAL.total_seconds()) -> None:
        self.interval_s = interval_s

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _BeatingActivity(next, self.interval_s)


class _LatestDetails(ActivityOutboundInterceptor):
    """Remembers the details of the activity's own last heartbeat."""

    details: tuple[Any, ...] = ()

    def heartbeat(self, *details: Any) -> None:
        self.details = details
        super().heartbeat(*details)

    def beat_again(self) -> None:
        super().heartbeat(*self.details)


class _BeatingActivity(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, interval_s: float) -> None:
        super().__init__(next)
        self._interval_s = interval_s
        self._outbound: _LatestDetails | None = None

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        self._outbound = _LatestDetails(outbound)
        super().init(self._outbound)

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        beating = asyncio.create_task(self._beat())
        try:
            return await super().execute_activity(input)
        finally:
            beating.cancel()

    async def _beat(self) -> None:
        assert self._outbound is not None  # init runs before execute_activity
        while True:
            await asyncio.sleep(self._interval_s)
            self._outbound.beat_again()
