# syntax=docker/dockerfile:1
#
# MemQ-py image: brokers (`memq broker`), the auditor + dashboard (`memq audit serve`) and
# every other `memq` command. Runtime dependencies only (no `dev` or `spark` extras).
#
#   docker build -t registry.example.com/memq-py:0.1.0 .
#   docker run --rm registry.example.com/memq-py:0.1.0 --version
#   docker run --rm -p 9092:9092 -p 9093:9093 -v "$PWD/broker.yaml:/etc/memq/broker.yaml:ro" \
#       registry.example.com/memq-py:0.1.0 broker --config /etc/memq/broker.yaml
#
# The Helm chart (helm/memq) runs it as UID/GID 10001 with a read-only root filesystem.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: the project's wheel plus the wheels of its runtime dependencies ---------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Only what the wheel needs (.dockerignore keeps the rest of the tree out of the context).
COPY pyproject.toml README.md ./
# memq/ links governor/, storage_handlers/, consumer/ and spark/ in as memq.<name>:
# the wheel installs one import namespace, `memq`.
COPY memq ./memq
COPY governor ./governor
COPY storage_handlers ./storage_handlers
COPY consumer ./consumer
COPY spark ./spark
RUN pip wheel --wheel-dir /wheels .

# --- runtime ---------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="memq-py" \
      org.opencontainers.image.description="MemQ-py: object-store micro-batching pub/sub (brokers batch into S3, pointers in Kafka)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# PYTHONDONTWRITEBYTECODE: the root filesystem is read-only at run time (bytecode is
# compiled at install time instead). PYTHONUNBUFFERED: logs reach `kubectl logs` at once.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
# Install from the build stage's wheels only (no index, no compiler); the wheels are
# bind-mounted, so they never become a layer of this image.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels memq-py \
    && memq --version \
    && python -c "import memq.consumer, memq.governor, memq.storage_handlers" \
    && ! python -c "import consumer" 2>/dev/null
RUN groupadd --system --gid 10001 memq \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/memq --create-home \
       --shell /usr/sbin/nologin memq
USER 10001:10001
WORKDIR /home/memq
# 9092: broker wire protocol; 9093: broker HTTP (/metrics, /healthz, /readyz, /status);
# 8080: auditor dashboard and API.
EXPOSE 9092 9093 8080
# The broker handles SIGTERM itself (drain, then exit 0) and starts no child processes,
# so it runs as PID 1 without an init shim.
STOPSIGNAL SIGTERM
ENTRYPOINT ["memq"]
CMD ["--help"]
