# scripts/lib/cross.sh - the aarch64 stage of scripts/test.sh: installs Debian's cross
# toolchain, qemu-user and the arm64 -dev packages (multiarch), cross-builds the agent, the C
# client's tests, every unit test and the host programs (for the arm64 packages,
# scripts/lib/packages.sh) with boards/toolchains/aarch64-linux-gnu.cmake, runs the unit tests
# under qemu-aarch64 and checks that the agent is an aarch64 program.
# Source it after common.sh; it defines functions and changes nothing else.
# shellcheck shell=bash

EM_CROSS_TOOLCHAIN=boards/toolchains/aarch64-linux-gnu.cmake

# What the cross build needs: the toolchain and qemu for this machine, and the arm64 -dev
# package of every library CMake looks for when it configures the whole tree (the host/ ones,
# sqlite3 and libmicrohttpd, included: host/lib and host/aggregator have unit tests too).
EM_CROSS_PACKAGES=(
  gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user file
  libcmocka-dev:arm64 libuv1-dev:arm64 libmosquitto-dev:arm64
  libsystemd-dev:arm64 libsqlite3-dev:arm64 libmicrohttpd-dev:arm64
  libsnappy-dev:arm64 libcurl4-openssl-dev:arm64 libdw-dev:arm64
)

# Unit tests that cannot work under qemu-user, by name, each with the reason. Excluded from
# the aarch64 run only; both native suites still run them.
EM_CROSS_SKIP=()

# Adds arm64 to dpkg's architectures (and refreshes apt's lists when that is new), then
# installs the packages from EM_CROSS_PACKAGES that are not installed yet. Never removes a
# package: apt-get aborts instead (--no-remove).
em_cross_install_deps() {
  local sudo=() missing=() pkg update=0
  if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
  fi
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    em_log "adding the arm64 architecture to dpkg"
    "${sudo[@]}" dpkg --add-architecture arm64
    update=1
  fi
  for pkg in "${EM_CROSS_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$pkg")
    fi
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    return 0
  fi
  if [ "${#sudo[@]}" -ne 0 ] && ! command -v sudo >/dev/null; then
    echo "error: missing packages (${missing[*]}) and not root; install them with apt-get" >&2
    return 1
  fi
  local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
  if [ "$update" -eq 1 ]; then
    "${apt[@]}" update -qq
  fi
  em_log "installing Debian packages: ${missing[*]}"
  if ! "${apt[@]}" install -y -qq --no-install-recommends --no-remove "${missing[@]}" \
    >/dev/null; then
    # Lists older than the mirror name files it no longer has: refresh once and retry.
    em_log "apt-get install failed; refreshing the package lists and retrying"
    "${apt[@]}" update -qq
    "${apt[@]}" install -y -qq --no-install-recommends --no-remove "${missing[@]}" >/dev/null
  fi
}

# em_cross_test DIR: configure DIR with the aarch64 toolchain (prefix /usr, as the packages
# install it), build the agent, the host programs and the programs of every unit test, run
# those tests through qemu-aarch64 (the toolchain's CMAKE_CROSSCOMPILING_EMULATOR) and check
# the agent's ELF header. Returns non-zero when any step fails.
em_cross_test() {
  local dir=$1
  cmake -S . -B "$dir" -G Ninja --toolchain "$EM_CROSS_TOOLCHAIN" -DEDGEMON_WERROR=ON \
    -DCMAKE_INSTALL_PREFIX=/usr >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log" >&2
    return 1
  }

  # ctest knows which unit tests run an aarch64 program (their command starts with the
  # emulator) and which run something of this machine (the Python client's pytest suite,
  # which the native suites run already). Each aarch64 test's program is the target to build.
  local listing
  listing=$(ctest --test-dir "$dir" -L unit --show-only=json-v1) || return 1
  local -a programs=() native=()
  local kind name
  while read -r kind name; do
    case $kind in
      program) programs+=("$name") ;;
      native) native+=("$name") ;;
    esac
  done < <(python3 -c '
import json, os, sys
for test in json.load(sys.stdin)["tests"]:
    command = test.get("command") or []
    if command and os.path.basename(command[0]) == "qemu-aarch64":
        print("program", os.path.basename(command[-1]))
    else:
        print("native", test["name"])
' <<<"$listing")
  if [ "${#programs[@]}" -eq 0 ]; then
    echo "$dir: ctest lists no aarch64 unit tests" >&2
    return 1
  fi
  if [ "${#native[@]}" -ne 0 ]; then
    em_log "$dir: not aarch64 programs, run by the native suites only: ${native[*]}"
  fi

  cmake --build "$dir" -j "$(nproc)" --target edgemon-agent edgemon-cli edgemon-aggregator \
    edgemon-sim "${programs[@]}" || return 1

  local agent="$dir/firmware/agent/edgemon-agent" description
  description=$(file -b "$agent") || return 1
  case $description in
    ELF\ 64-bit*ARM\ aarch64*) em_log "$dir: edgemon-agent: $description" ;;
    *)
      echo "$dir: edgemon-agent is not an aarch64 ELF program: $description" >&2
      return 1
      ;;
  esac
  qemu-aarch64 "$agent" --version || {
    echo "$dir: edgemon-agent --version failed under qemu-aarch64" >&2
    return 1
  }

  local exclude
  exclude=$(printf '%s\n' "${native[@]}" "${EM_CROSS_SKIP[@]}" | sed '/^$/d;s/.*/^&$/' |
    paste -sd '|')
  local -a filter=()
  if [ -n "$exclude" ]; then
    filter=(-E "$exclude")
  fi
  ctest --test-dir "$dir" -L unit "${filter[@]}" --output-on-failure -j "$(nproc)"
}
