# shellcheck shell=bash
# built.sh - sourced by soak.sh and chaos.sh: sets root (the repository) and build ($EM_BUILD,
# default build/normal, relative to root unless absolute), and defines em_need_built NAME BIN...,
# which exits 2 with "NAME: BIN is not built (...)" for the first BIN that is not executable.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${EM_BUILD:-build/normal}"
case "$build" in
  /*) ;;
  *) build="$root/$build" ;;
esac

em_need_built() {
  local name="$1" bin
  shift
  for bin in "$@"; do
    if [[ ! -x "$bin" ]]; then
      echo "$name: $bin is not built (set EM_BUILD to the build directory)" >&2
      exit 2
    fi
  done
}
