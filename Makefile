# Two commands set everything up on a fresh machine:
#   make demo   runs edgeq's demo: expiry on one store, then store and forward between
#               a device and the real home server on loopback
#   make test   runs the whole test suite (lint, types, tests)
# Both create .venv and install what they need into it: make demo edgeq with the
# server and sync extras (the home server and the agent, for the demo's second act),
# make test the test extras (those stacks too, pyarrow and Spark, the linters).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# One stamp per install, so either command works first and the other still gets what it needs.
# (The demo's stamp was renamed when it gained the extras, so older venvs install them.)
DEMO_STAMP := $(VENV)/.installed-demo-server
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test typecheck lint clean bench bench-smoke bench-floors browser mosquitto

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server,sync]'
	touch $(DEMO_STAMP)

# The test install includes the demo's (the test extras hold the server and sync stacks), so it stamps both.
$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(TEST_STAMP) $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/edgeq demo

lint: $(TEST_STAMP)
	$(BIN)/ruff check edgeq rules sync tests benchmarks examples

# mypy cannot see setuptools' package-dir mapping through an editable install,
# so it checks a copy laid out as installed (rules/ inside edgeq/).
typecheck: $(TEST_STAMP)
	rm -rf build/typecheck && mkdir -p build/typecheck
	cp -r edgeq build/typecheck/edgeq && cp -r rules build/typecheck/edgeq/rules && cp -r sync build/typecheck/edgeq/sync
	cd build/typecheck && ../../$(BIN)/mypy --strict --config-file ../../pyproject.toml -p edgeq

# The browser tests (the pipeline's HTML report) drive Debian's chromium through its
# chromedriver: installed here when missing (CI runs as root; elsewhere sudo is used).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium chromium-driver; }

# The bridges' tests (tests/sync/bridges) start Debian's mosquitto broker (and its mosquitto_passwd):
# installed here when missing, as the browser is.
mosquitto:
	@command -v mosquitto >/dev/null || [ -x /usr/sbin/mosquitto ] || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q mosquitto; }

# One pytest worker a core (pytest-xdist); `make test TEST_WORKERS=0` runs the suite in one process.
TEST_WORKERS ?= auto

test: $(TEST_STAMP) browser mosquitto lint typecheck
	$(BIN)/python -m pytest -n $(TEST_WORKERS)

# The benchmarks run in their own environment: edgeq plus the peers it is
# compared with (persist-queue, litequeue, paho-mqtt), so .venv stays the device install.
# The sync case's MQTT baseline also needs the mosquitto broker: the harness
# apt-get installs it when missing (see benchmarks/README.md; --no-install forbids it).
# `make bench BENCH_ARGS="--only get_confirm --sizes 1k,1M"` runs one case.
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
BENCH_ARGS ?=

$(BENCH_STAMP): pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	echo '*' > $(BENCH_VENV)/.gitignore
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m benchmarks $(BENCH_ARGS)

bench-smoke: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m benchmarks --smoke $(BENCH_ARGS)

# The hot-path floors (issue 31) side by side in one run, modest sizes (benchmarks/README.md,
# "The hot-path floors"): the table goes to benchmarks/results/floors.md.
# `make bench-floors BENCH_ARGS="--ops 300"` is a quick check that it runs.
BENCH_FLOORS_ARGS := --only put_single --only put_batch --only get_confirm --only put_threads \
	--only put_threads_slowsync --only sync --libs edgeq,pq-ack,raw-sqlite,edgeq-sql --sizes 1k,1M --threads 1,8 \
	--ops 2000 --slowsync-us 3000 --sync-messages 20k --out benchmarks/results/floors.json

bench-floors: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m benchmarks $(BENCH_FLOORS_ARGS) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .hypothesis
