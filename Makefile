# Weir — `make demo` runs the main job on the embedded default, `make test` runs the tests.
# Both run `make setup` first, so a fresh clone needs nothing else.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export WEIR_HOME ?= $(CURDIR)/.weir
export PYSPARK_PYTHON := $(CURDIR)/$(VENV)/bin/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(VENV)/bin/python

.PHONY: setup demo test up bench lint clean cluster-services

setup: $(VENV)/.installed $(VENV)/.worker-bytecode .cache/jars/jars.txt .cache/jars/driver-classes.jsa .cache/kafka/installed.txt \
	.cache/yarn/installed.txt cluster-services
	infra/browser/install.sh

# uv installs requirements.txt at the versions of requirements.lock (the set a fresh pip install
# resolved and the suite passed with) in about a minute, where pip took four. After a change of
# requirements.txt: `.venv/bin/uv pip install -r requirements.txt`, the suite, then
# `.venv/bin/uv pip freeze --exclude-editable > requirements.lock`.
$(VENV)/.installed: requirements.txt requirements.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv==0.13.9
	$(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode -r requirements.txt -c requirements.lock
	$(VENV)/bin/uv pip install -q --python $(PY) --no-deps -e .
	touch $@

# pyspark's archives with their bytecode: every Python process Spark starts imports pyspark from
# them, and compiled it from source at each start (spark_jobs/worker_bytecode.py).
$(VENV)/.worker-bytecode: $(VENV)/.installed spark_jobs/worker_bytecode.py
	$(PY) -m spark_jobs.worker_bytecode
	touch $@

.cache/jars/jars.txt: spark_jobs/jars.py $(wildcard infra/jvm/weir/*.java) $(VENV)/.installed
	mkdir -p .cache/jars
	$(PY) -m spark_jobs.jars

# The classes a Weir driver loads, archived once for every driver JVM to map (class data sharing).
.cache/jars/driver-classes.jsa: .cache/jars/jars.txt $(VENV)/.installed spark_jobs/class_archive.py
	$(PY) -m spark_jobs.class_archive

# The Kafka broker for tests and the Kafka profile (org.apache.kafka:kafka_2.13 via mvn).
.cache/kafka/installed.txt: infra/kafka/pom.xml infra/kafka/broker.py $(VENV)/.installed
	infra/kafka/broker.sh install

# PostgreSQL and Redis of the production profile (Debian packages; apt-get as root, idempotent).
cluster-services:
	infra/cluster/services.sh install

# YARN (ResourceManager and NodeManager, org.apache.hadoop via mvn) for cluster deploy mode.
.cache/yarn/installed.txt: infra/yarn/pom.xml infra/yarn/yarn.py $(VENV)/.installed
	infra/yarn/yarn.sh install

up: setup
	infra/airflow/up.sh

demo: setup
	$(PY) -m spark_jobs.demo

# One pytest-xdist worker per core (WEIR_TEST_WORKERS=N for another number). A test waits on its
# drivers, servers and polls about as much as it computes: one worker left about 40 % of this 2-core
# machine idle, and two ran the whole suite in 1,536-1,828 s of tests against 2,093-2,164 s with one
# (README, "Two commands").
WEIR_TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
test: setup
	$(PY) -m pytest -n $(WEIR_TEST_WORKERS)

bench: setup
	$(PY) -m bench.run $(BENCH_ARGS)

lint: setup
	$(VENV)/bin/ruff check spark_jobs plugins dags tests bench

clean:
	rm -rf .weir .pytest_cache
