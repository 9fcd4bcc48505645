# rafka — one Makefile for newcomers, CI and developers.
#
#   make run     set everything up, start a local 3-node quorum cluster (foreground; Ctrl-C stops it)
#   make test    set everything up (incl. Spark), run the default test suite (short chaos + Spark runs)
#   make bench   run the benchmarks; prints a table, writes bench/results/latest.json
#   make fuzz    fuzz every listener for FUZZ_SECONDS (default 3600); `make test` runs fixed counts
#   make lint    ruff
#
# Everything lands in ./.venv; nothing is installed globally except the Debian packages the
# chaos tests need (iproute2, iptables, faketime, fuse3), and only when running as root.

SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
PIP   := $(VENV)/bin/pip
RAFKA := $(VENV)/bin/rafka
NODES ?= 3
DATA_DIR ?= ./rafka-data
PYTEST_ARGS ?=

# The first Python >= 3.11 on PATH.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	  command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && { echo $$p; break; }; \
	done)

JAVA_HOME ?= $(shell ls -d /usr/lib/jvm/java-17-openjdk-* 2>/dev/null | head -n1)
export JAVA_HOME
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON = $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON = $(abspath $(PY))

.PHONY: help install install-spark os-deps run test test-all test-kafka-compat bench fuzz lint chaos chaos-docker spark-demo clean

help:
	@sed -n '2,10p' Makefile

$(VENV)/.installed: pyproject.toml setup.py log/_codec.c log/_murmur2.h log/_msgpack_put.h client/_sendpath.c
	@test -n "$(PYTHON)" || { echo "error: rafka needs Python >= 3.11 on PATH" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e ".[test,dev,chaos,bench]"
	@# the optional C codec (setup.py ext_modules, built in place); a failed compile is not fatal
	@ls log/_codec*.so >/dev/null 2>&1 && echo "rafka: C codec built (log/_codec.c)" || \
	  echo "rafka: C codec NOT built (needs gcc and Python headers; as root: make os-deps) - the pure-Python codec is used"
	@ls client/_sendpath*.so >/dev/null 2>&1 && echo "rafka: C send path built (client/_sendpath.c)" || \
	  echo "rafka: C send path NOT built - Producer.send runs in Python"
	touch $@

$(VENV)/.spark: $(VENV)/.installed
	$(PIP) install -q --no-cache-dir -e ".[spark]"
	touch $@

install: $(VENV)/.installed
install-spark: $(VENV)/.spark

# gcc and the Python headers for the optional C codec (log/_codec.c, built then if the venv has
# none yet; without them the pure-Python codec is used), then Debian packages for the chaos tests
# (network namespaces, iptables, libfaketime, FUSE for the lose-unfsynced-writes fault):
# deploy/install-chaos-deps.sh. Root only; without root the netns backend and the root-only
# fault tests are skipped and the local (proxy) backend is used.
# Also Debian's chromium for the web console's headless screenshot test
# (deploy/install-browser-deps.sh; skipped without it), and kcat for the Kafka-listener tests
# (deploy/install-kafka-test-deps.sh; skipped without it).
os-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  { command -v gcc >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc python3-dev; } && \
	  { [ ! -x $(PY) ] || ls log/_codec*.so >/dev/null 2>&1 || $(PY) setup.py -q build_ext --inplace; } && \
	  sh deploy/install-chaos-deps.sh && \
	  sh deploy/install-kafka-test-deps.sh && \
	sh deploy/install-browser-deps.sh; \
	else echo "os-deps: not root or no apt-get: netns chaos tests and the console screenshot test will be skipped"; fi

run: install
	$(RAFKA) cluster up --nodes $(NODES) --data-dir $(DATA_DIR)

test: install install-spark os-deps
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: install install-spark os-deps
	$(PY) -m pytest $(PYTEST_ARGS)

# kafka-python's own integration suite (from its sdist) against a rafka cluster's Kafka listener;
# fails only on a failure not listed in tests/kafka_compat/known_failures.txt (docs/kafka-compat.md)
test-kafka-compat: install
	$(PY) tests/kafka_compat/run_kafka_python_suite.py

bench: install install-spark
	$(PY) -m bench

# The port fuzzer (Raft, metrics and console HTTP: tests/security/test_fuzz_ports.py) runs for
# FUZZ_SECONDS per target; the protocol fuzzer (main and TLS listeners: test_fuzz.py) is rerun
# with fresh seeds until as long again has passed. A failure prints its seed (RAFKA_FUZZ_SEED).
fuzz: install
	RAFKA_FUZZ_SECONDS=$${FUZZ_SECONDS:-3600} $(PY) -m pytest -q -s --timeout=0 tests/security/test_fuzz_ports.py
	end=$$(( $$(date +%s) + $${FUZZ_SECONDS:-3600} )); while [ $$(date +%s) -lt $$end ]; do \
	  $(PY) -m pytest -q -s -k fuzzed_frames tests/security/test_fuzz.py || exit 1; done

lint: install
	$(VENV)/bin/ruff check .

# Longer campaigns, one seed after another: SEEDS="1 2 3" (default SEED, 1), BACKEND (netns |
# local | docker), NEMESIS, TIME_LIMIT. Results in chaos-results/<backend>-<time>/seed<S>; the
# verdict table (`rafka chaos table`) is printed and appended to chaos-results/seeds.md.
# Exit 0 all valid, 1 anomalies, 2 a seed could not run.
chaos: install os-deps
	@dir=chaos-results/$${BACKEND:-netns}-$$(date +%Y%m%d-%H%M%S); args=(); \
	for s in $${SEEDS:-$${SEED:-1}}; do r=0; \
	  $(RAFKA) chaos run --backend $${BACKEND:-netns} --nemesis $${NEMESIS:-kill,pause,partition,clock,crash} \
	    --time-limit $${TIME_LIMIT:-120} --seed $$s --results $$dir/seed$$s || r=$$?; \
	  args+=("$$dir/seed$$s:$$r"); \
	done; \
	$(RAFKA) chaos table --title "$${BACKEND:-netns} chaos: $$(git rev-parse --short HEAD 2>/dev/null), nemesis $${NEMESIS:-kill,pause,partition,clock,crash}, time limit $${TIME_LIMIT:-120}s" \
	  --append chaos-results/seeds.md "$${args[@]}"

# The docker backend: SEEDS="1 2 3" (default SEED, 1), TIME_LIMIT, NEMESIS, KEEP_ENGINE=1
# (deploy/chaos-docker.sh; a table of the seeds at the end, exit 1 if one is invalid).
chaos-docker: install
	bash deploy/chaos-docker.sh

spark-demo: install install-spark
	$(PY) -m rafka.spark_source.demo --start-cluster

# A docker compose cluster: 3 controller-only + 3 broker-only nodes in containers (root; private
# engine, image built from this tree). compose-test = produce/consume + a broker kill;
# docs/deployment.md has the rolling restart. The recipes live in deploy/Makefile.
.PHONY: compose-up compose-test compose-rolling-restart compose-down compose-clean
compose-up compose-test compose-rolling-restart: install
	$(MAKE) -C deploy $@ PY=$(abspath $(PY))
compose-down compose-clean:
	$(MAKE) -C deploy $@ PY=$(abspath $(PY))

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
