#!/usr/bin/env bash
# The whole test suite: every crate's unit, integration and doc tests, with the conformance
# suite run against every saver in the workspace. Idempotent; safe on a fresh machine.
#
# Backends that need a server make sure it is running here before the tests start (each
# backend crate adds its own step); under CI=true or CHECKPOINT_TEST_REQUIRE=1 a server that
# cannot be started fails the run instead of skipping its tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
source scripts/lib.sh

# Each backend's service script (scripts/services/<backend>.sh) makes sure its server is
# running (installing or starting it when needed, idempotently) and exports
# CHECKPOINT_TEST_<BACKEND>_URL for cargo below; what they start stops when this script exits.
checkpoint_start_services

echo "==> cargo test --workspace"
cargo test --workspace --all-targets --all-features --no-fail-fast
cargo test --workspace --all-features --doc

echo "==> checkpoint-python: the extension in the LangGraph environment, then pytest"
if [ -n "${CHECKPOINT_TEST_LANGGRAPH_PYTHON:-}" ]; then
  _checkpoint_py_venv="$(dirname "$(dirname "$CHECKPOINT_TEST_LANGGRAPH_PYTHON")")"
  # (pip's "Requirement already satisfied" lines for the pinned dependencies are dropped)
  VIRTUAL_ENV="$_checkpoint_py_venv" "$_checkpoint_py_venv/bin/maturin" develop -q \
    --manifest-path checkpoint-python/Cargo.toml 2>&1 | { grep -v '^Requirement already satisfied' || true; }
  (cd checkpoint-python/tests && "$CHECKPOINT_TEST_LANGGRAPH_PYTHON" -m pytest -q -s -p no:cacheprovider -rs)
else
  checkpoint_service_unavailable checkpoint-python "no Python LangGraph environment to test it in"
fi

echo "==> fuzz targets: 30 s each (scripts/fuzz.sh)"
bash scripts/fuzz.sh 30

echo "==> conformance suite size"
cargo test -q -p checkpoint-conformance --test integration every_clause_is_registered_once -- --nocapture 2>&1 \
  | grep -E '^conformance suite: [0-9]+ clauses$'
