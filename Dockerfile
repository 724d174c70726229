# dra-webhook image: `docker build -t dra-webhook:0.1.0 .`
#
# Two stages: the first installs the package into a virtualenv, the second copies only that
# virtualenv onto a clean slim Python, so no compiler, pip cache or source tree ships. It runs as
# a numeric non-root user and writes nothing outside /tmp (the chart mounts an emptyDir there),
# so it works with a read-only root filesystem. No HEALTHCHECK: Kubernetes probes /healthz and
# /readyz over HTTPS instead.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Every dependency has a manylinux wheel for CPython 3.11: nothing is compiled here either.
RUN python -m venv --without-pip /opt/dra-webhook
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip --python /opt/dra-webhook/bin/python install --no-cache-dir . \
    && /opt/dra-webhook/bin/python -m compileall -q /opt/dra-webhook/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="dra-webhook" \
      org.opencontainers.image.description="Admission webhook that moves GPU workloads from device plugins to DRA" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN useradd --system --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin dra-webhook
COPY --from=build /opt/dra-webhook /opt/dra-webhook
ENV PATH=/opt/dra-webhook/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp
# Relative paths (the default certs/ folder) land on the writable /tmp.
WORKDIR /tmp
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["dra-webhook", "serve"]
