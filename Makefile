# Engram: `make dev` runs the local server; `make test` runs the whole gate (lint, format, types, tests).
SHELL := /bin/bash
PY ?= python3
UV := $(shell command -v uv 2>/dev/null || echo "$(PY) -m uv")
RUN := $(UV) run --locked
SAM ?= $(shell command -v sam 2>/dev/null || echo "$(UV) tool run --from aws-sam-cli==1.170.0 sam")
ACTIONLINT := go run github.com/rhysd/actionlint/cmd/actionlint@v1.7.7
export SAM_CLI_TELEMETRY = 0

.PHONY: bootstrap sync dev serve test fuzz conformance check lint format typecheck pytest bench clean sam-build sam-validate train-extractor localstack-lock console console-deps browser \
	actionlint \
	layer-requirements template-routes

bootstrap:  ## install uv from PyPI when it is missing
	@command -v uv >/dev/null 2>&1 || $(PY) -m uv --version >/dev/null 2>&1 || $(PY) -m pip install --quiet uv

sync: bootstrap
	$(UV) sync --locked --all-extras
	@# Bytecode made here, once per lock: with PYTHONDONTWRITEBYTECODE set (as on this machine) every
	@# process would compile every module it imports again (boto3 alone: 0.9 s instead of 0.25 s).
	@[ .venv/.bytecode -nt uv.lock ] || { $(UV) sync --locked --all-extras --compile-bytecode && touch .venv/.bytecode; }
	@$(RUN) python -m compileall -q -j 0 layers/engram/engram

dev: sync  ## install everything, then serve on 127.0.0.1:8000 with data in ./.engram
	$(RUN) engram serve

test: sync conformance console-deps browser check  ## install everything, then lint + format + types + tests

conformance:  ## the official MCP conformance suite and Node 22 (the machine's Node is 20), from npm, pinned
	@[ infra/conformance/node_modules/.package-lock.json -nt infra/conformance/package-lock.json ] || \
		npm ci --prefix infra/conformance --no-audit --no-fund --loglevel=error

console-deps:  ## the console's npm packages (Vite, its libraries; axe-core for the browser tests), from its lockfile
	@[ console/node_modules/.package-lock.json -nt console/package-lock.json ] || \
		npm ci --prefix console --no-audit --no-fund --loglevel=error

console: console-deps  ## #52: build the console into the package (commit it: a test fails when the build is stale)
	cd console && npx vite build
	$(RUN) python infra/console_stamp.py write

docs: sync  ## #55: the manual (MkDocs, Material theme, offline) into ./site, --strict; the reference is generated
	NO_MKDOCS_2_WARNING=1 $(RUN) mkdocs build --strict

browser:  ## Debian's Chromium for the console's browser tests (apt, as root), when the machine has none
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

check: lint typecheck pytest

lint: actionlint
	$(RUN) ruff check layers functions infra tests bench docs
	$(RUN) ruff format --check layers functions infra tests bench docs

actionlint:  ## the GitHub workflows (Go from the machine, actionlint from the Go module proxy)
	$(ACTIONLINT) -shellcheck= .github/workflows/*.yml

format:
	$(RUN) ruff format layers functions infra tests bench
	$(RUN) ruff check --fix layers functions infra tests bench

typecheck:
	$(RUN) mypy

pytest:
	$(RUN) pytest -ra $(PYTEST_ARGS)

FUZZ_EXAMPLES ?= 300
FUZZ_SEED ?= $(shell date +%s)
fuzz: sync  ## the three fuzzers, longer than make test and from a new seed (FUZZ_SEED=N replays a run; over an hour)
	@echo "fuzz seed $(FUZZ_SEED), $(FUZZ_EXAMPLES) examples a tool (replay: make fuzz FUZZ_SEED=$(FUZZ_SEED))"
	ENGRAM_FUZZ_SEED=$(FUZZ_SEED) ENGRAM_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) \
		ENGRAM_REST_FUZZ_EXAMPLES=$$(( $(FUZZ_EXAMPLES) / 10 )) ENGRAM_LAMBDA_FUZZ_EXAMPLES=$$(( $(FUZZ_EXAMPLES) / 5 )) \
		$(RUN) pytest -ra tests/e2e/test_fuzz.py tests/e2e/test_rest_fuzz.py tests/aws_lambda/test_fuzz.py

bench: sync  ## all benchmarks, or BENCH="locomo latency cranfield" (a subset); figures in bench/RESULTS.md
	$(RUN) python -m bench.run $(BENCH)

localstack-lock:  ## after changing infra/localstack/requirements.in: its hashed lock (LocalStack's own environment, #51)
	cd infra/localstack && $(UV) pip compile -q --python-version 3.13 --python-platform x86_64-manylinux_2_28 \
		--generate-hashes requirements.in -c constraints.txt -o requirements.txt

train-extractor: sync  ## #50: the entity tagger on MiniLM's token states, chosen on CoNLL04 train, dev reported
	$(RUN) python infra/extractor/train.py

sam-validate: sync
	AWS_DEFAULT_REGION=us-east-1 $(SAM) validate --lint

sam-build: sync  ## build the functions and layers for Lambda (arm64, CPython 3.13) without Docker
	$(SAM) build

layer-requirements:  ## after changing dependencies: the layers' requirement files from uv.lock
	$(RUN) python infra/layer_requirements.py

template-routes:  ## after adding an operation: its API Gateway route in template.yaml
	$(RUN) python infra/template_routes.py

clean:
	rm -rf .venv .pytest_cache .mypy_cache .ruff_cache .localstack
