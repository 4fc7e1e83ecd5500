# shellcheck shell=bash
# Shared rules of the test scripts. Sourced by scripts/test.sh before the service scripts.

# Whether a server that cannot be provided fails the run instead of skipping its tests:
# CI=true|1 or CHECKPOINT_TEST_REQUIRE=1|true (case-insensitive). The Rust side applies the
# same rule (checkpoint_conformance::servers_required).
checkpoint_servers_required() {
  local ci="${CI:-}" req="${CHECKPOINT_TEST_REQUIRE:-}"
  case "${ci,,}" in true | 1) return 0 ;; esac
  case "${req,,}" in true | 1) return 0 ;; esac
  return 1
}

# checkpoint_service_unavailable NAME REASON: reports that a service could not be provided;
# returns 1 (fail the run) when servers are required, 0 (its tests skip) otherwise.
checkpoint_service_unavailable() {
  if checkpoint_servers_required; then
    echo "$1: REQUIRED (CI=true or CHECKPOINT_TEST_REQUIRE=1) but unavailable: $2" >&2
    return 1
  fi
  echo "$1: unavailable ($2); its tests will be skipped" >&2
  return 0
}

# checkpoint_venv DIR REQUIREMENTS_FILE: makes DIR a Python virtualenv with exactly the pinned
# requirements installed (idempotent: reinstalled only when the requirements file changed).
checkpoint_venv() {
  local venv=$1 reqs=$2 stamp="$1/.requirements"
  if [ -x "$venv/bin/python" ] && cmp -s "$reqs" "$stamp"; then
    return 0
  fi
  echo "venv: installing $(basename "$reqs") into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv" &&
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$reqs" &&
    cp "$reqs" "$stamp"
}

# checkpoint_wait SECONDS COMMAND...: runs COMMAND every 0.25 s until it succeeds (0) or
# SECONDS have passed (1).
checkpoint_wait() {
  local limit=$(($1 * 4)) tries=0
  shift
  until "$@"; do
    tries=$((tries + 1))
    [ "$tries" -ge "$limit" ] && return 1
    sleep 0.25
  done
}

# Commands the service scripts append to stop what they started; checkpoint_start_services
# runs them when the calling script exits.
cleanup_cmds=()
checkpoint_run_cleanup() { for c in "${cleanup_cmds[@]+"${cleanup_cmds[@]}"}"; do eval "$c" || true; done; }

# checkpoint_start_services [NAME...]: makes sure the servers the tests need are running, by
# sourcing scripts/services/NAME.sh for each NAME (every script there when none is given).
# Each one starts or installs its server idempotently, exports CHECKPOINT_TEST_<NAME>_URL
# and may append to cleanup_cmds, which run when the calling script exits.
checkpoint_start_services() {
  trap checkpoint_run_cleanup EXIT
  local dir service
  dir="$(dirname "${BASH_SOURCE[0]}")/services"
  if [ $# -eq 0 ]; then
    set -- "$dir"/*.sh
  else
    set -- "${@/#/$dir/}"
    set -- "${@/%/.sh}"
  fi
  for service in "$@"; do
    [ -e "$service" ] || continue
    echo "==> $service"
    # shellcheck source=/dev/null
    source "$service"
  done
}
