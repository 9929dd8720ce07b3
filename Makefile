# `make test` and `make demo` do all set-up: they create .venv with the system's python3
# (3.11 or newer) and install the project into it, re-installing only when pyproject.toml
# changed since the last install.

PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
# the project alone (no development extras), for `make demo-queue`
BASE_STAMP := $(VENV)/.installed-base
PYTEST_TIMEOUT ?= 600

.PHONY: test test-fdb demo demo-queue install docs clean browser java screenshot

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q --timeout=$(PYTEST_TIMEOUT) $(PYTEST_ARGS)

# The whole suite with every engine test and job-layer test also run on the FoundationDB
# cluster of $$FDB_CLUSTER_FILE (e.g. docker-compose.fdb.yml's).  Each test clears the
# project's prefixes (jobs/prefixes.py) on it: use a cluster for tests only.
test-fdb: $(STAMP)
	@test -n "$$FDB_CLUSTER_FILE" && test -f "$$FDB_CLUSTER_FILE" || { \
	  echo "make test-fdb: set FDB_CLUSTER_FILE to a test cluster's cluster file (see docker-compose.fdb.yml)"; exit 2; }
	$(VENV)/bin/python -c 'import jobs; jobs.open("fdb:")' || { \
	  echo "make test-fdb: the cluster of $$FDB_CLUSTER_FILE cannot be used (above)"; exit 2; }
	$(VENV)/bin/python -m pytest -q --timeout=$(PYTEST_TIMEOUT) $(PYTEST_ARGS)

# SPARK=cluster runs it on a Spark standalone cluster started here (a master and a worker on
# loopback), SPARK=connect on that cluster behind a Spark Connect server; both stopped after.
demo: $(STAMP)
	$(VENV)/bin/python -m jobsctl.demos.pipeline $(if $(SPARK),--spark $(SPARK)) $(DEMO_ARGS)

demo-queue: $(BASE_STAMP)
	$(VENV)/bin/python -m jobsctl.demos.queue $(DEMO_ARGS)

install: $(STAMP)

# The docs site from mkdocs.yml and docs/ (the API reference from the docstrings) into site/;
# --strict: any warning (a broken link, a page of the nav that is missing, an object
# mkdocstrings cannot find) fails the build.  Open site/index.html, or `$(VENV)/bin/mkdocs serve` while writing.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# Debian's Chromium, for the dashboard's browser tests (tests/test_dashboard_browser.py:
# they skip without it, unless JOBS_REQUIRE_BROWSER is set, as .ci/run does).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@chromium --version

# Java 17 (Debian's headless JRE) for Spark, when none is on PATH: the Spark tests, the real
# Spark cluster's among them, skip without it unless JOBS_REQUIRE_SPARK_CLUSTER is set, as
# .ci/run does.
java:
	@command -v java >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }
	@java -version 2>&1 | head -1

# docs/dashboard.png, the README's picture of the dashboard (needs `make browser`).
screenshot: $(STAMP)
	$(VENV)/bin/python docs/screenshot.py docs/dashboard.png

$(VENV)/bin/python:
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python 3.11 or newer is needed (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet -e '.[dev]'
	touch $@

# The queue demo needs only the project's own dependencies: `-e .`, unless the development
# install (`make install`) is there and up to date.
$(BASE_STAMP): pyproject.toml | $(VENV)/bin/python
	@if [ -f $(STAMP) ] && [ ! $(STAMP) -ot pyproject.toml ]; then :; else \
	  echo "$(VENV)/bin/python -m pip install --quiet -e ."; $(VENV)/bin/python -m pip install --quiet -e .; fi
	touch $@

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .jobs site
