"""The ``sleep`` stand-in GPU engine of the benchmarks: a matting step whose time on the GPU is a fixed latency.

Kept apart from the benchmarks that use it, so a worker process running it (the load benchmark's GPU worker, the
RunPod benchmark's endpoint workers) imports nothing else of them.
"""

from __future__ import annotations

import time

import numpy as np

from gpu_activity_worker.engines import StepRegistry, StepSpec, builtin_steps
from gpu_activity_worker.engines.base import MatteState, StepContext, StepRole


class SleepStep:
    """A stand-in GPU engine: a plain threshold alpha (a few microseconds), then ``latency`` seconds of sleep per
    candidate, so that its time on the GPU is the latency and nothing else."""

    device, precision = "cpu", "fp32"

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s

    def apply(self, state: MatteState) -> MatteState:
        distance = np.abs(state.image - state.image[0, 0])
        alpha = (distance[..., 0] + distance[..., 1] + distance[..., 2] > 0.1).astype(np.float32)
        time.sleep(self.latency_s)
        return MatteState(image=state.image, alpha=alpha)


def _create_sleep_step(variant: str | None, context: StepContext) -> SleepStep:
    return SleepStep(int(variant or "500") / 1000)


def sleep_steps() -> StepRegistry:
    """The built-in steps and ``sleep:<latency ms>``, the stand-in GPU engine."""
    steps = builtin_steps()
    steps.register(StepSpec("sleep", StepRole.COARSE, _create_sleep_step, variants=None, summary="benchmark stand-in"))
    return steps
