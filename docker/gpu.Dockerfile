# syntax=docker/dockerfile:1
# The GPU image: the matting engines with their weights baked in. One image, two entry points (gpu-entrypoint.sh):
# the RunPod Serverless handler (default) or the Temporal GPU worker (`worker`, for a RunPod Pod or any CUDA box).
# It holds only what the GPU worker imports: the contract (workflows), the shared core and gpu_activity_worker; the
# orchestration worker's activities and the CLI stay out (tests/test_import_graph.py keeps the GPU side apart). Its
# packages are the GPU role's set only (the base, gpu, s3 and runpod in pyproject.toml; no CLI, review app or export
# libraries: tests/test_dependencies_by_role.py), and the code runs from /app, not installed, so no `popcon` script.
#
#   docker build -f docker/gpu.Dockerfile -t popcon-gpu .                                  (from the repository root)
#   docker build -f docker/gpu.Dockerfile --build-arg WEIGHTS="rembg-isnet-anime birefnet-general" -t popcon-gpu .
#
# torch 2.14.1 (the gpu extra's pin) ships CUDA 13.0 libraries in its wheels, so the base is RunPod's CUDA 13.0 image
# (a runpod/pytorch image would bring a second, older torch) and the host needs a CUDA 13 driver (R580 or newer);
# `popcon runpod deploy` asks RunPod for such hosts (POPCON_RUNPOD_MIN_CUDA_VERSION).
ARG BASE_IMAGE=runpod/base:1.0.2-cuda1300-ubuntu2404
FROM ${BASE_IMAGE}

# Weight sets to bake in (names from `popcon models list`), separated by spaces; empty = none (classical needs none).
ARG WEIGHTS="rembg-isnet-anime"

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/popcon \
    PATH=/opt/popcon/bin:$PATH \
    PYTHONPATH=/app \
    POPCON_MODEL_DIR=/models \
    POPCON_DATA_DIR=/var/lib/popcon \
    SAM2_BUILD_CUDA=0

# The base image carries Python 3.9 to 3.13 (3.12 as `python`); the project needs 3.11, in its own venv.
RUN python3.11 -m venv "$VIRTUAL_ENV"

WORKDIR /app
COPY pyproject.toml README.md ./
COPY workflows workflows
COPY core core
COPY gpu_activity_worker gpu_activity_worker
# The GPU role's dependency set only (`--only-deps`, in pip since 26.2; pip pinned for a reproducible image): the
# project itself is not installed, so its
# `popcon` script (the CLI, not in this image) never is; the code runs from /app (PYTHONPATH), and a build id reads the
# project's version from /app/pyproject.toml.
RUN pip install "pip==26.3" && pip install --only-deps ".[gpu,s3,runpod]"

# Weights are fetched at build time and checked against the catalogue's sha256: workers start without network access
# to model hosts and never download. A weight set that cannot be fetched fails the build.
RUN if [ -n "$WEIGHTS" ]; then python -m gpu_activity_worker.fetch_weights $WEIGHTS; fi

COPY --chmod=755 docker/gpu-entrypoint.sh /usr/local/bin/gpu-entrypoint
ENTRYPOINT ["gpu-entrypoint"]
CMD ["handler"]
