# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test test-setup setup bench clean kcat browser sim-long chaos-long java-interop go-interop js-interop spark-cds

# Every version pinned: constraints.txt (what the suite last passed with), pip itself, and
# the build backend in pyproject.toml.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q pip==26.3
	$(PY) -m pip install -q -c constraints.txt -e '.[test,fast,spark]'
	touch $(STAMP)

# kcat (a C Kafka client from Debian) is used by the integration tests.
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && apt-get install -y -qq kcat) >/dev/null; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq kcat; fi; }

setup: $(STAMP)

# Sets everything up and runs the main job: one local broker (broker + controller)
# on 127.0.0.1:9092 with its data in ./data. Stop it with Ctrl-C.
run: $(STAMP)
	$(VENV)/bin/tidelog serve

# Chromium and its driver (Debian) for the web view's browser test.
browser:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; fi; }

# Kafka's own Java client and tools for tests/interop/ (interop/java/pom.xml pins them):
# resolved from Maven Central into the local Maven cache the first time (offline after
# that), the driver compiled, the class path written to target/classpath.txt. Without
# java or mvn the Java interop tests skip and say so.
JAVA_INTEROP := interop/java
JAVA_BUILT   := $(JAVA_INTEROP)/target/classpath.txt
JAVA_SOURCES := $(JAVA_INTEROP)/pom.xml $(shell find $(JAVA_INTEROP)/src -name '*.java' 2>/dev/null)
MVN_GOALS    := -q -B compile dependency:build-classpath -Dmdep.outputFile=target/classpath.txt

# Apache Kafka's broker and controller themselves (interop/kafka-server/pom.xml pins
# kafka_2.13), for the real-Kafka fixture (tests/kafka_fixture.py): the conformance tests
# (tests/conformance/) and benchmarks/kafka_side_by_side.py. Only resolved, nothing built.
KAFKA_SERVER       := interop/kafka-server
KAFKA_SERVER_BUILT := $(KAFKA_SERVER)/target/classpath.txt
MVN_CLASSPATH      := -q -B dependency:build-classpath -Dmdep.outputFile=target/classpath.txt

# Kafka Connect and MirrorMaker 2 (interop/connect/pom.xml pins them; 4.3.1, the newest
# release of which Maven Central serves every module) for the Connect and MirrorMaker
# tests in tests/interop/. Only resolved, nothing built.
KAFKA_CONNECT       := interop/connect
KAFKA_CONNECT_BUILT := $(KAFKA_CONNECT)/target/classpath.txt

# Spark's own Kafka connector (interop/spark-kafka/pom.xml pins it) for
# tests/spark/test_spark_kafka_connector.py: only resolved, nothing built.
SPARK_KAFKA       := interop/spark-kafka
SPARK_KAFKA_BUILT := $(SPARK_KAFKA)/target/classpath.txt

java-interop: $(JAVA_BUILT) $(KAFKA_SERVER_BUILT) $(KAFKA_CONNECT_BUILT) $(SPARK_KAFKA_BUILT)

$(SPARK_KAFKA_BUILT): $(SPARK_KAFKA)/pom.xml
	@if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then \
	  cd $(SPARK_KAFKA) && { mvn -o $(MVN_CLASSPATH) >/dev/null 2>&1 || mvn $(MVN_CLASSPATH); } && touch target/classpath.txt; \
	else echo "java or mvn not found: the tests of Spark's own Kafka connector will be skipped"; fi


$(KAFKA_CONNECT_BUILT): $(KAFKA_CONNECT)/pom.xml
	@if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then \
	  cd $(KAFKA_CONNECT) && { mvn -o $(MVN_CLASSPATH) >/dev/null 2>&1 || mvn $(MVN_CLASSPATH); } && touch target/classpath.txt; \
	else echo "java or mvn not found: the Kafka Connect and MirrorMaker tests will be skipped"; fi

$(KAFKA_SERVER_BUILT): $(KAFKA_SERVER)/pom.xml
	@if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then \
	  cd $(KAFKA_SERVER) && { mvn -o $(MVN_CLASSPATH) >/dev/null 2>&1 || mvn $(MVN_CLASSPATH); } && touch target/classpath.txt; \
	else echo "java or mvn not found: the tests against real Kafka (tests/conformance/) will be skipped"; fi

$(JAVA_BUILT): $(JAVA_SOURCES)
	@if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then \
	  cd $(JAVA_INTEROP) && { mvn -o $(MVN_GOALS) >/dev/null 2>&1 || mvn $(MVN_GOALS); } && touch target/classpath.txt; \
	else echo "java or mvn not found: the Java interop tests (tests/interop/) will be skipped"; fi

# franz-go (interop/go/go.mod and go.sum pin it) and KafkaJS (interop/js/package-lock.json)
# for tests/interop/test_franz_go.py and test_kafkajs.py: the Go driver is built into
# interop/go/bin (modules from the Go module proxy the first time, into the module cache),
# and npm ci installs interop/js/node_modules. Without go, or node and npm, those tests
# skip and say so.
GO_INTEROP := interop/go
GO_BUILT   := $(GO_INTEROP)/bin/driver
JS_INTEROP := interop/js
JS_BUILT   := $(JS_INTEROP)/node_modules/.package-lock.json

go-interop: $(GO_BUILT)
js-interop: $(JS_BUILT)

$(GO_BUILT): $(GO_INTEROP)/go.mod $(GO_INTEROP)/go.sum $(wildcard $(GO_INTEROP)/*.go)
	@if command -v go >/dev/null 2>&1; then \
	  cd $(GO_INTEROP) && go build -buildvcs=false -o bin/driver .; \
	else echo "go not found: the franz-go tests (tests/interop/test_franz_go.py) will be skipped"; fi

$(JS_BUILT): $(JS_INTEROP)/package.json $(JS_INTEROP)/package-lock.json
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
	  cd $(JS_INTEROP) && npm ci --no-audit --no-fund --loglevel=error; \
	else echo "node or npm not found: the KafkaJS tests (tests/interop/test_kafkajs.py) will be skipped"; fi

# Sets everything up and runs the whole test suite in two phases (docs/testing.md): the
# tests in parallel worker processes (pytest-xdist, TEST_WORKERS of them: measured best
# on two cores), then the few marked `serial`, alone. Both phases run; the target fails
# if either does (no serial test at all is no failure). The Spark class archive is
# written beside the first tests (`tests.spark.cds --background`); a test that starts a
# Spark JVM before it is ready waits for it.
# Bytecode is compiled first: where PYTHONDONTWRITEBYTECODE is set (as on the machines
# this project is built on) each of the ~600 processes the suite starts (brokers,
# commands, Spark's Python workers) would compile tidelog's modules again, about 0.15 s
# of CPU each.
TEST_WORKERS ?= 4
test:
	@$(MAKE) --no-print-directory -j4 test-setup
	@$(PY) -m compileall -q src examples > /dev/null
	@$(PY) -m tests.spark.cds --background
	@status=0; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial" || status=$$?; \
	$(PY) -m pytest -q -p no:xdist -m serial || { rc=$$?; [ $$rc = 5 ] || status=$$rc; }; \
	exit $$status

# What the suite needs, set up side by side (make -j: pip's install, Maven, Go and npm
# mostly wait on the network and the disk); the two apt-get steps one after the other,
# and the three Maven projects too (one local repository).
test-setup: $(STAMP) kcat browser java-interop go-interop js-interop
browser: | kcat
$(KAFKA_SERVER_BUILT): | $(JAVA_BUILT)
$(KAFKA_CONNECT_BUILT): | $(KAFKA_SERVER_BUILT)
$(SPARK_KAFKA_BUILT): | $(KAFKA_CONNECT_BUILT)

# The class archive the tests' Spark JVMs start from (tests/spark/cds.py): written once
# into the virtual environment, about a minute; without Java, or if it fails, the tests
# run without it.
spark-cds: $(STAMP)
	@$(PY) -m tests.spark.cds

# The deterministic simulator over thousands of seeds (beyond the 50 that `make test`
# runs), then longer fault phases, then compacted topics; and the long real-process
# chaos run. A failing
# seed prints the one command that replays it (docs/simulation.md).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
sim-long: $(STAMP)
	$(PY) -m tidelog.sim --seeds 1000-3999 --jobs $(JOBS) --keep-going
	$(PY) -m tidelog.sim --seeds 0-199 --long --jobs $(JOBS) --keep-going
	$(PY) -m tidelog.sim --seeds 0-599 --compact --jobs $(JOBS) --keep-going

chaos-long: $(STAMP)
	$(PY) -m tidelog.chaos --long --seeds 1-3

bench: $(STAMP) java-interop
	$(PY) benchmarks/storage_bench.py
	$(PY) benchmarks/produce_consume_bench.py
	$(PY) benchmarks/txn_bench.py
	$(PY) benchmarks/sustained_produce_bench.py
	$(PY) benchmarks/validation_bench.py
	$(PY) benchmarks/produce_cpu_bench.py
	$(PY) benchmarks/group_bench.py
	$(PY) benchmarks/replication_bench.py
	$(PY) benchmarks/metrics_bench.py
	$(PY) benchmarks/metrics_render_bench.py
	$(PY) benchmarks/controller_failover_bench.py
	$(PY) benchmarks/tls_bench.py
	$(PY) benchmarks/cli_bench.py
	$(PY) benchmarks/spark_read_bench.py
	$(PY) benchmarks/kafka_side_by_side.py
	$(PY) benchmarks/kafka_failover_bench.py
	$(PY) benchmarks/scale_bench.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
