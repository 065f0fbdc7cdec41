# syntax=docker/dockerfile:1
# The app image: the orchestration worker (`python -m activities`, the default) and the `popcon` CLI with the review
# app (`popcon review`), CPU only, with the S3 artifact store. Runs as an unprivileged user. Its packages are those
# roles' sets (pyproject.toml: the base, orchestration, review, cli, s3): no model engines, no local dev server.
#
#   docker build -f docker/app.Dockerfile -t popcon-app .                                  (from the repository root)
#   docker run --rm popcon-app popcon list
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/popcon \
    PATH=/opt/popcon/bin:$PATH

RUN python -m venv "$VIRTUAL_ENV" && useradd --create-home --uid 10001 popcon

WORKDIR /app
COPY pyproject.toml README.md ./
COPY workflows workflows
COPY core core
COPY activities activities
COPY gpu_activity_worker gpu_activity_worker
COPY starter starter
RUN pip install ".[orchestration,review,cli,s3]"

USER popcon
# The default data folder sits next to the installed code, which this user cannot write to.
ENV POPCON_DATA_DIR=/home/popcon/.popcon
CMD ["python", "-m", "activities"]
