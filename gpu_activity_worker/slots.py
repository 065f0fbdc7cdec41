"""GPU slots: at most ``capacity`` frames on the GPU at once, and frames taken ahead while it is full.

A GPU worker that takes a new frame only when one finishes leaves its GPU idle for a round trip every frame: the
completion goes to the server, the next frame comes back on a poll, and is then read and decoded. So the worker also
takes up to ``prefetch`` frames more than its GPU runs, but only while every GPU slot is busy: those frames are read
and decoded, wait at the :class:`GpuGate`, and go on the GPU the moment a slot frees.

Frames taken ahead are not available to other GPU workers. Opening the extra polls only while the GPU is full keeps
that to ``prefetch`` frames per busy worker: a worker with a free GPU slot never holds a frame it cannot start.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator

from temporalio.worker import (
    CustomSlotSupplier,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
)


class FrameCancelledError(Exception):
    """The activity was cancelled while its frame waited for the GPU; the frame never ran."""


class GpuGate:
    """At most ``capacity`` frames on the GPU; the others wait in :meth:`slot`. Thread-safe."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._busy = 0
        self._condition = threading.Condition()
        self._listeners: list[Callable[[], None]] = []

    @property
    def full(self) -> bool:
        return self._busy >= self.capacity

    def on_full(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the thread that took the last slot) whenever the GPU becomes full."""
        self._listeners.append(listener)

    @contextlib.contextmanager
    def slot(self, cancelled: threading.Event) -> Iterator[None]:
        """Hold one GPU slot, waiting for it if the GPU is full.

        Raises:
            FrameCancelledError: ``cancelled`` was set (see :meth:`cancel`) before the frame got a slot.
        """
        with self._condition:
            while not cancelled.is_set() and self._busy >= self.capacity:
                self._condition.wait()
            if cancelled.is_set():
                raise FrameCancelledError("cancelled before its turn on the GPU")
            self._busy += 1
            became_full = self._busy == self.capacity
        if became_full:
            for listener in self._listeners:
                listener()
        try:
            yield
        finally:
            with self._condition:
                self._busy -= 1
                self._condition.notify()

    def cancel(self, cancelled: threading.Event) -> None:
        """Set ``cancelled`` and wake the waiters, so a frame still waiting with that event gives up its turn."""
        cancelled.set()
        with self._condition:
            self._condition.notify_all()


class PrefetchSlotSupplier(CustomSlotSupplier):
    """Temporal activity slots of a GPU worker: ``gate.capacity`` always, ``prefetch`` more while the GPU is full.

    The SDK reserves a slot before each poll, so this decides how many polls are open: one per GPU slot, plus one per
    prefetch slot once every GPU slot is busy. (A reservation the SDK drops just as it completes is never released;
    the SDK only drops reservations when the worker shuts down.)
    """

    def __init__(self, gate: GpuGate, prefetch: int) -> None:
        self._gate = gate
        self._prefetch = prefetch
        self._held = 0
        self._lock = threading.Lock()
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        gate.on_full(self._wake)

    @property
    def max_slots(self) -> int:
        return self._gate.capacity + self._prefetch

    def _take(self) -> SlotPermit | None:
        with self._lock:
            limit = self.max_slots if self._gate.full else self._gate.capacity
            if self._held >= limit:
                return None
            self._held += 1
            return SlotPermit()

    def _wake(self) -> None:
        """Wake the waiting reservations; callable from any thread (the SDK releases slots off the event loop)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._changed.set)

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        self._loop = asyncio.get_running_loop()
        while True:
            # Clear before checking: a release between the check and the wait then still wakes this loop.
            self._changed.clear()
            permit = self._take()
            if permit is not None:
                return permit
            await self._changed.wait()

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        return self._take()

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        pass

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        with self._lock:
            self._held -= 1
        self._wake()
