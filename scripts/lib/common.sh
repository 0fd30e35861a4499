# scripts/lib/common.sh - shared by the README's commands (scripts/test.sh, scripts/demo.sh):
# the Debian 12 packages the project needs, installed with apt-get only when missing, and
# the configure-and-build step. Source it; it defines functions and changes nothing else.

# Everything the build, the tests and the demo use, by Debian package name.
EM_PACKAGES=(
  cmake ninja-build pkg-config gcc g++ clang libclang-rt-14-dev
  libcmocka-dev libuv1-dev libmosquitto-dev mosquitto
  libsqlite3-dev libmicrohttpd-dev sqlite3 prometheus systemd valgrind openssl
  libsnappy-dev libcurl4-openssl-dev libdw-dev
  python3 python3-cbor2 python3-pytest python3-paho-mqtt python3-prometheus-client
  python3-exceptiongroup python3-tomli
  dpkg-dev lintian
)

em_log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# em_missing_packages PKG...: prints, one a line, the packages of the list that dpkg does not
# have installed (dpkg-query only: fast, no root).
em_missing_packages() {
  local pkg
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      printf '%s\n' "$pkg"
    fi
  done
}

# Installs the packages from EM_PACKAGES that are not installed yet. Fast (dpkg-query only)
# when everything is there; otherwise needs root (or sudo) and Debian's apt-get.
em_install_deps() {
  local missing=()
  mapfile -t missing < <(em_missing_packages "${EM_PACKAGES[@]}")
  if [ "${#missing[@]}" -eq 0 ]; then
    return 0
  fi
  em_log "installing Debian packages: ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "error: missing packages (${missing[*]}) and not root; install them with apt-get" >&2
      return 1
    fi
    sudo=(sudo)
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
}

# The dashboard's browser library (host/web/package-lock.json) into host/web/node_modules, which
# the build embeds into edgemon-aggregator. npm ci runs only when the lock file is newer than
# what was installed; Debian's npm is installed first when the machine has none.
em_install_web() {
  local stamp=host/web/node_modules/.package-lock.json
  if [ -f "$stamp" ] && [ "$stamp" -nt host/web/package-lock.json ]; then
    return 0
  fi
  if ! command -v npm >/dev/null; then
    local EM_PACKAGES=(npm)
    em_install_deps || return 1
  fi
  em_log "installing the dashboard's library (npm ci, host/web)"
  npm ci --prefix host/web --no-audit --no-fund --loglevel=error >/dev/null
}

# em_build DIR [cmake options...]: configure (once) and build the tree into DIR.
em_build() {
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log" >&2
    return 1
  }
  cmake --build "$dir" -j "$(nproc)"
}
