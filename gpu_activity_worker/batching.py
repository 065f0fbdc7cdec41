"""Micro-batching: concurrent activities' ``apply`` calls on one step served by one ``apply_batch`` call.

The GPU worker runs each matting activity in its own thread, so several threads call ``apply`` on the same step at
once. :class:`MicroBatcher` wraps a :class:`~gpu_activity_worker.engines.base.BatchableStep`: ``apply`` queues the
state and blocks; up to ``max_batch`` queued states go through the model in one ``apply_batch`` call, and each caller
gets its own result. On a GPU a batch of 4 costs little more than one image, so this raises throughput for the same
number of activity slots.

Leader-follower, not a dispatcher thread: the first caller that finds no batch running becomes the leader. It waits
until ``max_batch`` states are queued or ``max_batch_wait_ms`` have passed since the oldest arrived, runs the batch on
its own thread, hands out the results, and steps down; a caller still waiting then takes over. So the batcher starts
no thread (nothing to leak or shut down), inference runs on the activity threads that the worker's concurrency
already bounds, and the leader needs no thread hand-off for its own result. One batch runs at a time per step: callers
that arrive meanwhile queue up, which is what fills the next batch when the model is the bottleneck.

A failed batch cannot say whose image failed (an :class:`~gpu_activity_worker.engines.base.UnsupportedImageError` is
a verdict on one image), so when ``apply_batch`` raises, each caller of that batch runs its own image alone with
``apply``: every caller gets exactly what it would have got unbatched, and an error reaches only the callers whose
image causes it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

from gpu_activity_worker.engines.base import BatchableStep, MatteState, MattingError, MattingStep, StepContext

logger = logging.getLogger(__name__)


def is_batchable(step: MattingStep) -> TypeGuard[BatchableStep]:
    """Whether ``step`` implements ``apply_batch`` (the protocols are not runtime-checkable)."""
    return callable(getattr(step, "apply_batch", None))


def batched(step: MattingStep, context: StepContext) -> MattingStep:
    """``step`` behind a :class:`MicroBatcher` when ``context.max_batch`` is above 1 and it can batch, else ``step``."""
    if context.max_batch > 1 and is_batchable(step):
        return MicroBatcher(step, context.max_batch, context.max_batch_wait_ms)
    return step


@dataclass(eq=False)
class _Request:
    """One caller's state and, once its batch ran (``done``), its result or error; neither means run it alone."""

    state: MatteState
    arrived: float
    done: bool = False
    result: MatteState | None = None
    error: BaseException | None = None


class MicroBatcher:
    """A batchable step whose concurrent ``apply`` calls are served in batches. Thread-safe.

    Args:
        step: The step to batch; its ``apply_batch`` must equal ``apply`` per state.
        max_batch: Most states in one ``apply_batch`` call.
        max_batch_wait_ms: Longest a queued state waits for more to join its batch (while no batch is running).

    Raises:
        ValueError: ``max_batch`` is below 1 or ``max_batch_wait_ms`` is negative.
    """

    def __init__(self, step: BatchableStep, max_batch: int, max_batch_wait_ms: float) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        if max_batch_wait_ms < 0:
            raise ValueError(f"max_batch_wait_ms must not be negative, got {max_batch_wait_ms}")
        self.step = step
        self.max_batch = max_batch
        self._max_wait_s = max_batch_wait_ms / 1000
        self._changed = threading.Condition()
        self._queue: deque[_Request] = deque()
        self._leading = False

    @property
    def device(self) -> str:
        """The wrapped step's device."""
        return self.step.device

    @property
    def precision(self) -> str:
        """The wrapped step's precision."""
        return self.step.precision

    def apply(self, state: MatteState) -> MatteState:
        """The wrapped step's ``apply(state)``, computed in a batch with concurrent callers' states.

        Blocks until its batch has run; the batch starts at most ``max_batch_wait_ms`` after this call, or as soon as
        the batches ahead of it are done.

        Raises:
            Exception: Whatever the wrapped step raises for this state.
        """
        request = _Request(state, time.monotonic())
        with self._changed:
            self._queue.append(request)
            self._changed.notify_all()
        while (batch := self._next_batch(request)) is not None:
            self._run(batch)
        if request.error is not None:
            raise request.error
        if request.result is None:  # its batch failed: find out alone whether this image is the one at fault
            return self.step.apply(state)
        return request.result

    def _next_batch(self, request: _Request) -> list[_Request] | None:
        """``None`` once ``request`` is done; else a batch this caller must run, as the leader."""
        with self._changed:
            while self._leading and not request.done:
                self._changed.wait()
            if request.done:
                return None
            # Not done and no leader: the request is still queued, so the queue is not empty.
            self._leading = True
            deadline = self._queue[0].arrived + self._max_wait_s
            while len(self._queue) < self.max_batch and (remaining := deadline - time.monotonic()) > 0:
                self._changed.wait(remaining)
            return [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]

    def _run(self, batch: list[_Request]) -> None:
        """Run ``batch`` and hand out its outcomes; the next leader may take over even if this raises."""
        outcomes: Sequence[MatteState | BaseException | None]
        try:
            outcomes = self._outcomes(batch)
        except BaseException as err:  # e.g. KeyboardInterrupt in the leader: its followers must not wait forever
            outcomes = [err] * len(batch)
            raise
        finally:
            with self._changed:
                for request, outcome in zip(batch, outcomes, strict=True):
                    if isinstance(outcome, BaseException):
                        request.error = outcome
                    else:
                        request.result = outcome
                    request.done = True
                self._leading = False
                self._changed.notify_all()

    def _outcomes(self, batch: list[_Request]) -> list[MatteState | BaseException | None]:
        """Each request's result or error; ``None`` for each request of a failed batch of several (run it alone)."""
        try:
            results = self.step.apply_batch([request.state for request in batch])
        except Exception as err:
            if len(batch) == 1:
                return [err]
            logger.info("a batch of %d failed (%r): each image runs alone", len(batch), err)
            return [None] * len(batch)
        if len(results) != len(batch):
            error = MattingError(
                f"{type(self.step).__name__}.apply_batch returned {len(results)} results for {len(batch)} states"
            )
            return [error] * len(batch)
        return list(results)
