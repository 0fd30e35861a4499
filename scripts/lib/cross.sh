# scripts/lib/cross.sh - the aarch64 stage of scripts/test.sh: installs Debian's cross
# toolchain, qemu-user and mmdebstrap, makes (once, cached) a Debian 11 "bullseye" arm64 sysroot
# with the -dev packages of every library the tree links, cross-builds the agent, the C client's
# tests, every unit test and the host programs (for the arm64 packages,
# scripts/lib/packages.sh) against it with boards/toolchains/aarch64-linux-gnu.cmake, runs the
# unit tests under qemu-aarch64 on the sysroot's own glibc 2.31 and libraries, and checks that
# the agent is an aarch64 program. docs/PACKAGING.md says why a sysroot of the oldest baseline.
# Source it after common.sh; it defines functions and changes nothing else.
# shellcheck shell=bash

EM_CROSS_TOOLCHAIN=boards/toolchains/aarch64-linux-gnu.cmake

# What the cross build needs on this machine: the cross toolchain, qemu-user to run the
# programs and mmdebstrap to make the sysroot. No arm64 package of this machine's release: the
# libraries come from the sysroot only.
EM_CROSS_PACKAGES=(gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user file mmdebstrap)

# The sysroot: the oldest release the arm64 packages support (glibc 2.31, as Ubuntu 20.04 and
# JetPack 5), and in it libc6-dev and the -dev package of every library CMake looks for when it
# configures the whole tree (the host/ ones, sqlite3 and libmicrohttpd, included: host/lib and
# host/aggregator have unit tests too), with what they depend on.
EM_CROSS_SUITE=bullseye
EM_CROSS_SYSROOT_PACKAGES=(libc6-dev libcmocka-dev libuv1-dev libmosquitto-dev libsqlite3-dev
  libmicrohttpd-dev libsnappy-dev libcurl4-openssl-dev libdw-dev)
EM_CROSS_CACHE=${EM_CROSS_CACHE:-/var/cache/edgemon-test}

# Unit tests that cannot work under qemu-user or on the sysroot's libraries, by name, each with
# the reason. Excluded from the aarch64 run only; both native suites still run them.
# test_agg_store: it makes the stores of older aggregators to migrate with ALTER TABLE ... DROP
# COLUMN, which Debian 11's SQLite (3.34) lacks (3.35). The store's own statements run on 3.34
# in test_agg_flights, test_agg_profiles, test_agg_rollup and test_agg_cohort.
# test_cli_torture: it runs edgemon-cli-alloc as a child process, which the kernel would start
# without qemu-aarch64 and the sysroot. test_cli_alloc runs the same readers in process.
EM_CROSS_SKIP=(test_agg_store test_cli_torture)

# Installs the packages from EM_CROSS_PACKAGES that are not installed yet. Never removes a
# package: apt-get aborts instead (--no-remove).
em_cross_install_deps() {
  local sudo=() missing=()
  if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
  fi
  mapfile -t missing < <(em_missing_packages "${EM_CROSS_PACKAGES[@]}")
  if [ "${#missing[@]}" -eq 0 ]; then
    return 0
  fi
  if [ "${#sudo[@]}" -ne 0 ] && ! command -v sudo >/dev/null; then
    echo "error: missing packages (${missing[*]}) and not root; install them with apt-get" >&2
    return 1
  fi
  local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
  em_log "installing Debian packages: ${missing[*]}"
  if ! "${apt[@]}" install -y -qq --no-install-recommends --no-remove "${missing[@]}" \
    >/dev/null; then
    # Lists older than the mirror name files it no longer has: refresh once and retry.
    em_log "apt-get install failed; refreshing the package lists and retrying"
    "${apt[@]}" update -qq
    "${apt[@]}" install -y -qq --no-install-recommends --no-remove "${missing[@]}" >/dev/null
  fi
}

# _em_cross_sources: prints this machine's apt sources for EM_CROSS_SUITE: its own release's
# suites renamed (bookworm -> bullseye, bookworm-updates -> bullseye-updates), its security
# suites left out: a sysroot needs headers, link libraries and symbols files, which security
# updates keep as they are, and the archive mirrored here serves no bullseye-security pool.
_em_cross_sources() {
  local sources=/etc/apt/sources.list.d/debian.sources codename
  codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)
  if [ -z "$codename" ]; then
    echo "cross: /etc/os-release names no VERSION_CODENAME" >&2
    return 1
  fi
  if [ -f "$sources" ]; then
    # deb822: one stanza per paragraph; those whose Suites name a security suite go.
    awk 'BEGIN { RS = ""; ORS = "\n\n" } !/(^|\n)Suites:[^\n]*-security/' "$sources"
  elif [ -f /etc/apt/sources.list ]; then
    grep -E '^deb ' /etc/apt/sources.list | grep -v -- '-security'
  else
    echo "cross: no apt sources in /etc/apt" >&2
    return 1
  fi | sed "s/\\<$codename\\>/$EM_CROSS_SUITE/g"
}

# em_cross_sysroot: prints the directory of the cached arm64 sysroot of EM_CROSS_SUITE (made
# first when this key has none): the packages of EM_CROSS_SYSROOT_PACKAGES and what they
# depend on, extracted (mmdebstrap --variant=extract: nothing of theirs runs, so no emulation),
# with every absolute link made relative (it points inside the sysroot), libstdc++.so (the
# link libstdc++-10-dev would add, for the toolchain to find it first), an empty ld.so.cache, a
# dpkg status file naming each package and version (var/lib/dpkg/status) and the symbols and
# shlibs files of all of them in DEBIAN/ (where dpkg-shlibdeps reads a library's when it finds
# the library below that directory: packaging/deb.cmake). The key hashes the suite, the
# package list, the sources and this recipe, so a change to any of them makes a new sysroot.
em_cross_sysroot() {
  local sources recipe
  sources=$(_em_cross_sources) || return 1
  recipe=$(declare -f _em_cross_sources em_cross_sysroot)
  local key
  key=$(printf '%s\n' "$EM_CROSS_SUITE" "${EM_CROSS_SYSROOT_PACKAGES[*]}" "$sources" "$recipe" |
    sha256sum | cut -c1-16)
  local dir=$EM_CROSS_CACHE/sysroot-$EM_CROSS_SUITE-arm64-$key
  if [ -f "$dir/DEBIAN/symbols" ]; then
    echo "$dir"
    return 0
  fi
  em_log "cross: making the $EM_CROSS_SUITE arm64 sysroot (mmdebstrap, once per package" \
    "list) in $dir" >&2
  mkdir -p "$EM_CROSS_CACHE" || return 1
  local tmp
  tmp=$(mktemp -d "$dir.tmp.XXXXXX") || return 1
  printf '%s\n' "$sources" >"$tmp/sources"
  local include
  include=$(
    IFS=,
    echo "${EM_CROSS_SYSROOT_PACKAGES[*]}"
  )
  local r=$tmp/root
  if ! mmdebstrap --variant=extract --arch=arm64 --skip=cleanup/apt/cache \
    --include="$include" "$EM_CROSS_SUITE" "$r" "$tmp/sources" >"$tmp/mmdebstrap.log" 2>&1; then
    tail -20 "$tmp/mmdebstrap.log" >&2
    rm -rf "$tmp"
    return 1
  fi
  mkdir -p "$r/DEBIAN" "$r/var/lib/dpkg" || return 1
  local deb ctl=$tmp/control
  : >"$r/var/lib/dpkg/status"
  for deb in "$r"/var/cache/apt/archives/*.deb; do
    rm -rf "$ctl" && mkdir "$ctl" && dpkg-deb -e "$deb" "$ctl" || return 1
    { sed '/^$/d' "$ctl/control" && echo "Status: install ok unpacked" && echo; } \
      >>"$r/var/lib/dpkg/status"
    [ ! -f "$ctl/symbols" ] || cat "$ctl/symbols" >>"$r/DEBIAN/symbols"
    [ ! -f "$ctl/shlibs" ] || cat "$ctl/shlibs" >>"$r/DEBIAN/shlibs"
  done
  rm -rf "$ctl" "${r:?}"/var/cache/apt/archives/*.deb "${r:?}/dev"
  # g++ links -lstdc++: the sysroot's (gcc 10's, as on the board), found before gcc 12's.
  ln -sfn libstdc++.so.6 "$r/usr/lib/aarch64-linux-gnu/libstdc++.so" || return 1
  # Under qemu-aarch64 -L, the loader reads this machine's /etc/ld.so.cache where the sysroot
  # has none, and its paths (/lib/aarch64-linux-gnu/libzstd.so.1, where bullseye has
  # /usr/lib/...) lead out of the sysroot. An empty cache is no cache: the loader searches its
  # default directories, inside the sysroot.
  mkdir -p "$r/etc" && : >"$r/etc/ld.so.cache" || return 1
  # An absolute link (libz.so -> /lib/aarch64-linux-gnu/libz.so.1) names this machine's file.
  local link target
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$r$target")" "$link" || return 1
  done < <(find "$r" -type l -lname '/*' -print0)
  if [ ! -f "$r/usr/include/stdio.h" ] || [ ! -s "$r/DEBIAN/symbols" ]; then
    echo "cross: $tmp/root has no libc6-dev or no symbols files" >&2
    return 1
  fi
  # Another run may have made the same key meanwhile: either is the same sysroot.
  mv -T "$r" "$dir" 2>/dev/null || [ -f "$dir/DEBIAN/symbols" ] || return 1
  rm -rf "$tmp"
  echo "$dir"
}

# em_cross_test DIR: configure DIR with the aarch64 toolchain (prefix /usr, as the packages
# install it), build the agent, the host programs and the programs of every unit test, run
# those tests through qemu-aarch64 (the toolchain's CMAKE_CROSSCOMPILING_EMULATOR) and check
# the agent's ELF header. Returns non-zero when any step fails.
em_cross_test() {
  local dir=$1 sysroot
  sysroot=$(em_cross_sysroot) || return 1
  # The toolchain writes the sysroot into the cached compile and link flags: a tree configured
  # for another sysroot (another package list) is configured anew.
  if [ -f "$dir/CMakeCache.txt" ] &&
    ! grep -qxF "EM_CROSS_SYSROOT:PATH=$sysroot" "$dir/CMakeCache.txt"; then
    em_log "$dir: configured for another sysroot; configuring it anew"
    rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
  fi
  cmake -S . -B "$dir" -G Ninja --toolchain "$EM_CROSS_TOOLCHAIN" -DEDGEMON_WERROR=ON \
    -DEM_CROSS_SYSROOT="$sysroot" -DCMAKE_INSTALL_PREFIX=/usr >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log" >&2
    return 1
  }

  # ctest knows which unit tests run an aarch64 program (their command starts with the
  # emulator) and which run something of this machine (the Python client's pytest suite,
  # which the native suites run already). Each aarch64 test's program is the target to build.
  local listing
  listing=$(ctest --test-dir "$dir" -L unit --show-only=json-v1) || return 1
  # The emulator's command (the toolchain's, with the sysroot) runs the agent below as well.
  local -a programs=() native=() emulator=()
  local kind name
  while read -r kind name; do
    case $kind in
      program) programs+=("$name") ;;
      native) native+=("$name") ;;
      emulator) read -r -a emulator <<<"$name" ;;
    esac
  done < <(python3 -c '
import json, os, sys
build = os.path.realpath(sys.argv[1]) + os.sep
emulator = []
for test in json.load(sys.stdin)["tests"]:
    command = test.get("command") or []
    # The program is the first word in the build tree; the emulator and its options come
    # before it, the test'"'"'s own arguments (test_symbols --no-libdw) after it.
    at = [i for i, word in enumerate(command) if os.path.realpath(word).startswith(build)]
    if command and os.path.basename(command[0]) == "qemu-aarch64" and at:
        print("program", os.path.basename(command[at[0]]))
        emulator = command[:at[0]]
    else:
        print("native", test["name"])
print("emulator", " ".join(emulator))
' "$dir" <<<"$listing")
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
  "${emulator[@]}" "$agent" --version || {
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
