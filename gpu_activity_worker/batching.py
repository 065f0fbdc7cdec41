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

A failed batch cannot say whose image failed (an :class:`~gpu_activity_worker.vocabulary.UnsupportedImageError` is
a verdict on one image), so when ``apply_batch`` raises, each caller of that batch runs its own image alone with
``apply``: every caller gets exactly what it would have got unbatched, and an error reaches only the callers whose
image causes it.

A frame slot's candidates share one GPU turn (one ``matte_slot`` activity), so their images come from one caller.
:class:`Lanes` runs their pipelines side by side on ``width`` threads (the micro-batch size): each batchable step's
batcher then finds them queued together and serves them in one ``apply_batch`` call, filled further by the other
slots on the GPU at that moment. A step that cannot batch serves one lane of a slot at a time
(:class:`OneLaneAtATime`), so within the turn the slot's candidates go through it one after another, as they would
unbatched, and a slot never has more of them on the GPU than its one turn allows; separate slots still use it at
once. (A batchable step after such a step then gets the slot's candidates as they come out of it: its batch fills
with the other slots' candidates, or runs after ``max_batch_wait_ms``.) With a width of 1 (batching off) the
candidates run one after another on the caller's own thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TypeGuard, TypeVar

from gpu_activity_worker.engines.base import BatchableStep, MatteState, MattingStep, StepContext
from gpu_activity_worker.vocabulary import MattingError

T = TypeVar("T")
R = TypeVar("R")

logger = logging.getLogger(__name__)


def is_batchable(step: MattingStep) -> TypeGuard[BatchableStep]:
    """Whether ``step`` implements ``apply_batch`` (the protocols are not runtime-checkable)."""
    return callable(getattr(step, "apply_batch", None))


def batched(step: MattingStep, context: StepContext) -> MattingStep:
    """``step`` as :class:`Lanes` use it when ``context.max_batch`` is above 1: behind a :class:`MicroBatcher` if it
    can batch, else serving one lane of a caller at a time (:class:`OneLaneAtATime`); ``step`` itself otherwise."""
    if context.max_batch <= 1:
        return step
    if is_batchable(step):
        return MicroBatcher(step, context.max_batch, context.max_batch_wait_ms)
    return OneLaneAtATime(step)


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


class _LaneGroup:
    """The lanes of one :meth:`Lanes.map` call."""

    def __init__(self) -> None:
        self.one_at_a_time = threading.Lock()
        """Held by the lane inside a step that cannot batch (:class:`OneLaneAtATime`)."""


_lanes = threading.local()
"""``group``: the :class:`_LaneGroup` whose lane this thread is running, if any."""


class OneLaneAtATime:
    """A step that cannot batch, serving the lanes of one :meth:`Lanes.map` call one at a time (thread-safe).

    Calls from different callers (other slots, threads outside any lanes) run at once, as on the bare step.

    Args:
        step: The step.
    """

    def __init__(self, step: MattingStep) -> None:
        self.step = step

    @property
    def device(self) -> str:
        """The wrapped step's device."""
        return self.step.device

    @property
    def precision(self) -> str:
        """The wrapped step's precision."""
        return self.step.precision

    def apply(self, state: MatteState) -> MatteState:
        """The wrapped step's ``apply(state)``, once no other lane of this thread's :meth:`Lanes.map` is inside it."""
        group: _LaneGroup | None = getattr(_lanes, "group", None)
        if group is None:
            return self.step.apply(state)
        with group.one_at_a_time:
            return self.step.apply(state)


class Lanes:
    """Runs one caller's items side by side: at most ``width`` at once, the caller's thread being one of them.

    The items' pipelines then meet in each batchable step's :class:`MicroBatcher`, and take turns in each step that
    cannot batch (:class:`OneLaneAtATime`).

    Args:
        width: Items run at once; the worker's micro-batch size, so one slot can fill a batch. 1 runs them one after
            another on the caller's thread.
        executor: The other ``width - 1`` threads of every caller that may run at once (e.g. ``capacity * (width -
            1)`` threads for a GPU of ``capacity`` slots); unused, and may be ``None``, when ``width`` is 1.

    Raises:
        ValueError: ``width`` is below 1, or above 1 with no executor.
    """

    def __init__(self, width: int = 1, executor: Executor | None = None) -> None:
        if width < 1:
            raise ValueError(f"lanes need a width of at least 1, got {width}")
        if width > 1 and executor is None:
            raise ValueError(f"{width} lanes need an executor for their other threads")
        self.width = width
        self._executor = executor

    def map(self, work: Callable[[T], R], items: Sequence[T]) -> list[R | Exception]:
        """``work(item)`` for every item, each item's result or the exception it raised, in the order of ``items``.

        Returns once every item is done. An exception that is not an ``Exception`` (e.g. ``KeyboardInterrupt``) is
        raised, after the other lanes have finished.
        """
        outcomes: dict[int, R | Exception] = {}
        queue = iter(range(len(items)))
        taking = threading.Lock()
        group = _LaneGroup()

        def lane() -> None:
            outside = getattr(_lanes, "group", None)
            _lanes.group = group
            try:
                while True:
                    with taking:
                        index = next(queue, None)
                    if index is None:
                        return
                    try:
                        outcomes[index] = work(items[index])
                    except Exception as err:
                        outcomes[index] = err
            finally:
                _lanes.group = outside

        others = min(self.width, len(items)) - 1
        helpers = [self._executor.submit(lane) for _ in range(others)] if self._executor is not None else []
        try:
            lane()
        finally:
            for helper in helpers:
                helper.result()
        return [outcomes[index] for index in range(len(items))]
