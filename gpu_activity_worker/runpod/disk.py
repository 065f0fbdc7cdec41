"""The container disk an endpoint worker needs: the unpacked GPU image, room to work, and what RunPod wants free.

A serverless worker's image lives on its container disk ("Docker images cache locally on container disk",
docs.runpod.io/serverless/storage/overview), and the RunPod SDK refuses to start a worker when less than 10% of ``/``
is free (runpod 1.12.0, ``serverless/modules/rp_system_fitness.py``: ``RUNPOD_MIN_DISK_PERCENT``, default 10).
"""

from __future__ import annotations

import math

IMAGE_SIZE_GB = 7.4
"""The GPU image unpacked, default build (docker/gpu.Dockerfile): its Python environment, 6,998 MB as
``python -m benchmarks.image_packages --before HEAD --image gpu --installed`` builds and measures it; the baked
``rembg-isnet-anime`` weights, 176 MB; the python:3.11-slim base and the code, allowed 0.2 GB (the base's size cannot
be measured without a Docker engine). Baking more weight sets adds their size (``popcon models list``)."""
MIN_FREE_FRACTION = 0.10
"""Share of ``/`` the RunPod SDK's start-up check wants free."""
WORK_ROOM_GB = 2.0
"""Room for what a worker writes while it runs: frames in flight, onnxruntime's and torch's caches, logs."""


def container_disk_needed_gb(image_size_gb: float) -> int:
    """The smallest container disk, in whole GB, that holds the image and its work room with 10% still free."""
    return math.ceil((image_size_gb + WORK_ROOM_GB) / (1 - MIN_FREE_FRACTION))
