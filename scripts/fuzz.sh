#!/usr/bin/env bash
# The fuzz targets (fuzz/, cargo-fuzz on the nightly toolchain): builds them, then runs each
# for SECONDS (default 30) from a scratch copy of its committed corpus. A crash, a timeout
# (10 s per input) or running out of memory (2 GB) fails the script. Installs cargo-fuzz
# when it is missing. Called by scripts/test.sh with 30 s per target; for a long run:
#   bash scripts/fuzz.sh 0 -runs=10000000    (extra arguments go to libFuzzer)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

seconds="${1:-30}"
shift || true

if ! cargo +nightly --version > /dev/null 2>&1; then
  checkpoint_service_unavailable fuzz "no nightly Rust toolchain (rustup toolchain install nightly)"
  exit $?
fi
if ! cargo fuzz --version > /dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install -q cargo-fuzz --version 0.13.2 --locked
fi

# AddressSanitizer keeps the stack trace of every allocation site it sees, for good: a
# recursive decoder reached through millions of distinct nestings grows that store without
# bound (msgpack: 2 GB of RSS after 7.2 M runs with 25 MB of live heap; with no allocation
# stack traces, 0.6 GB at 3.7 M). Memory errors are still caught; their reports lose only
# the allocation's stack (safe Rust has none to report; the targets look for panics,
# timeouts and unbounded memory).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}malloc_context_size=0"

cd fuzz
cargo +nightly fuzz build -O
for target in $(cargo +nightly fuzz list); do
  scratch="$(mktemp -d)"
  cp corpus/"$target"/* "$scratch"/
  limit=()
  [ "$seconds" != 0 ] && limit=(-max_total_time="$seconds")
  log="$(mktemp)"
  if ! cargo +nightly fuzz run -O "$target" "$scratch" -- \
    "${limit[@]+"${limit[@]}"}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$@" \
    > "$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $target FAILED (its reproducer is under fuzz/artifacts/$target/)" >&2
    exit 1
  fi
  runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')"
  echo "fuzz: $target: $runs executions, no crash, timeout or out-of-memory"
  rm -rf "$scratch" "$log"
done
