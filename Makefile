# Two entry points for a fresh machine; each sets up its own virtualenv first.
#   make run    serve on https://127.0.0.1:8443 (HOST=0.0.0.0 for every address) with dev certs
#               and the embedded demo cluster
#   make test   lint, type-check, layer contracts and the test suite
# The virtualenv is installed from the lock, requirements-dev.txt (pinned, with hashes), as the
# image is from requirements.txt; `make lock` rewrites both from pyproject.toml.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml requirements-dev.txt | cksum | cut -d' ' -f1)
# One resolution for every platform, for the oldest Python the project supports.
COMPILE := $(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes --quiet

.PHONY: run test lint bench bench-instructions bench-scale bench-scale-inprocess loadtest overload hostile-cel soak-memory e2e e2e-matrix e2e-bench lock image clean dashboard-picture

$(STAMP): pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps -e .
	rm -f $(VENV)/.installed-*
	touch $@

# Loopback unless HOST says otherwise: a development server with a demo policy is no service to
# offer the network.
HOST ?= 127.0.0.1
run: $(STAMP)
	$(BIN)/dra-webhook serve --host $(HOST)

lint: $(STAMP)
	$(BIN)/ruff check app tests loadtest
	$(BIN)/ruff format --check app tests loadtest
	$(BIN)/mypy
	$(BIN)/lint-imports

# The benchmarks are skipped in the suite (timing is `make bench`'s job), then each runs once
# untimed with its own assertions, so a benchmark that no longer measures what it says fails here.
test: lint
	$(BIN)/pytest
	$(BIN)/pytest tests/benchmarks -q -o addopts="--strict-markers" --benchmark-disable

# The control-plane suite alone (tests/e2e), on CONTROL_PLANE_ASSETS or the default release that
# hack/get-control-plane built (see README and docs/control-plane.md).
e2e: $(STAMP)
	$(BIN)/pytest tests/e2e -p no:cacheprovider -rs -v

# The core journeys on each supported release but the default (RELEASES='1.34 1.35' for some):
# builds each control plane once from Go modules (~15 min cold each on 2 cores), prints the
# release x journey table that docs/control-plane.md keeps.
RELEASES ?=
e2e-matrix: $(STAMP)
	PYTHON=$(CURDIR)/$(BIN)/python hack/e2e-matrix $(RELEASES)

# create-pod latency through the control plane, at 4 and 32 concurrent, pods interleaved over four
# namespaces: no admission, a hand-written ValidatingAdmissionPolicy, a dra-only and a translate
# namespace with the chart (docs/benchmarks.md, "one call per translated pod"); prints the
# table's rows, results in e2e-latency.json. CREATES=300 for a quick run (default 2000 per
# namespace and level); BENCH_SET='webhook.mutating.reinvocationPolicy=IfNeeded' installs the
# webhook configurations with other chart values. Needs CONTROL_PLANE_ASSETS.
CREATES ?= 2000
BENCH_SET ?=
e2e-bench: $(STAMP)
	DRA_E2E_BENCH=1 DRA_E2E_BENCH_OUT=$(CURDIR)/e2e-latency.json \
		DRA_E2E_BENCH_CREATES=$(CREATES) DRA_E2E_BENCH_SET='$(BENCH_SET)' \
		$(BIN)/pytest tests/e2e/test_latency.py -p no:cacheprovider -rs -v -s

bench: $(STAMP)
	$(BIN)/pytest tests/benchmarks --benchmark-only --benchmark-columns=min,median,mean,ops,rounds

# Instructions per review, the webhook against a bare FastAPI echo (valgrind's callgrind: the
# same count run after run, where CPU time moves by 20% on a shared machine). MUTATE=ml-research
# sends a translated pod to /mutate. docs/benchmarks.md, "Instructions per review".
bench-instructions: $(STAMP)
	$(BIN)/python -m tests.instructions $(if $(MUTATE),--mutate $(MUTATE))

# The webhook at 250 to 8,000 ResourceSlices (8 GPUs each) through a real control plane: ready
# time, RSS, first claim, new/repeated shapes, after a slice change (docs/benchmarks.md, "Scale").
# Needs CONTROL_PLANE_ASSETS; SIZES=250,1000 to run fewer. About 4 minutes for all four sizes on
# 2 cores. SCALE_FLAGS='--keep DIR' keeps the logs, '--profile DIR' samples the sync with py-spy.
SIZES ?= 250,1000,4000,8000
SCALE_FLAGS ?=
bench-scale: $(STAMP)
	$(BIN)/python -m tests.scale_bench --sizes $(SIZES) $(SCALE_FLAGS)

# The same cluster's model and index in one process, no API server (docs/benchmarks.md, "Scale"):
# new shapes (SHAPES of them), repeated, after a slice change, RSS. DEVICES=64000 by default.
DEVICES ?= 64000
SHAPES ?= 1000
bench-scale-inprocess: $(STAMP)
	$(BIN)/python -m tests.scale_inprocess --devices $(DEVICES) --shapes $(SHAPES)

# 30 s of locust at 32 connections against the webhook, then a bare FastAPI echo; results in
# loadtest/results/<time>/ (summary.json, summary.csv, latency.png). See docs/loadtest.md.
loadtest: $(STAMP)
	loadtest/run

# docs/dashboard.png: the Grafana dashboard's queries evaluated by a real Prometheus (hack/get-prometheus)
# over 90 s of the load test on loopback, drawn with matplotlib (loadtest/dashboard.py). ~2 minutes.
dashboard-picture: $(STAMP)
	$(BIN)/python -m loadtest.dashboard --out docs/dashboard.png

# After changing dependencies in pyproject.toml; add --upgrade-package NAME (or --upgrade) to
# move pins: make lock UPGRADE='--upgrade-package fastapi'.
lock: $(STAMP)
	$(COMPILE) $(UPGRADE) -o requirements.txt
	$(COMPILE) $(UPGRADE) --extra dev -c requirements.txt -o requirements-dev.txt

# The image, with whichever of docker (BuildKit), podman or buildah works here. Behind a mirror:
# make image PIP_CONF=~/.config/pip/pip.conf [PIP_CA=corporate-ca.pem]; other flags in
# IMAGE_FLAGS (e.g. --build-arg PYTHON_IMAGE=...). See README.md, "Building the image".
IMAGE ?= dra-webhook:0.1.0
IMAGE_FLAGS ?=
image:
	@set -e; \
	if docker info >/dev/null 2>&1; then build="env DOCKER_BUILDKIT=1 docker build"; \
	elif command -v podman >/dev/null; then build="podman build"; \
	elif command -v buildah >/dev/null; then build="buildah bud"; \
	else echo "make image: no docker daemon, podman or buildah found" >&2; exit 1; fi; \
	secrets=""; \
	if [ -n "$(PIP_CONF)" ]; then secrets="--secret id=pip.conf,src=$(PIP_CONF)"; fi; \
	if [ -n "$(PIP_CA)" ]; then secrets="$$secrets --secret id=pip-ca,src=$(PIP_CA)"; fi; \
	set -x; $$build $$secrets $(IMAGE_FLAGS) -t $(IMAGE) .

# 60 s at twice the measured capacity over 1,000 connections, one worker, on loopback: no 5xx,
# answers within the API server's timeout or refused fast, /healthz p99 < 100 ms, RSS returned.
# Writes loadtest/results/overload-<time>/overload.json; exits 1 if a property fails.
overload: $(STAMP)
	$(BIN)/python loadtest/overload.py

# Hostile claims (8,192 distinct selectors, 10,000 requests, 1,024 new selectors per review) over
# 4 connections for 20 s, one worker, on loopback, while pod creates and health probes are timed:
# each answered at once naming its budget, ordinary p99 < 50 ms, /healthz p99 < 100 ms
# (docs/benchmarks.md, "Hostile CEL"). Writes loadtest/results/hostile-cel-<time>/hostile-cel.json.
hostile-cel: $(STAMP)
	$(BIN)/python loadtest/hostile_cel.py

# Distinct large selectors through the HTTPS port (loopback, one worker, at most 30 min): RSS
# must plateau below baseline + the cache budget. Writes loadtest/results/soak-memory-<time>/.
soak-memory: $(STAMP)
	$(BIN)/python loadtest/soak_memory.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .benchmarks
