# Engram: `make dev` runs the local server; `make test` runs the whole gate (lint, format, types, tests).
SHELL := /bin/bash
PY ?= python3
UV := $(shell command -v uv 2>/dev/null || echo "$(PY) -m uv")
RUN := $(UV) run --locked

.PHONY: bootstrap sync dev serve test check lint format typecheck pytest bench clean

bootstrap:  ## install uv from PyPI when it is missing
	@command -v uv >/dev/null 2>&1 || $(PY) -m uv --version >/dev/null 2>&1 || $(PY) -m pip install --quiet uv

sync: bootstrap
	$(UV) sync --locked --all-extras

dev: sync  ## install everything, then serve on 127.0.0.1:8000 with data in ./.engram
	$(RUN) engram serve

test: sync check  ## install everything, then lint + format + types + tests

check: lint typecheck pytest

lint:
	$(RUN) ruff check layers functions infra tests bench
	$(RUN) ruff format --check layers functions infra tests bench

format:
	$(RUN) ruff format layers functions infra tests bench
	$(RUN) ruff check --fix layers functions infra tests bench

typecheck:
	$(RUN) mypy

pytest:
	$(RUN) pytest -ra

bench: sync  ## all benchmarks, or BENCH="locomo latency cranfield" (a subset); figures in bench/RESULTS.md
	$(RUN) python -m bench.run $(BENCH)

clean:
	rm -rf .venv .pytest_cache .mypy_cache .ruff_cache
