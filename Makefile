# promptlab: `make run` starts the app, `make test` installs everything and runs lint + tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8501
# The API the app serves beside its pages (promptlab serve's, in the same process).
API ?= 127.0.0.1:8765

.PHONY: run test lint install install-dev bytecode chromium redis prometheus nginx bench docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# uv installs the requirements: the same versions pip picks, in 16 s where pip took 65 s
# on a fresh machine (docs/explanation/suite.md). uv reads its own settings, not pip's:
# behind a private package index, set UV_DEFAULT_INDEX (or the older UV_INDEX_URL) too.
$(VENV)/bin/uv: | $(PY)
	$(PY) -m pip install -q 'uv>=0.13,<0.14'

# --compile-bytecode: pip compiles at install, uv does not by default; without it every
# process (each CLI command, each server a test starts) compiled the packages it imports
# (importing the app took 2.0-2.4 s, not 0.8 s).
INSTALL := $(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY)

# Stamp files make re-runs instant until a requirements file changes.
$(VENV)/.runtime: $(VENV)/bin/uv requirements.txt pyproject.toml
	$(INSTALL) -r requirements.txt -e .
	touch $@

# The sample plugin (examples/promptlab-plugin-sample) is installed for the tests: they
# run specs through its scorer and command (tests/test_plugins.py).
$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt examples/promptlab-plugin-sample/pyproject.toml
	$(INSTALL) -r requirements-dev.txt -e examples/promptlab-plugin-sample
	touch $@

install: $(VENV)/.runtime
install-dev: $(VENV)/.dev

# Bytecode for the project's own modules, brought up to date before each run: uv compiles
# only the packages it installs, and the project is imported from its sources. Where
# PYTHONDONTWRITEBYTECODE is set (as on the machines this is tested on) every process
# otherwise compiled each promptlab module it imported: `promptlab run` took 0.92 s to
# its first request, 0.63 s with these (bench/startup.py), and each CLI command, server
# and worker a test starts paid the same (docs/explanation/suite.md).
bytecode: install
	@$(PY) -m compileall -q -j0 promptlab pages app.py >/dev/null

# `make run` opens the database, serves the API and starts the demo before the first page
# view (promptlab/ui/launch.py), then serves the app on 127.0.0.1 only.
# `make run HOST=0.0.0.0` serves it to the network, which wants sign-in (an [auth]
# section in .streamlit/secrets.toml): without it the app refuses to serve, unless
# `PROMPTLAB_ALLOW_OPEN=1 make run HOST=...` says the network in front of it is trusted.
# `make run ARGS="--secrets.files /etc/promptlab/secrets.toml"` passes Streamlit options on
# (sign-in's secrets kept outside the checkout, say).
HOST ?= 127.0.0.1
ARGS ?=
run: install bytecode
	PROMPTLAB_SERVE=$(API) $(PY) -m promptlab.ui.launch run app.py --server.address $(HOST) --server.port $(PORT) $(ARGS)

# The browser smoke test drives Debian's Chromium; install it when missing and we are root.
chromium:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "chromium not found and not root: the browser test will be skipped"; fi

# The distributed tests start their own redis-server on a free port; install it when
# missing and we are root (Debian's package).
redis:
	@if command -v redis-server >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
	else echo "redis-server not found and not root: the distributed tests will be skipped"; fi

# Debian programs the tests run: promtool and prometheus (tests/test_alert_rules.py,
# tests/test_prometheus_live.py) and nginx (tests/test_deploy_proxy.py). Each package is
# downloaded and unpacked under the venv, never installed: the packages' scripts would
# start daemons (Prometheus on 0.0.0.0:9090, nginx on port 80). apt-get download needs
# no root (only the retry's apt-get update does); it warns, harmlessly, that its _apt
# user may not write to the private temp folder, so its output is shown on failure only.
# $(call unpack_deb,PACKAGE,FILE IT HOLDS)
define unpack_deb
	@if [ -x $(VENV)/debs/$(1)$(2) ]; then :; \
	elif command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then \
		tmp=$$(mktemp -d) && \
		{ (cd "$$tmp" && apt-get download -qq $(1)) >"$$tmp/apt.log" 2>&1 || \
		  { apt-get update -qq && (cd "$$tmp" && apt-get download -qq $(1)) >"$$tmp/apt.log" 2>&1; } || \
		  { [ "$$(id -u)" = 0 ] && cat "$$tmp/apt.log"; rm -rf "$$tmp"; [ "$$(id -u)" != 0 ] && \
		    { echo "$(1) not downloadable and not root: its tests will be skipped"; exit 0; }; \
		    exit 1; }; } && \
		{ mkdir -p $(VENV)/debs/$(1) && dpkg-deb -x "$$tmp"/$(1)_*.deb $(VENV)/debs/$(1); \
		  rc=$$?; rm -rf "$$tmp"; exit $$rc; }; \
	else echo "$(1) not found (no apt-get): its tests will be skipped"; fi
endef

prometheus:
	$(call unpack_deb,prometheus,/usr/bin/promtool)

nginx:
	$(call unpack_deb,nginx,/usr/sbin/nginx)

lint: install-dev
	$(VENV)/bin/ruff check promptlab pages app.py tests bench docs
	$(VENV)/bin/ruff format --check promptlab pages app.py tests bench docs
	$(VENV)/bin/mypy

# pytest-xdist spreads the tests over WORKERS processes: three on two cores. Two kept the
# cores busy 70% of the time (tests wait for browsers, servers and workers to start); a
# third fills some of that (docs/explanation/suite.md); each builds the demo databases once
# (tests/conftest.py). pytest keeps each test file's rewritten asserts as bytecode, which
# PYTHONDONTWRITEBYTECODE (set on the machines this is tested on) forbids: every worker
# then rewrote all 170 files again, 12 s of collection each, not 6 s. Empty, it writes
# them. tests/test_docs.py builds the docs site (mkdocs build --strict) and checks its
# examples. The 25 slowest tests are printed at the end, so each run's log says where the
# time went.
WORKERS ?= 3
test: install-dev bytecode chromium redis prometheus nginx lint
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n $(WORKERS) --durations=25

# The docs site on http://127.0.0.1:8000 (mkdocs comes with the test requirements).
docs: install-dev
	$(VENV)/bin/mkdocs serve -a 127.0.0.1:8000

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
