"""The work one action of a set has in flight, so that it can be stopped alone.

An action's start frames, takes (clip, frames, matting) and stabilisations run in the background; a reviewer's
regeneration or refinement of it runs in the message's own handler. Both are held here, per action, so dropping
the action stops exactly its work and nothing of the other actions'. Deterministic: tasks are kept in the order
they started (dicts, never sets), since the order in which they are cancelled is the order of the commands a set
records.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

from temporalio.exceptions import ActivityError, CancelledError

T = TypeVar("T")


class ActionWork:
    """The tasks of one action: background work and the message handlers working on it."""

    def __init__(self, action: str) -> None:
        self.action = action
        self._background: dict[asyncio.Task[None], None] = {}
        self._handlers: dict[asyncio.Task[Any], None] = {}
        self._stopping = False

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background as part of the action."""
        task = asyncio.create_task(work)
        self._background[task] = None
        task.add_done_callback(self._background.pop)

    @property
    def stopping(self) -> bool:
        """The action is dropped: its work is stopping or stopped, and nothing new of it starts."""
        return self._stopping

    def background(self) -> list[asyncio.Task[None]]:
        """The background tasks running now, in the order they started."""
        return list(self._background)

    async def run(self, work: Awaitable[T]) -> T:
        """Await a message's work on the action in the handler's own task (no task of its own: the same commands
        as awaiting it directly); if the action is dropped meanwhile, the message fails with the reason."""
        task = asyncio.current_task()
        assert task is not None  # called from a handler
        self._handlers[task] = None
        try:
            return await work
        except (asyncio.CancelledError, ActivityError) as err:
            # A cancelled activity call ends the work as an ActivityError caused by the cancellation.
            cancelled = isinstance(err, asyncio.CancelledError) or isinstance(err.cause, CancelledError)
            if self._stopping and cancelled:
                raise CancelledError(f"{self.action} was dropped from the set") from None
            raise
        finally:
            del self._handlers[task]

    async def stop(self) -> None:
        """Cancel everything the action has in flight (activities included) and wait until it has all ended."""
        self._stopping = True
        running = [*self._background, *self._handlers]
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError, ActivityError, CancelledError):
                await task
