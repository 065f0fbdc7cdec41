"""``python -m benchmarks.load_gpu_worker``: the GPU worker of ``python -m gpu_activity_worker``, with the ``sleep``
stand-in engine registered beside the built-in steps, for the load benchmark (benchmarks/load.py).

It is the real worker's own ``main`` (:func:`gpu_activity_worker.worker.main`: its settings from the same ``POPCON_*``
variables, its connection, logging, slots, threads, store, scoring, encoding and shutdown), given the steps with the
stand-in registered; only the engine is a stand-in: ``sleep:<ms>`` thresholds the alpha (microseconds) and sleeps
that long per candidate, as the ``sleep`` step of benchmarks/dispatch.py does. It is
declared again here so that this process does not import benchmarks/dispatch.py, which imports the orchestration
worker (about 20 MB more resident memory than the GPU worker itself, which would skew its peak RSS).
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from gpu_activity_worker import worker as gpu_worker
from gpu_activity_worker.engines import StepRegistry, StepSpec, builtin_steps
from gpu_activity_worker.engines.base import MatteState, StepContext, StepRole


class SleepStep:
    """The stand-in GPU engine: a plain threshold alpha, then ``latency_s`` of sleep (none at ``sleep:0``)."""

    device, precision = "cpu", "fp32"

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s

    def apply(self, state: MatteState) -> MatteState:
        distance = np.abs(state.image - state.image[0, 0])
        alpha = (distance[..., 0] + distance[..., 1] + distance[..., 2] > 0.1).astype(np.float32)
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        return MatteState(image=state.image, alpha=alpha)


def _create_sleep_step(variant: str | None, context: StepContext) -> SleepStep:
    return SleepStep(int(variant or "0") / 1000)


def load_steps() -> StepRegistry:
    """The built-in steps and ``sleep:<latency ms>``."""
    steps = builtin_steps()
    steps.register(StepSpec("sleep", StepRole.COARSE, _create_sleep_step, variants=None, summary="benchmark stand-in"))
    return steps


if __name__ == "__main__":
    asyncio.run(gpu_worker.main(load_steps()))
