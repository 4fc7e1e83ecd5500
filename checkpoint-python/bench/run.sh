#!/usr/bin/env bash
# The Python benchmark: W1-W4 (docs/workload.md) through LangGraph's checkpointer API, with
# checkpoint_rs's savers and LangGraph's own on the same servers, interleaved in one run.
# Starts the servers it needs (as scripts/test.sh does), installs the pinned environment
# once, builds the extension in release mode, and writes bench-results/python.json.
# Arguments go to workload.py (e.g. --backends postgres --reps 5).
set -euo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=scripts/lib.sh
source scripts/lib.sh
export CHECKPOINT_TEST_REQUIRE=1
checkpoint_start_services postgres redis mongo

venv="${XDG_CACHE_HOME:-$HOME/.cache}/checkpoint-rs/venv-python-bench"
checkpoint_venv "$venv" checkpoint-python/bench/requirements.txt
VIRTUAL_ENV="$venv" "$venv/bin/maturin" develop --release -q \
  --manifest-path checkpoint-python/Cargo.toml 2>&1 | { grep -v '^Requirement already satisfied' || true; }
"$venv/bin/python" checkpoint-python/bench/workload.py --out bench-results/python.json "$@"
echo "wrote bench-results/python.json"
