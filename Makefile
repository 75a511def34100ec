# MemQ-py: every set-up step lives here, so a fresh clone needs only `make demo` / `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# Apache Kafka for the local stack, pinned by memq/devstack/jvm/pom.xml (KAFKA_HOME: yours).
KAFKA_POM   := memq/devstack/jvm/pom.xml
KAFKA_STAMP := $(VENV)/kafka/.fetched-stamp
# Spark's S3A connector (hadoop-aws and the AWS SDK modules it uses, ~15 MB) for the backfill
# benchmark's baseline, pinned by memq/devstack/jvm/spark-s3a.pom.xml.
S3A_POM   := memq/devstack/jvm/spark-s3a.pom.xml
S3A_STAMP := $(VENV)/spark-jars/.fetched-stamp
TOOLS_STAMP := $(VENV)/.test-tools-stamp
PYTEST_ARGS ?=
# pytest-xdist workers, each with its own local stack: the suite mostly waits (batch
# timers, group joins, JVM starts), so two workers on two cores halve its time.
WORKERS ?= 2
XDIST   := -n $(WORKERS) --dist loadfile

.PHONY: help install test-deps demo test check lint typecheck unit integration bench chaos clean dev-up dev-down

help:
	@echo "make demo   set up .venv, start the local stack, run the end-to-end demo, stop the stack"
	@echo "make test   set up .venv, run ruff, import-linter, mypy and the whole pytest suite (real local servers)"
	@echo "make check  the inner loop: lint, types and every test not marked slow (a few minutes)"
	@echo "make chaos  fault-injection suite, hostile-client soak, overload, consumer state scripts, decoder fuzzing"
	@echo "make bench  run the benchmark suite (~70 min; writes benchmarks/results/report.md, topics.json, kafka_ingest.json)"
	@echo "make clean  remove .venv, caches and the local stack's state"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "MemQ-py needs Python 3.11+: run make PYTHON=/path/to/python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	@touch $(STAMP)

# Kafka's jars (93 of them, ~54 MB) into .venv/kafka/libs, once; nothing downloads at test time.
$(KAFKA_STAMP): $(KAFKA_POM) | $(STAMP)
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\)\.*\([0-9]*\).*/\1 \2/p' | head -1); \
	 major=$${v%% *}; [ "$$major" = 1 ] && major=$${v##* }; \
	 if [ -z "$$major" ]; then \
		echo "error: java is not on PATH: the local Kafka and ZooKeeper need Java 17+ (apt-get install openjdk-17-jre-headless)"; exit 1; \
	 elif [ "$$major" -lt 17 ]; then \
		echo "error: java on PATH is Java $$major: Kafka 4 needs Java 17+ (apt-get install openjdk-17-jre-headless, put it first on PATH)"; exit 1; \
	 fi
	@if [ -n "$$KAFKA_HOME" ]; then \
		ls "$$KAFKA_HOME"/libs/kafka_2.13-*.jar >/dev/null 2>&1 || \
			{ echo "error: KAFKA_HOME=$$KAFKA_HOME holds no Kafka distribution (libs/kafka_2.13-*.jar): point it at an unpacked Kafka 4.x or unset it"; exit 1; }; \
		echo "using Apache Kafka from KAFKA_HOME=$$KAFKA_HOME (nothing fetched)"; \
	 else \
		command -v mvn >/dev/null 2>&1 || \
			{ echo "error: mvn is missing: it fetches Apache Kafka for the local stack (apt-get install maven), or set KAFKA_HOME to an unpacked Kafka 4.x"; exit 1; }; \
		echo "fetching Apache Kafka (memq/devstack/jvm/pom.xml) into $(VENV)/kafka/libs"; \
		rm -rf $(VENV)/kafka/libs; \
		mvn -q -B -f $(KAFKA_POM) dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(VENV)/kafka/libs || \
			{ echo "error: fetching Apache Kafka with mvn failed (above): check access to Maven Central (~/.m2/settings.xml), or set KAFKA_HOME to an unpacked Kafka 4.x"; exit 1; }; \
		touch $(KAFKA_STAMP); \
	 fi

# S3A's jars into .venv/spark-jars, once; the backfill benchmark puts them on Spark's
# classpath, and nothing downloads at test or benchmark time.
$(S3A_STAMP): $(S3A_POM) | $(STAMP)
	@hadoop=$$(ls $(VENV)/lib/python3*/site-packages/pyspark/jars/hadoop-client-api-*.jar 2>/dev/null | sed 's/.*hadoop-client-api-\(.*\)\.jar/\1/'); \
	 pinned=$$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' $(S3A_POM)); \
	 if [ -n "$$hadoop" ] && [ "$$hadoop" != "$$pinned" ]; then \
		echo "error: pyspark bundles Hadoop $$hadoop but $(S3A_POM) pins hadoop-aws $$pinned: set <hadoop.version> to $$hadoop"; exit 1; \
	 fi
	@command -v mvn >/dev/null 2>&1 || \
		{ echo "error: mvn is missing: it fetches Spark's S3A connector for the backfill benchmark (apt-get install maven)"; exit 1; }
	@echo "fetching Spark's S3A connector ($(S3A_POM)) into $(VENV)/spark-jars"
	@rm -rf $(VENV)/spark-jars
	@mvn -q -B -f $(S3A_POM) dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(VENV)/spark-jars || \
		{ echo "error: fetching Spark's S3A connector with mvn failed (above): check access to Maven Central (~/.m2/settings.xml)"; exit 1; }
	@touch $(S3A_STAMP)

# Tools only the tests use (a browser, kcat, kafkajs): `make demo` does without them.
$(TOOLS_STAMP): | $(STAMP)
	@# The audit dashboard's browser test drives Debian's chromium (never a downloaded one).
	@if [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing chromium for the audit dashboard browser test"; \
			{ apt-get update && apt-get install -y chromium; } || \
				echo "warning: installing chromium failed: the audit dashboard browser test will fail"; \
		else \
			echo "note: /usr/bin/chromium is missing: the audit dashboard browser test needs it;"; \
			echo "      install it as root: sudo apt-get install -y chromium"; \
		fi; \
	fi
	@# kcat (Debian's): the Kafka listener's command-line client tests need it.
	@if ! command -v kcat >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get install -y kcat >/dev/null 2>&1 || \
				{ apt-get update >/dev/null 2>&1 && apt-get install -y kcat >/dev/null 2>&1; } || \
				echo "warning: installing kcat failed: the kcat tests will fail"; \
		else \
			echo "note: kcat is missing: the kcat tests fail without it; install it as root: sudo apt-get install -y kcat"; \
		fi; \
	fi
	@# kafkajs for the Kafka listener's Node.js client test (tests/integration/test_kafka_listener.py).
	@if ! command -v npm >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		apt-get install -y nodejs npm >/dev/null 2>&1 || \
			{ apt-get update >/dev/null 2>&1 && apt-get install -y nodejs npm >/dev/null 2>&1; } || true; \
	fi
	@if command -v npm >/dev/null 2>&1; then \
		npm install --silent --no-audit --no-fund --prefix $(VENV)/node kafkajs || \
			echo "warning: npm install kafkajs failed: the kafkajs test will fail"; \
	else \
		echo "note: npm is missing: the kafkajs test fails without it; install it as root: sudo apt-get install -y nodejs npm"; \
	fi
	@touch $(TOOLS_STAMP)

install: $(STAMP) $(KAFKA_STAMP)

test-deps: install $(S3A_STAMP) $(TOOLS_STAMP)

demo: install
	$(BIN)/memq demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

test: test-deps lint typecheck
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

check: test-deps lint typecheck
	$(BIN)/python -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

unit: test-deps
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

integration: test-deps
	$(BIN)/python -m pytest $(XDIST) tests/integration $(PYTEST_ARGS)

bench: test-deps
	$(BIN)/memq bench
	$(BIN)/python benchmarks/bench_topics.py --reps 3
	$(BIN)/python benchmarks/bench_kafka_ingest.py --reps 3

FUZZ_SECONDS ?= 120
chaos: install
	$(BIN)/python benchmarks/chaos.py
	$(BIN)/python benchmarks/chaos.py --no-dedup --out benchmarks/results/chaos-no-dedup.json
	$(BIN)/python benchmarks/bench_hostile.py
	MEMQ_STATE_EXAMPLES=2000 $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/unit/test_consumer_state.py -k property
	@for t in frame stream block batch notification audit kafka; do \
		echo "fuzzing $$t for $(FUZZ_SECONDS) s"; \
		(cd $$(mktemp -d) && $(CURDIR)/$(BIN)/python $(CURDIR)/tests/fuzz/fuzz_decoders.py $$t \
			-max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 -print_final_stats=1) || exit 1; \
	done

dev-up: install
	$(BIN)/memq dev up

dev-down: install
	$(BIN)/memq dev down

clean:
	-@[ -x $(BIN)/memq ] && $(BIN)/memq dev down >/dev/null 2>&1 || true
	rm -rf $(VENV) .memq .mypy_cache .ruff_cache .pytest_cache .hypothesis *.egg-info
