# normkit developer entry points. `make test` is what CI runs (.ci/run).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON3 ?= python3
BUILD_DIR ?= build/cpp
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CTEST_JOBS ?= 2

DEB_PACKAGES := build-essential cmake ninja-build libssl-dev libgtest-dev

# The generator is fixed when the build directory is first configured; passing
# a different one to an existing build directory is an error in CMake.
ifeq ($(wildcard $(BUILD_DIR)/CMakeCache.txt),)
CMAKE_GENERATOR_ARG := $(if $(shell command -v ninja 2>/dev/null),-G Ninja,)
else
CMAKE_GENERATOR_ARG :=
endif

VENV_STAMP := $(VENV)/.normkit-requirements.stamp

.PHONY: help deps venv build install-py test test-wheel-nvrtc run clean distclean

help:
	@echo "make run        install what is missing, build the Python package, run 'normkit doctor' and 'normkit bench --quick'"
	@echo "make test       install what is missing, build, run the C++ (ctest) and Python (pytest) tests"
	@echo "make test-wheel-nvrtc  the C++ kernel spill sweeps again under the NVRTC of the venv's PyTorch wheels"
	@echo "make deps       install missing Debian packages (as root)"
	@echo "make venv       create $(VENV) with the tools in requirements-dev.txt"
	@echo "make build      configure and build the C++ library and tests in $(BUILD_DIR)"
	@echo "make install-py build and install the Python package into $(VENV)"
	@echo "make clean      remove build outputs (distclean also removes $(VENV))"

deps:
	@missing=""; \
	for pkg in $(DEB_PACKAGES); do \
	  dpkg -s "$$pkg" >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if ! $(PYTHON3) -c 'import venv, ensurepip' >/dev/null 2>&1; then missing="$$missing python3-venv"; fi; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "deps: installing$$missing"; \
	  apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else \
	  echo "deps: missing$$missing (not root or no apt-get: install them yourself)" >&2; \
	fi

$(VENV_STAMP): requirements-dev.txt
	@test -x $(PY) || $(PYTHON3) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	@touch $@

venv: deps $(VENV_STAMP)

build: deps
	cmake -S . -B $(BUILD_DIR) $(CMAKE_GENERATOR_ARG) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DNORMKIT_BUILD_TESTS=ON
	cmake --build $(BUILD_DIR) -j$(JOBS)

# Non-editable install through scikit-build-core's persistent build directory
# (build/<wheel tag>, see pyproject.toml), so a rebuild only recompiles what changed.
# The verbose log is kept and printed only when the install fails.
install-py: venv
	@mkdir -p build
	@echo "install-py: building and installing normkit into $(VENV) (log: build/install-py.log)"
	@if ! $(PY) -m pip install --disable-pip-version-check --no-build-isolation --no-deps -v . \
	    >build/install-py.log 2>&1; then \
	  cat build/install-py.log; echo "install-py: pip install failed" >&2; exit 1; \
	fi

# The NVRTC that PyTorch's cu13 wheels bring (newer than the toolkit's, and the one a
# `import torch` process loads first): ptxas under it spilled plans that the toolkit's
# compiled clean, so the kernel spill sweeps run under it too.
WHEEL_NVRTC = $(firstword $(wildcard $(CURDIR)/$(VENV)/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so.13))

# cuobjdump and nvdisasm from the venv's NVIDIA wheels (requirements-dev.txt), found
# first by NORMKIT_DUMP_DIR's SASS dump in the tests.
WHEEL_CUDA_BIN = $(firstword $(wildcard $(CURDIR)/$(VENV)/lib/python3*/site-packages/nvidia/cu13/bin))

test: deps venv build
	PATH=$(if $(WHEEL_CUDA_BIN),$(WHEEL_CUDA_BIN):)$$PATH NORMKIT_TEST_SWEEP_CACHE_DIR=$(CURDIR)/$(BUILD_DIR)/cache-sweeps \
	  ctest --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j$(CTEST_JOBS)
	$(MAKE) --no-print-directory test-wheel-nvrtc
	$(MAKE) --no-print-directory install-py
	$(PY) -m pytest -q -rs tests/python

test-wheel-nvrtc: venv build
	@if [ -z "$(WHEEL_NVRTC)" ]; then \
	  echo "test-wheel-nvrtc: skipped: no nvidia/cu13 NVRTC in $(VENV) (the PyTorch wheel installed has none)"; \
	else \
	  echo "test-wheel-nvrtc: the spill sweeps under $(WHEEL_NVRTC)"; \
	  NORMKIT_NVRTC_PATH=$(WHEEL_NVRTC) NORMKIT_TEST_SWEEP_CACHE_DIR=$(CURDIR)/$(BUILD_DIR)/cache-sweeps-wheel-nvrtc \
	    ctest --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j$(CTEST_JOBS) -R 'Sweep\.'; \
	fi

# The benchmark writes bench-out/bench.json and bench.png; without a GPU it
# benchmarks the CPU fallback against PyTorch CPU (under a minute).
run: deps venv install-py
	$(VENV)/bin/normkit doctor
	$(VENV)/bin/normkit bench --quick

clean:
	rm -rf build python/normkit/*.so .pytest_cache
	find . -name __pycache__ -type d -not -path './$(VENV)/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
