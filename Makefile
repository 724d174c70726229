# Two entry points for a fresh machine; each sets up its own virtualenv first.
#   make run    serve on https://0.0.0.0:8443 with dev certs and the embedded demo cluster
#   make test   lint, type-check, layer contracts and the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test lint bench loadtest overload e2e clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)
	$(BIN)/dra-webhook serve

lint: $(STAMP)
	$(BIN)/ruff check app tests loadtest
	$(BIN)/ruff format --check app tests loadtest
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest

# The control-plane suite alone (tests/e2e): needs CONTROL_PLANE_ASSETS, see README.
e2e: $(STAMP)
	$(BIN)/pytest tests/e2e -p no:cacheprovider -rs -v

bench: $(STAMP)
	$(BIN)/pytest tests/benchmarks --benchmark-only --benchmark-columns=min,median,mean,ops,rounds

# 30 s of locust at 32 connections against the webhook, then a bare FastAPI echo; results in
# loadtest/results/<time>/ (summary.json, summary.csv, latency.png). See docs/loadtest.md.
loadtest: $(STAMP)
	loadtest/run

# 60 s at twice the measured capacity over 1,000 connections, one worker, on loopback: no 5xx,
# answers within the API server's timeout or refused fast, /healthz p99 < 100 ms, RSS returned.
# Writes loadtest/results/overload-<time>/overload.json; exits 1 if a property fails.
overload: $(STAMP)
	$(BIN)/python loadtest/overload.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .benchmarks
