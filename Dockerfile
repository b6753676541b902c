# syntax=docker/dockerfile:1
# fairstream image: `docker run IMAGE` runs the scheduler; `docker run IMAGE worker --handler m:f`,
# `IMAGE topics create ...`, `IMAGE submit ...` run the other commands (ENTRYPOINT is `fairstream`).
#
# Two stages: the builder makes a wheel of fairstream and installs it with its dependencies into a
# virtualenv at /opt/fairstream; the runtime stage copies only that virtualenv. The wheel is the
# fairstream package alone: the development broker and the test harness are the separate
# fairstream-dev distribution (dev/), which neither the build context nor the image holds.
# Every dependency ships a manylinux wheel for CPython 3.11 (confluent-kafka with librdkafka
# bundled, aiohttp, avro), so no compiler is needed;
# --only-binary makes a dependency that would need one fail the build instead of silently
# compiling.
# Both stages use the same base image, so the virtualenv's interpreter path stays valid. pip stays
# in the virtualenv: an image built FROM this one installs its handler's dependencies with it.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# README.md is the project's `readme` in pyproject.toml: the wheel build reads it.
COPY pyproject.toml README.md ./
COPY fairstream ./fairstream
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
    && python -m venv /opt/fairstream \
    && /opt/fairstream/bin/pip install --only-binary=:all: /wheels/fairstream-*.whl \
    && find /opt/fairstream -name '__pycache__' -type d -prune -exec rm -rf {} +

FROM ${PYTHON_IMAGE} AS runtime
ARG FAIRSTREAM_UID=10001
LABEL org.opencontainers.image.title="fairstream" \
      org.opencontainers.image.description="Tenant-fair, rate-limited egress for Kafka" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric uid/gid, so Kubernetes' runAsNonRoot can verify it and fsGroup can match it.
RUN groupadd --system --gid "${FAIRSTREAM_UID}" fairstream \
    && useradd --system --uid "${FAIRSTREAM_UID}" --gid fairstream \
       --home-dir /var/lib/fairstream --no-create-home --shell /usr/sbin/nologin fairstream \
    && mkdir -p /var/lib/fairstream /app \
    && chown fairstream:fairstream /var/lib/fairstream
COPY --from=builder /opt/fairstream /opt/fairstream
ENV PATH=/opt/fairstream/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    FAIRSTREAM_DATA_DIR=/var/lib/fairstream \
    FAIRSTREAM_WEB_HOST=0.0.0.0 \
    FAIRSTREAM_WEB_PORT=6066
# Fail the build here, not at the first connection, if a native library is missing:
# confluent-kafka links its bundled librdkafka.
RUN python -c "import confluent_kafka; print('librdkafka', confluent_kafka.libversion()[0])" \
    && fairstream --version
# `fairstream worker` puts the working directory on sys.path: an image built FROM this one
# copies its handler module into /app and runs `worker --handler module:function`.
WORKDIR /app
USER ${FAIRSTREAM_UID}:${FAIRSTREAM_UID}
# The scheduler's identity (its transactional and group instance ids), kept across restarts
# so that a restart fences what its previous run left open at once; buffers live in Kafka.
VOLUME ["/var/lib/fairstream"]
EXPOSE 6066
# Liveness of the scheduler's web endpoint (commands without one, like worker, disable it).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('FAIRSTREAM_WEB_PORT', '6066'), timeout=4)"]
ENTRYPOINT ["fairstream"]
CMD ["scheduler"]
