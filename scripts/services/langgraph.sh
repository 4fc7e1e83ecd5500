# shellcheck shell=bash
# Python LangGraph, pinned (langgraph.requirements.txt), for the tests that check our stores
# against the real library: the PostgreSQL interoperability tests and the reading of
# LangGraph's SQLite files. Sourced by scripts/test.sh (after scripts/lib.sh). Installs the
# virtualenv once (again only when the requirements change) and exports
# CHECKPOINT_TEST_LANGGRAPH_PYTHON.

_checkpoint_lg_venv="${CHECKPOINT_LANGGRAPH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/checkpoint-rs/venv-langgraph}"
if checkpoint_venv "$_checkpoint_lg_venv" "$(dirname "${BASH_SOURCE[0]}")/langgraph.requirements.txt"; then
  export CHECKPOINT_TEST_LANGGRAPH_PYTHON="$_checkpoint_lg_venv/bin/python"
  echo "langgraph: $("$CHECKPOINT_TEST_LANGGRAPH_PYTHON" -c 'import importlib.metadata as m; print("langgraph", m.version("langgraph"))')"
else
  checkpoint_service_unavailable langgraph "the Python LangGraph environment could not be installed"
fi
