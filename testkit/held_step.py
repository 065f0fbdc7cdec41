"""A stand-in GPU step that holds each image until the test lets it go: what is on the GPU, and when, is the test's."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpu_activity_worker.engines.base import MatteState


def opaque(state: MatteState) -> MatteState:
    """An alpha of ones: the default cut-out of :class:`HeldStep`."""
    return MatteState(image=state.image, alpha=np.ones(state.image.shape[:2], dtype=np.float32))


@dataclass
class HeldStep:
    """Runs each image until ``release`` is released once for it, recording which ran (by their red value), how many
    ran at once and the most that did; then returns ``finish(state)``."""

    finish: Callable[[MatteState], MatteState] = opaque
    device: str = "cpu"
    precision: str = "fp32"
    entered: list[int] = field(default_factory=list)
    running: int = 0
    peak: int = 0
    release: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, state: MatteState) -> MatteState:
        with self.lock:
            self.entered.append(round(float(state.image[0, 0, 0]) * 255))
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            assert self.release.acquire(timeout=30), "the test never let this image go"
        finally:
            with self.lock:
                self.running -= 1
        return self.finish(state)
