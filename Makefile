# Tether's two entry points: `make demo` (the main job on embedded defaults) and `make test`
# (the whole suite). Both build their own virtualenv and the Rust extension first.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(BIN)):$(PATH)
export PYO3_PYTHON := $(abspath $(BIN))/python

.PHONY: demo test build venv browser rust-test lint typecheck pytest pytest-pg-throwaway bench proto clean

# On a terminal the demo asks the operator; without one (CI, a pipe) it decides unattended
# (its arm is emulated, so --operator auto-reissue is allowed).
demo: build
	@if [ -t 0 ]; then $(BIN)/tether demo $(ARGS); \
	else $(BIN)/tether demo --operator auto-reissue $(ARGS); fi

test: build rust-test lint typecheck pytest pytest-pg-throwaway

# The virtualenv and the tools that build Tether (re-run when pyproject changes).
$(VENV)/.tools: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "maturin>=1.7,<2"
	touch $@

venv: $(VENV)/.tools

# maturin installs the package in editable form with its dev extras; cargo keeps it incremental.
build: venv
	$(BIN)/maturin develop -q --release --extras dev

rust-test: venv
	cargo test -q --workspace
	cargo clippy -q --workspace --all-targets -- -D warnings
	cargo clippy -q --workspace --all-targets --features python -- -D warnings

lint: build
	$(BIN)/ruff check python tests benches examples
	$(BIN)/ruff format --check python tests benches examples

typecheck: build
	$(BIN)/mypy --strict python/tether
	$(BIN)/python -m mypy.stubtest tether._core --allowlist stubtest-allowlist.txt

# The console's browser tests and benches drive Debian's Chromium and its driver (Selenium
# from PyPI); installed here when missing, with openssl. Nothing is downloaded by the browser tooling.
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  echo "installing chromium and chromium-driver (Debian packages)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; \
	fi
	@# The TLS and mTLS tests make their certificates with the openssl CLI (Debian's package).
	@if ! command -v openssl >/dev/null 2>&1; then \
	  echo "installing openssl (Debian package)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssl; \
	fi

# The suite runs on PYTEST_WORKERS processes (pytest-xdist; each file's tests on one of them,
# in order; 0: in this one), then the secret scan on its own: it searches what every process of
# the suite recorded and dumped (tests/_secrets.py). pytest's exit code 5 (nothing collected)
# must fail the run, not pass it.
PYTEST_WORKERS ?= 2
RECORDINGS := $(abspath .test-recordings)
pytest: build browser
	rm -rf $(RECORDINGS) && mkdir -p $(RECORDINGS)
	TETHER_SECRET_RECORDINGS=$(RECORDINGS) $(BIN)/python -m pytest -n $(PYTEST_WORKERS) \
	  --dist loadfile --deselect tests/test_zz_secret_scan.py $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; \
	  if [ $$rc -ne 0 ]; then exit $$rc; fi
	TETHER_SECRET_RECORDINGS=$(RECORDINGS) $(BIN)/python -m pytest -q -p no:xdist \
	  tests/test_zz_secret_scan.py

# PostgreSQL tests use the server at 127.0.0.1:5432 when it answers, else they start a throwaway
# cluster (tether.testing._postgres). This target runs the storage tests on a throwaway cluster
# even though a server answers, so the fallback CI relies on is itself tested.
pytest-pg-throwaway: build
	CI=true TETHER_PG_URL=postgresql://127.0.0.1:1/test $(BIN)/python -m pytest -q tests/storage \
	  tests/activities/test_catalog.py

# The gRPC stubs in python/tether/_gen/, generated from proto/ (tests fail on drift).
proto: build
	$(BIN)/python -m tether.protogen

bench: build browser
	for b in benches/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) target rust/target
