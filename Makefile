# redis-ratelimit: `make run` and `make test` do all the set-up on a fresh Debian machine.
SHELL := /bin/bash
.DEFAULT_GOAL := help

SO      := target/release/libredis_ratelimit.so
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Debian packages the build and the tests need: the server (with redis-cli and
# redis-benchmark) and libclang for bindgen. `make bench-instr` also needs valgrind.
PACKAGES := redis-server redis-tools libclang-dev

# $(call apt_install,packages): installs those of the Debian packages that are missing.
define apt_install
	@missing=$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
endef

.PHONY: help deps build run cluster cluster-stop test bench bench-instr bench-memory bigkeys accuracy fuzz lint fmt clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-13s %s\n", $$1, $$2}'

deps: ## Install redis-server, redis-tools and libclang-dev when missing (apt)
	$(call apt_install,$(PACKAGES))

build: deps ## Build the module in release mode (target/release/libredis_ratelimit.so)
	cargo build --release

run: build ## Start redis-server on port 6379 with the module (redis.conf), in the foreground
	mkdir -p .run
	redis-server redis.conf --loadmodule $(CURDIR)/$(SO)

cluster: build ## Start a local cluster with the module: 3 primaries, 3 replicas, ports 7000-7005
	cluster/cluster.sh start

cluster-stop: ## Stop the local cluster and remove what it created (.cluster/)
	cluster/cluster.sh stop

test: deps ## Run every unit and integration test (starts its own servers)
	cargo test --release

bench: build ## Throughput against INCR, SET PX and the Lua scripts (CELL_SO=... adds CL.THROTTLE)
	bench/bench.sh

bench-instr: build ## Instructions per call under callgrind, a table with ratios (installs valgrind)
	$(call apt_install,valgrind)
	bench/instr.sh

bench-memory: build ## Memory per key over 1,000,000 keys of each kind, and DEBUG RELOAD time
	bench/memory.sh

bigkeys: build ## RL.SLIDE keys of 1M to 10M records: SLOWLOG and CPU time per call, memory per record (a table)
	cargo run --release --example bigkeys

accuracy: build ## RL.SUBWIN against the exact RL.SLIDE on simulated traffic (a table)
	cargo run --release --example accuracy

fuzz: build ## Long fuzz run of the parsers and of loading damaged payloads (FUZZ_ITERATIONS, PROPTEST_CASES)
	FUZZ_ITERATIONS=$${FUZZ_ITERATIONS:-100000} cargo test --release --test fuzz -- --nocapture
	PROPTEST_CASES=$${PROPTEST_CASES:-100000} cargo test --release --lib fuzz_

lint: ## rustfmt check and clippy on every target
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

fmt: ## Format the code
	cargo fmt --all

clean: ## Remove build output
	cargo clean
