# syntax=docker/dockerfile:1
# The GPU image: the matting engines with their weights baked in. One image, two entry points (gpu-entrypoint.sh):
# the RunPod Serverless handler (default) or the Temporal GPU worker (`worker`, for a RunPod Pod or any CUDA box).
# It holds only what the GPU worker imports: the contract (workflows), the shared core and gpu_activity_worker; the
# orchestration worker's activities and the CLI stay out (tests/test_import_graph.py keeps the GPU side apart). Its
# packages are the GPU role's set only (the base, gpu, s3 and runpod in pyproject.toml; no CLI, review app or export
# libraries: tests/test_dependencies_by_role.py), and the code runs from /app, not installed, so no `popcon` script.
#
#   docker build -f docker/gpu.Dockerfile -t popcon-gpu .                                  (from the repository root)
#   docker build -f docker/gpu.Dockerfile --build-arg WEIGHTS="rembg-isnet-anime birefnet-general" \
#       --build-arg PIPELINES="classical rembg:isnet-anime birefnet" -t popcon-gpu .
#
# The base is a plain Python image, not a CUDA one: every CUDA library the engines load comes in a wheel. torch 2.14.1
# (the gpu extra's pin) depends on the CUDA 13.0 runtime, cuBLAS, cuDNN 9, cuFFT, NCCL... as `nvidia-*` wheels and
# finds them through its RPATH; onnxruntime-gpu (from 1.27 PyPI's build is CUDA 13.0: its build info says so and its
# `cuda`/`cudnn` extras pin the same `nvidia-*` CUDA 13 wheels; up to 1.26 PyPI's was CUDA 12, and CUDA 13 builds
# came from a separate ONNX Runtime feed) loads them by name, through LD_LIBRARY_PATH below. The driver's libcuda.so.1
# is the host's: the NVIDIA container runtime mounts it, so the host needs a CUDA 13 driver (R580 or newer), which
# `popcon runpod deploy` asks RunPod for (POPCON_RUNPOD_MIN_CUDA_VERSION). The former base, runpod/base's CUDA 13.0
# image, added a CUDA devel toolkit, cuDNN, SSH, Jupyter and five Pythons that nothing here uses.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# Weight sets to bake in (names from `popcon models list`), separated by spaces; empty = none (classical needs none).
ARG WEIGHTS="rembg-isnet-anime"
# The matting pipelines the image serves, separated by spaces: the build fails unless each one cuts the smoke frame
# out with the baked weights. `popcon runpod smoke` sends a job to each (POPCON_RUNPOD_PIPELINES, the same default).
ARG PIPELINES="classical rembg:isnet-anime"

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/popcon \
    PATH=/opt/popcon/bin:$PATH \
    PYTHONPATH=/app \
    POPCON_MODEL_DIR=/models \
    POPCON_DATA_DIR=/var/lib/popcon \
    SAM2_BUILD_CUDA=0 \
    LD_LIBRARY_PATH=/opt/popcon/lib/python3.11/site-packages/nvidia/cu13/lib:/opt/popcon/lib/python3.11/site-packages/nvidia/cudnn/lib \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

# The base's Python is the project's 3.11; the packages go to a venv of their own.
RUN python -m venv "$VIRTUAL_ENV"

WORKDIR /app
COPY pyproject.toml README.md ./
COPY workflows workflows
COPY core core
COPY gpu_activity_worker gpu_activity_worker
# The GPU role's dependency set only (`--only-deps`, in pip since 26.2; pip pinned for a reproducible image): the
# project itself is not installed, so its `popcon` script (the CLI, not in this image) never is; the code runs from
# /app (PYTHONPATH), and a build id reads the project's version from /app/pyproject.toml. The gpu extra brings
# onnxruntime-gpu[cuda,cudnn] (and not the CPU wheel, onnxruntime, which would shadow it).
RUN pip install "pip==26.3" && pip install --only-deps ".[gpu,s3,runpod]"

# Weights are fetched at build time and checked against the catalogue's sha256: workers start without network access
# to model hosts and never download. A weight set that cannot be fetched fails the build.
RUN if [ -n "$WEIGHTS" ]; then python -m gpu_activity_worker.fetch_weights $WEIGHTS; fi

# Fails the build unless onnxruntime has its CUDA provider (built for torch's CUDA major), the CUDA libraries it
# loads are found, and every served pipeline cuts the smoke frame out from the baked weights (on the CPU).
RUN python -m gpu_activity_worker.check_image $PIPELINES

COPY --chmod=755 docker/gpu-entrypoint.sh /usr/local/bin/gpu-entrypoint
ENTRYPOINT ["gpu-entrypoint"]
CMD ["handler"]
