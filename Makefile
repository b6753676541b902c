# The front door: everyday verbs for developers and CI.
# `make test` works on a fresh machine: it creates .venv, installs the package with its test
# and dev extras and the developer tools (dev/), fetches the Kafka broker jars with Maven, then
# runs unit and integration tests.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install native test test-pure test-brokers unit integration lint fmt broker-jars browser faketime screenshot demo bench clean compat

install: $(STAMP) native

# The modules every record passes through (fairstream/native.py's NATIVE), compiled with
# mypyc in place (setup.py, FAIRSTREAM_NATIVE=1): 14-30% less scheduler CPU a record.
# Rebuilt when one of them changed; until then, an edited module runs from source, and the
# other compiled ones with it (fairstream.native). FAIRSTREAM_PURE=1 runs the source anyway.
# (-I: the script's own directory, fairstream/, is kept off sys.path.)
NATIVE_SOURCES := $(shell $(PYTHON) -I fairstream/native.py)
NATIVE_STAMP := fairstream/compiled.sha256

native: $(NATIVE_STAMP)

$(NATIVE_STAMP): $(STAMP) setup.py fairstream/native.py $(NATIVE_SOURCES)
	FAIRSTREAM_NATIVE=1 $(BIN)/python setup.py --quiet build_ext --inplace >/dev/null || \
		{ rm -f $@; exit 1; }

# fairstream itself, and dev/ (fairstream-dev: the development broker, the test and benchmark
# harness), both editable.
$(STAMP): pyproject.toml dev/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev,demo,faust]' -e ./dev
	@touch $(STAMP)

# The two ends of the click range, each in a fresh virtualenv (pip's cache keeps them quick):
# - a Faust user's install, `pip install '.[faust]'` (not editable, run from outside the
#   tree): it resolves faust-streaming 0.15 and click below 8.4; both packages import and the
#   CLI's --help runs. (`make install` also resolves that click: the suite runs under it.)
# - the newest click, as `pip install fairstream` alone resolves it: the unit tests (but the
#   Faust ones and the chart's) and the CLI tests on the real broker.
COMPAT := $(VENV)/compat
COMPAT_CLI_TESTS := tests/integration/test_tenants_cli.py tests/integration/test_topics.py
define COMPAT_IMPORTS
from importlib.metadata import version
import faust, fairstream, fairstream.faust, fairstream.cli.main
print("fairstream", version("fairstream"), "beside faust-streaming", version("faust-streaming"),
      "on click", version("click"))
endef
export COMPAT_IMPORTS

compat: broker-jars
	rm -rf $(COMPAT)
	$(PYTHON) -m venv $(COMPAT)/faust
	$(COMPAT)/faust/bin/python -m pip install --quiet '.[faust]'
	cd / && $(abspath $(COMPAT))/faust/bin/python -c "$$COMPAT_IMPORTS"
	cd / && $(abspath $(COMPAT))/faust/bin/fairstream --help >/dev/null
	cd / && $(abspath $(COMPAT))/faust/bin/fairstream tenants set --help >/dev/null
	$(PYTHON) -m venv $(COMPAT)/click
	$(COMPAT)/click/bin/python -m pip install --quiet --upgrade -e '.[test]' -e ./dev 'click>=8.5'
	$(COMPAT)/click/bin/python -c 'from importlib.metadata import version as v; \
		print("newest click:", v("click"))'
	$(COMPAT)/click/bin/python -m pytest tests/unit -q -n $(XDIST) \
		--ignore=tests/unit/faust --ignore=tests/unit/deploy $(PYTEST_ARGS)
	$(COMPAT)/click/bin/python -m pytest $(COMPAT_CLI_TESTS) -q $(PYTEST_ARGS)

# Resolve org.apache.kafka:kafka_2.13 and its runtime dependencies into the user cache.
broker-jars: install
	$(BIN)/fairstream-dev kafka fetch

# Headless Chromium from Debian's packages, for the console's browser test
# (tests/integration/test_console.py). Skips apt when chromium is already there.
CHROMIUM ?= chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

browser:
	@command -v $(CHROMIUM) >/dev/null 2>&1 || { \
		echo "installing Debian's chromium (the console's browser test needs it)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium; }
	@$(CHROMIUM) --version

# libfaketime from Debian's packages, for the clock-skew benchmark (benchmarks/skew.py runs
# one scheduler under libfaketime with its wall clock 3 s behind).
faketime:
	@command -v faketime >/dev/null 2>&1 || { \
		echo "installing Debian's faketime (the clock-skew test needs libfaketime)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends faketime; }
	@test -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 || { \
		echo "faketime is installed but not libfaketime.so.1 where the test looks"; exit 1; }

# Unit tests run on $(XDIST) workers (pytest-xdist). Integration tests run in two passes:
# those not marked `serial` on $(INTEGRATION_XDIST) workers (--dist loadfile keeps a file's
# tests, which share set-ups, on one worker; they mostly wait on the broker, the group or a
# session timeout, and on 2 workers the two cores stood 60-90% idle), then the `serial` ones
# alone: they measure rates, latencies or counts that a test beside them would bend
# (pyproject's markers). Both passes run; the status is the first failure's, and a pass that
# selects nothing (pytest's status 5) is none.
XDIST ?= 2
INTEGRATION_XDIST ?= 4
define TWO_PASSES
status=0; \
$(BIN)/python -m pytest $(1) -n $(INTEGRATION_XDIST) --dist loadfile -m "not serial" $(PYTEST_ARGS) || \
	{ s=$$?; [ $$s = 5 ] || status=$$s; }; \
$(BIN)/python -m pytest $(1) -m serial $(PYTEST_ARGS) || \
	{ s=$$?; [ $$s = 5 ] || [ $$status != 0 ] || status=$$s; }
endef

# The integration tests on the broker of KAFKA_BOOTSTRAP_SERVERS, or on the development
# broker, started here unless it runs already (and then stopped after): xdist's workers are
# sessions of their own, and must all find one broker started before them. The development
# broker of the default version has share groups: the share worker's tests use it too.
define INTEGRATION
@if [ -n "$${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then started=no; \
else \
	if $(BIN)/fairstream-dev kafka status >/dev/null 2>&1; then started=no; else started=yes; fi; \
	KAFKA_BOOTSTRAP_SERVERS=$$($(BIN)/fairstream-dev kafka up) || exit 1; \
	if [ -z "$${FAIRSTREAM_DEV_KAFKA_VERSION:-}" ]; then \
		export KAFKA_SHARE_BOOTSTRAP_SERVERS=$${KAFKA_SHARE_BOOTSTRAP_SERVERS:-$$KAFKA_BOOTSTRAP_SERVERS}; \
	fi; \
fi; \
export KAFKA_BOOTSTRAP_SERVERS; \
echo "integration tests on $$KAFKA_BOOTSTRAP_SERVERS"; \
$(call TWO_PASSES,tests/integration); \
if [ $$started = yes ]; then $(BIN)/fairstream-dev kafka down >/dev/null || true; fi; \
exit $$status
endef

test: install broker-jars browser
	FAIRSTREAM_EXPECT=compiled $(BIN)/python -m pytest tests/unit -n $(XDIST) $(PYTEST_ARGS)
	$(INTEGRATION)

# The unit suite once more on the source of the compiled modules: the pure-Python fallback
# (what `pip install fairstream` without a compiler runs) keeps every behaviour too.
test-pure: install
	FAIRSTREAM_PURE=1 FAIRSTREAM_EXPECT=pure $(BIN)/python -m pytest tests/unit -n $(XDIST) \
		$(PYTEST_ARGS)

# The tests that carry the guarantees (exactly once, group shares, the feedback loop, the
# producer's contract), once more on each broker version of BROKER_VERSIONS: the oldest
# supported and the newest released before share groups. Each version has a development broker
# of its own (.cache/dev-kafka-<version>); dev/test-brokers.sh runs the tests not marked
# serial on every version at once, then the serial ones one version after another.
BROKER_VERSIONS ?= 3.7.2 4.1.1
BROKER_TESTS ?= tests/integration/test_exactly_once.py tests/integration/test_group_shares.py \
	tests/integration/test_feedback_loop.py tests/integration/test_producer.py

test-brokers: install
	BIN="$(BIN)" XDIST="$(XDIST)" BROKER_TESTS="$(BROKER_TESTS)" \
		BROKER_VERSIONS="$(BROKER_VERSIONS)" bash dev/test-brokers.sh $(PYTEST_ARGS)

unit: install
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

integration: install broker-jars browser
	$(INTEGRATION)

# Refresh docs/console.png (the README's screenshot) from the browser test's live console:
# the tenant groups' scenario (a group and its members beside ungrouped tenants).
screenshot: install broker-jars browser
	FAIRSTREAM_CONSOLE_SCREENSHOT=docs/console.png $(BIN)/python -m pytest \
		tests/integration/test_group_tree.py::test_console_shows_the_tree $(PYTEST_ARGS)

# The configuration reference (docs/configuration.md, and the README's short table) rendered
# from the settings' declarations in fairstream/config (dev/fairstream_dev/configref.py);
# tests/unit/test_configref.py fails while it is stale.
.PHONY: configref
configref: install
	$(BIN)/python -m fairstream_dev.configref --write

# The package's structure (dev/fairstream_dev/structure.py): import cycles (runtime and
# type-only), and the largest modules and functions, listed to be read (no limit: sizes
# follow meaning). Only a runtime import cycle fails it (--check;
# tests/unit/test_import_cycles.py fails on one too).
.PHONY: structure
structure: install
	$(BIN)/python -m fairstream_dev.structure --check

LINT_PATHS := fairstream dev tests setup.py $(wildcard benchmarks)

lint: install
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy

fmt: install
	$(BIN)/ruff format $(LINT_PATHS)
	$(BIN)/ruff check --fix $(LINT_PATHS)

# The noisy-neighbour demo; starts the development broker unless KAFKA_BOOTSTRAP_SERVERS is set.
demo: install broker-jars
	@BOOTSTRAP="$${KAFKA_BOOTSTRAP_SERVERS:-$$($(BIN)/fairstream-dev kafka up)}" && \
	$(BIN)/fairstream demo --bootstrap "$$BOOTSTRAP"

# The benchmarks, on the development broker unless KAFKA_BOOTSTRAP_SERVERS is set; run_all.py
# rewrites docs/benchmarks.md, then benchmarks/skew.py prints the clock-skew run (under
# libfaketime). Its Quix Streams peer gets a virtualenv of its own
# (quixstreams pins confluent-kafka below 2.13; fairstream needs 2.16 or later).
QUIX_VENV := $(VENV)/peer-quix

$(QUIX_VENV)/.installed: benchmarks/requirements-quix.txt
	@test -x $(QUIX_VENV)/bin/python || $(PYTHON) -m venv $(QUIX_VENV)
	$(QUIX_VENV)/bin/python -m pip install --quiet -r benchmarks/requirements-quix.txt
	@touch $@

bench: install broker-jars faketime $(QUIX_VENV)/.installed
	$(BIN)/python -m benchmarks.core_decisions
	$(BIN)/python -m benchmarks.budgets
	@BOOTSTRAP="$${KAFKA_BOOTSTRAP_SERVERS:-$$($(BIN)/fairstream-dev kafka up)}" && \
	$(BIN)/python -m benchmarks.service_throughput --bootstrap "$$BOOTSTRAP" && \
	$(BIN)/python -m benchmarks.run_all --bootstrap "$$BOOTSTRAP" && \
	$(BIN)/python -m benchmarks.skew --bootstrap "$$BOOTSTRAP"

# One chaos run of the whole system on a development broker of its own (benchmarks/soak.py:
# kills, SIGTERMs, a broker restart, a rebalance; about 8 minutes); rewrites docs/soak.md and
# exits 1 on loss, disorder or egress duplicates. SOAK_ARGS="--duration 120 --seed 7" varies it.
SOAK_ARGS ?=

.PHONY: soak
soak: install broker-jars
	$(BIN)/python -m benchmarks.soak --markdown docs/soak.md $(SOAK_ARGS)

# The fairstream image (Dockerfile), for the Helm chart's image.repository: no public registry
# serves it. `make image IMAGE=registry.example.com/team/fairstream` builds it with
# `docker build` (tagged with the package version, the chart's appVersion: the chart's default
# tag); `make image-push IMAGE=...` builds and pushes it. Needs a Docker engine.
IMAGE ?= fairstream
IMAGE_TAG ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

.PHONY: image image-push
image:
	docker build -t $(IMAGE):$(IMAGE_TAG) .

image-push: image
	@case "$(IMAGE)" in */*) ;; *) echo "image-push: IMAGE=$(IMAGE) names no registry; e.g. make image-push IMAGE=registry.example.com/team/fairstream" >&2; exit 1;; esac
	docker push $(IMAGE):$(IMAGE_TAG)

# Static checks of the Dockerfile, docker-compose.yml and the Helm chart, with no Docker engine
# or cluster (deploy/check.sh). Builds helm once from the Go module proxy into ~/.cache/fairstream.
.PHONY: deploy-check
deploy-check: install
	bash deploy/check.sh

clean:
	rm -rf $(VENV) build *.egg-info dev/build dev/*.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
	find fairstream -name '*.so' -delete
	rm -f $(NATIVE_STAMP)
