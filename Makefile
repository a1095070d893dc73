# sparklog: the two commands a fresh machine needs are `make demo` and `make test`.
# Everything they need (virtualenv, Python packages, ZooKeeper, Delta and Kafka jars) is installed from here.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.sparklog-installed
CC     ?= cc
# the Kafka record batch codec (sparklog.kafka.record_batch loads it with ctypes)
CODEC  := src/sparklog/kafka/_records.so
# Apache Kafka's jars (its Java tools: tests of the Kafka listener; the benchmarks' peer) and Spark's Kafka connector
KAFKA_JARS := .deps/.kafka-fetched

.PHONY: install bytecode test test-fast demo bench bench-kafka lint clean

install: $(STAMP) $(CODEC) $(KAFKA_JARS)

# Bytecode for sparklog's own modules (the editable install has none; pip compiled the packages it
# installed). Every process the tests and the demo start (brokers, the CLI, Spark's Python workers,
# notebook kernels) imports sparklog, and where PYTHONDONTWRITEBYTECODE is set no import writes it,
# so each of them would compile the same sources again: ~0.5 s of CPU per broker start. compileall
# rewrites only what changed; Python checks each file's stamp, so a stale one is never used.
bytecode: install
	$(BIN)/python -m compileall -q src tests

$(KAFKA_JARS): benchmarks/fetch_kafka.sh benchmarks/kafka-pom.xml benchmarks/spark-kafka-pom.xml benchmarks/maven-settings.xml
	bash benchmarks/fetch_kafka.sh all
	@touch $@

$(CODEC): src/sparklog/kafka/_records.c
	$(CC) -O2 -Wall -Wextra -shared -fPIC -o $@ $<

$(STAMP): setup.cfg pyproject.toml scripts/install_zookeeper.sh scripts/zookeeper-pom.xml scripts/install_delta.sh scripts/delta-pom.xml scripts/install_nftables.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	bash scripts/install_zookeeper.sh
	bash scripts/install_delta.sh
	bash scripts/install_nftables.sh
	@touch $(STAMP)

test: install bytecode
	$(BIN)/python -m pytest

test-fast: install bytecode
	$(BIN)/python -m pytest -m "not slow"

lint: install
	$(BIN)/ruff check src tests

bench: install bytecode
	$(BIN)/sparklog bench append --json

bench-kafka: install
	bash benchmarks/fetch_kafka.sh
	$(BIN)/python -m sparklog.bench.against_kafka suite --repeat 3

demo: install bytecode
	$(BIN)/python -m sparklog.demo

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build dist src/*.egg-info data $(CODEC)
	find src tests -name __pycache__ -type d -prune -exec rm -rf {} +
