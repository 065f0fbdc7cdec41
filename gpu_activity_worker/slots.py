"""GPU slots: at most ``capacity`` frames on the GPU at once, and frames taken ahead while it is full.

A GPU worker that takes a new frame only when one finishes leaves its GPU idle for a round trip every frame: the
completion goes to the server, the next frame comes back on a poll, and is then read and decoded. So the worker also
takes up to ``prefetch`` frames more than its GPU runs, but only while every GPU slot is busy: those frames are read
and decoded, wait at the :class:`GpuGate`, and go on the GPU the moment a slot frees. Frames that have left the GPU
(being stored, scored and reported) no longer count against the GPU's share either, so slow storage does not starve
the GPU.

Frames taken ahead are not available to other GPU workers. Opening the extra polls only while the GPU is full keeps
that to ``prefetch`` frames per busy worker: a worker with a free GPU slot holds no frame it cannot start at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

from temporalio.worker import (
    CustomSlotSupplier,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
)

log = logging.getLogger(__name__)


class FrameCancelledError(Exception):
    """The frame's activity was cancelled (or its worker is stopping) before the frame's turn on the GPU."""


class GpuGate:
    """At most ``capacity`` frames on the GPU; the others wait in :meth:`slot`. Thread-safe.

    It also counts the frames that have left the GPU and are still finishing (until :meth:`reported`).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a GPU runs at least one frame at once, not {capacity}")
        self.capacity = capacity
        self._busy = 0
        self._waiting = 0
        self._finishing = 0
        self._changed_at = 0.0
        self._busy_total = 0.0
        self._held_total = 0.0
        self._condition = threading.Condition()
        self._listeners: list[Callable[[], None]] = []

    @property
    def full(self) -> bool:
        return self._busy >= self.capacity

    @property
    def waiting(self) -> int:
        """Frames waiting for a GPU slot."""
        return self._waiting

    @property
    def finishing(self) -> int:
        """Frames that have left the GPU and are not yet :meth:`reported`."""
        return self._finishing

    def busy_seconds(self) -> float:
        """Seconds during which at least one frame has held a GPU slot, since the gate was made: the GPU's busy time
        (frames waiting for a slot, or being read, stored or reported, do not count)."""
        with self._condition:
            self._tally()
            return self._busy_total

    def held_seconds(self) -> float:
        """Slot-seconds held on the GPU since the gate was made: each frame's time holding a slot, summed (two frames
        on the GPU for 1 s count 2 s), so ``held_seconds() / capacity`` over a span is the share of the GPU's
        capacity in use. Frames waiting for a slot, or being read, stored or reported, do not count."""
        with self._condition:
            self._tally()
            return self._held_total

    def _tally(self) -> None:
        """Add the time since the busy count last changed to the totals; called holding the condition's lock."""
        now = time.perf_counter()
        if self._busy:
            self._busy_total += now - self._changed_at
            self._held_total += self._busy * (now - self._changed_at)
        self._changed_at = now

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the changing thread) when the GPU becomes full or a frame leaves it."""
        self._listeners.append(listener)

    @contextlib.contextmanager
    def slot(self, cancelled: threading.Event) -> Iterator[None]:
        """Hold one GPU slot, waiting for it if the GPU is full. Leaving it makes the frame one that is finishing.

        Raises:
            FrameCancelledError: ``cancelled`` was set (see :meth:`cancel`) before the frame got a slot.
        """
        with self._condition:
            self._waiting += 1
            try:
                while not cancelled.is_set() and self._busy >= self.capacity:
                    self._condition.wait()
            finally:
                self._waiting -= 1
            if cancelled.is_set():
                # This frame may have been woken for a free slot: pass the turn on.
                self._condition.notify()
                raise FrameCancelledError("cancelled before its turn on the GPU")
            self._tally()
            self._busy += 1
            became_full = self._busy == self.capacity
        try:
            if became_full:
                self._notify()
            yield
        finally:
            with self._condition:
                self._tally()
                self._busy -= 1
                self._finishing += 1
                self._condition.notify()
            self._notify()

    def reported(self) -> None:
        """A frame that left the GPU is stored and reported (or abandoned): it no longer counts as finishing."""
        with self._condition:
            self._finishing -= 1

    def cancel(self, cancelled: threading.Event) -> None:
        """Set ``cancelled`` and wake the waiters, so a frame still waiting with that event gives up its turn."""
        cancelled.set()
        with self._condition:
            self._condition.notify_all()

    def _notify(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("GPU gate listener failed")


class PrefetchSlotSupplier(CustomSlotSupplier):
    """Temporal activity slots of a GPU worker, so that its GPU always has a frame ready and holds few more.

    The SDK reserves a slot before each poll, so this decides how many polls are open. Frames that have not yet left
    the GPU (being read, waiting, or on it) may number ``gate.capacity``, plus ``prefetch`` while every GPU slot is
    busy; frames that left the GPU and are still finishing come on top, up to ``gate.capacity`` of them.
    (A reservation the SDK drops just as it completes is never released; the SDK only drops reservations when the
    worker shuts down.)
    """

    def __init__(self, gate: GpuGate, prefetch: int) -> None:
        if prefetch < 0:
            raise ValueError(f"prefetch must be 0 or more, not {prefetch}")
        self._gate = gate
        self._prefetch = prefetch
        self._held = 0
        self._lock = threading.Lock()
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        gate.on_change(self._wake)

    @property
    def max_slots(self) -> int:
        """The most slots ever held: one thread each."""
        return 2 * self._gate.capacity + self._prefetch

    def _take(self) -> SlotPermit | None:
        with self._lock:
            gate = self._gate
            finishing = min(max(gate.finishing, 0), gate.capacity)
            limit = gate.capacity + finishing + (self._prefetch if gate.full else 0)
            if self._held >= limit:
                return None
            self._held += 1
            return SlotPermit()

    def _wake(self) -> None:
        """Wake the waiting reservations; callable from any thread (the SDK releases slots off the event loop)."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing waits any more
                loop.call_soon_threadsafe(self._changed.set)

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        self._loop = asyncio.get_running_loop()
        while True:
            # Clear before checking: a change between the check and the wait then still wakes this loop.
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
