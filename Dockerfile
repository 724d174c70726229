# syntax=docker/dockerfile:1
# dra-webhook image: `make image`, or `docker build -t dra-webhook:0.1.0 .`
#
# Two stages: the first installs the locked dependencies and the package into a virtualenv, the
# second copies only that virtualenv onto a clean slim Python, so no compiler, pip cache or
# source tree ships. It runs as a numeric non-root user and writes nothing outside /tmp (the
# chart mounts an emptyDir there), so it works with a read-only root filesystem. No
# HEALTHCHECK: Kubernetes probes /healthz and /readyz over HTTPS instead.
#
# Behind a private index, mirror or TLS-intercepting proxy (README.md, "Building the image"):
#   docker build --secret id=pip.conf,src=$HOME/.config/pip/pip.conf \
#                --secret id=pip-ca,src=/path/to/corporate-ca.pem .
#   docker build --build-arg PIP_INDEX_URL=https://mirror.example/simple .
# Secrets are mounted for the install step only; the PIP_* arguments exist in the build stage
# only. Neither reaches the final image.

# The base, pinned by digest (the multi-arch index of python:3.11-slim-bookworm), so a rebuild
# gets the same bytes. To move it: `docker buildx imagetools inspect python:3.11-slim-bookworm`
# and replace the digest. Override with --build-arg PYTHON_IMAGE=... for a mirror of it.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

FROM ${PYTHON_IMAGE} AS build
# pip reads these from the environment; set them with --build-arg when the index is not PyPI.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
# true: strip debug symbols from the shared libraries (needs binutils from the Debian archive);
# false for a build that can reach only a Python index.
ARG STRIP=true
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONFIG_FILE=/run/secrets/pip.conf \
    PYTHONDONTWRITEBYTECODE=1
# hadolint ignore=DL3008
RUN if [ "$STRIP" = true ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends binutils \
        && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
RUN python -m venv --without-pip /opt/dra-webhook
# The lock (requirements.txt, every distribution pinned with its hashes) first: this layer is
# reused until the lock changes. Only wheels: nothing is compiled here.
COPY requirements.txt ./
RUN --mount=type=secret,id=pip.conf --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && pip --python /opt/dra-webhook/bin/python install --no-cache-dir --no-compile \
        --require-hashes --no-deps --only-binary=:all: -r requirements.txt
COPY pyproject.toml README.md ./
COPY app ./app
# Then the package alone (its dependencies are all in place), and what it never imports goes:
# - the generated API and model classes of the kubernetes client, sync and asyncio (~120 MB):
#   app/cluster/live.py uses kubernetes.aio's ApiClient, Configuration and config loaders
#   only, and both `client` packages load their API and model modules lazily, on first access
#   (`import kubernetes.aio` runs kubernetes/__init__.py, which imports the sync `client`
#   package itself, so only its api/ and models/ modules can go);
# - cel_expr_python's optional extension libraries (ext/, ~36 MB; app/cel imports `cel` only).
# The import line below fails the build if any of that was needed after all.
RUN --mount=type=secret,id=pip.conf --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && pip --python /opt/dra-webhook/bin/python install --no-cache-dir --no-compile --no-deps . \
    && site=$(/opt/dra-webhook/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
    && for client in "$site/kubernetes/client" "$site/kubernetes/aio/client"; do \
        rm -rf "$client/api" \
        && find "$client/models" -mindepth 1 ! -name __init__.py -delete; \
    done \
    && rm -rf "$site/cel_expr_python/ext" \
    && if [ "$STRIP" = true ]; then \
        find /opt/dra-webhook -name '*.so*' -type f -exec strip --strip-unneeded {} +; \
    fi \
    && /opt/dra-webhook/bin/python -c 'import app.cli, app.server.run, app.transport.app, app.cluster.live, app.cel.backends.cel_expr, app.cel.backends.celpy_engine' \
    && /opt/dra-webhook/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/dra-webhook/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="dra-webhook" \
      org.opencontainers.image.description="Admission webhook that moves GPU workloads from device plugins to DRA" \
      org.opencontainers.image.licenses="Apache-2.0"
# User and group 65532, as USER below and the chart's runAsUser/runAsGroup/fsGroup.
RUN groupadd --system --gid 65532 dra-webhook \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin dra-webhook
COPY --from=build /opt/dra-webhook /opt/dra-webhook
ENV PATH=/opt/dra-webhook/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp
# Relative paths (the default certs/ folder) land on the writable /tmp.
WORKDIR /tmp
USER 65532:65532
# 8443: admission over HTTPS; 8081: /healthz and /readyz over plain HTTP on their own loop (probes).
EXPOSE 8443 8081
ENTRYPOINT ["dra-webhook", "serve"]
