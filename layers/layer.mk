# Shared by the layers' Makefiles. SAM builds each layer with `make build-<Layer>` in its directory
# (BuildMethod: makefile): no Docker. The wheels are the Lambda runtime's (CPython 3.13, arm64,
# manylinux) and are fetched by uv from PyPI; nothing is compiled. requirements.txt is the lock
# exported (`make layer-requirements` at the top level): infra/layer_requirements.py says what goes where.
UV ?= $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
# LAMBDA_PLATFORM: the tests build the same layers for this machine (x86_64) to import them here (#51)
LAMBDA_PLATFORM ?= aarch64-manylinux_2_28
TARGET := --python-platform $(LAMBDA_PLATFORM) --python-version 3.13 --no-build --no-deps --link-mode copy
INSTALL = $(UV) pip install $(TARGET) --target $(ARTIFACTS_DIR)/python -r requirements.txt
# caches, tests, type stubs, Cython sources, C headers and build tools: nothing a function imports
PRUNE = find $(ARTIFACTS_DIR)/python \( -name __pycache__ -o -name tests -o -name "*.pyi" -o -name "*.pyx" \
	-o -name "*.pxd" -o -name "*.pxi" -o -name "*.h" -o -path "*/numpy/f2py" -o -path "*/numpy/_core/include" \
	\) -prune -exec rm -rf {} +
# Shared objects keep their dynamic symbols (all the loader uses) and lose the rest of their symbol
# tables: ~15 MB over the layers. llvm-strip reads aarch64 objects on any host; where no strip for
# aarch64 is installed the step says so and the layers are only larger.
STRIP_TOOL := $(firstword $(foreach t,llvm-strip llvm-strip-19 llvm-strip-18 llvm-strip-17 llvm-strip-16 llvm-strip-15 \
	llvm-strip-14 aarch64-linux-gnu-strip,$(shell command -v $(t) 2>/dev/null)))
STRIP = $(if $(STRIP_TOOL),find $(ARTIFACTS_DIR)/python -name "*.so*" -type f -exec $(STRIP_TOOL) --strip-unneeded {} +,\
	@echo "no llvm-strip on PATH: the layer's shared objects keep their symbol tables")
# Bytecode for Lambda's CPython 3.13, compiled here: /opt is read-only on Lambda, so a layer without it
# compiles every module it imports again at every cold start (here: 2.0 -> 0.8 s for the authorizer).
# The libraries ship as bytecode only (legacy `module.pyc` beside where the source was), which keeps
# the layers as small as with sources alone; the engram package keeps its sources, so its tracebacks
# show code lines, with `unchecked-hash` bytecode (a layer never changes; zipping does not keep the
# sources' timestamps exactly). Without a CPython 3.13 on the build machine the layers keep their
# sources and no bytecode.
PY313 := $(firstword $(shell python3.13 -c "import sys; print(sys.executable)" 2>/dev/null) \
	$(lastword $(sort $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13))) \
	$(shell $(UV) python find 3.13 2>/dev/null))
LAYERS_DIR := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))
COMPILE = $(if $(PY313),bash $(LAYERS_DIR)bytecode.sh $(PY313) $(ARTIFACTS_DIR)/python,\
	@echo "no CPython 3.13 found: the layer ships sources without bytecode")
