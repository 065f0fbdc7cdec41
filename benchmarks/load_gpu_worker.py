"""``python -m benchmarks.load_gpu_worker``: the GPU worker of ``python -m gpu_activity_worker``, with the ``sleep``
stand-in engine registered beside the built-in steps, for the load benchmark (benchmarks/load.py).

It is the real worker's own ``main`` (:func:`gpu_activity_worker.worker.main`: its settings from the same ``POPCON_*``
variables, its connection, logging, slots, threads, store, scoring, encoding and shutdown), given the steps with the
stand-in registered; only the engine is a stand-in (:mod:`benchmarks.sleep_engine`, ``sleep:<ms>``).
"""

from __future__ import annotations

import asyncio

from benchmarks.sleep_engine import sleep_steps
from gpu_activity_worker import worker as gpu_worker

if __name__ == "__main__":
    asyncio.run(gpu_worker.main(sleep_steps()))
