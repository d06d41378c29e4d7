#!/usr/bin/env bash
# Runs the Rust client's whole suite: unit tests, then the client against servers the tests
# start themselves on free ports (a redis-server with the module, one without it, a 3-primary
# cluster from cluster/cluster.sh, axum apps on real ports and a second server process).
#
# Environment:
#   MODULE   the module (default: <repo>/target/release/libredis_ratelimit.so, built when missing)
#
# The dependencies are the ones Cargo.lock pins (--locked). The debug profile: on 2 cores it
# builds axum, tokio and hyper in about half the time of a release build, and the tests wait
# on servers, not on the CPU.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export MODULE=${MODULE:-$ROOT/target/release/libredis_ratelimit.so}

for tool in redis-server redis-cli cargo; do
  command -v "$tool" >/dev/null || {
    echo "$tool is needed (redis-server and redis-cli: apt-get install redis-server)" >&2
    exit 1
  }
done
if [ ! -f "$MODULE" ]; then
  echo "building the module: $MODULE"
  (cd "$ROOT" && cargo build --release)
fi

cd "$HERE"
cargo test --locked --all-features
