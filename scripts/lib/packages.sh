# scripts/lib/packages.sh - the package stage of scripts/test.sh: makes the Debian packages of
# the native build (edgemon-agent, edgemon-host, python3-edgemon) and of the aarch64 cross
# build (edgemon-agent, edgemon-host for arm64) with cpack from those trees, without building
# anything again (packaging/deb.cmake, docs/PACKAGING.md); runs lintian on all of them; then
# installs the native ones on this machine with dpkg -i, runs what they installed, verifies
# the installed units and purges them, checking that nothing is left but the edgemon user,
# which policy keeps (the stage deletes it afterwards when it made it, and puts the sysctl
# value back, so the machine ends as it began). It owns nothing outside the two build trees'
# debs/ folders while it is not running. Source it after common.sh; it defines functions and
# changes nothing else.
# shellcheck shell=bash

# Removal order: nothing depends on the others, the Python client goes first by habit.
EM_DEB_PACKAGES=(python3-edgemon edgemon-host edgemon-agent)
EM_DEB_UNITS=(/usr/lib/systemd/system/edgemon-agent.service
  /usr/lib/systemd/system/edgemon-aggregator.service)
# What purge must leave absent, besides every file the packages listed.
EM_DEB_GONE=(/etc/edgemon /usr/share/edgemon /usr/share/doc/edgemon /usr/share/doc/edgemon-agent
  /usr/share/doc/edgemon-host /usr/share/doc/python3-edgemon
  /usr/lib/python3/dist-packages/edgemon /var/lib/edgemon /var/lib/edgemon-aggregator
  /etc/systemd/system/multi-user.target.wants/edgemon-agent.service
  /var/lib/systemd/deb-systemd-helper-enabled/edgemon-agent.service
  /var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/edgemon-agent.service
  /var/lib/systemd/deb-systemd-helper-masked/edgemon-agent.service
  /var/lib/systemd/deb-systemd-helper-masked/edgemon-aggregator.service)

# The newest symbol version an arm64 program may need, per versioned library: those of Debian
# 11, the oldest baseline (glibc 2.31, as Ubuntu 20.04 and JetPack 5; gcc 10's libstdc++ and
# libgcc_s). A program that needs more does not start there.
EM_DEB_ARM64_MAX_VERSIONS=(GLIBC_2.31 GLIBCXX_3.4.28 CXXABI_1.3.12 GCC_7.0.0)

_em_deb_fail() {
  echo "packages: $*" >&2
  return 1
}

# _em_deb_installed PACKAGE: true when dpkg knows PACKAGE in any state but not-installed
# (installed, half-configured, config-files left...).
_em_deb_installed() {
  local status
  status=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) || return 1
  [ -n "$status" ] && [[ $status != *" not-installed" ]]
}

# _em_deb_purge: purges whichever of the packages dpkg knows, e.g. after an aborted run.
_em_deb_purge() {
  local pkg present=()
  for pkg in "${EM_DEB_PACKAGES[@]}"; do
    if _em_deb_installed "$pkg"; then
      present+=("$pkg")
    fi
  done
  if [ "${#present[@]}" -ne 0 ]; then
    DEBIAN_FRONTEND=noninteractive dpkg --purge "${present[@]}"
  fi
}

# _em_deb_check_versions DEB ROOT: every ELF file below ROOT (DEB unpacked) needs no symbol
# version above EM_DEB_ARM64_MAX_VERSIONS; fails naming each symbol that does.
_em_deb_check_versions() {
  local deb=$1 root=$2 elf max bad=() checked=0
  while IFS= read -r -d '' elf; do
    [ "$(head -c4 "$elf" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] || continue
    checked=$((checked + 1))
    for max in "${EM_DEB_ARM64_MAX_VERSIONS[@]}"; do
      local prefix=${max%_*}_ sym
      while read -r sym; do
        local version=${sym#*@}
        if [ "$(printf '%s\n' "${version#"$prefix"}" "${max#"$prefix"}" | sort -V | tail -1)" != \
          "${max#"$prefix"}" ]; then
          bad+=("${elf#"$root"/}: $sym (above $max)")
        fi
      done < <(readelf --dyn-syms -W "$elf" | awk -v p="@$prefix" '
        $7 == "UND" && index($8, p) { sub(/@@/, "@", $8); print $8 }' | sort -u)
    done
  done < <(find "$root" -type f -print0)
  [ "$checked" -gt 0 ] || _em_deb_fail "$deb: no ELF file to check" || return 1
  [ "${#bad[@]}" -eq 0 ] || _em_deb_fail "$deb: needs more than Debian 11 has:" \
    "$(printf '\n  %s' "${bad[@]}")" || return 1
  em_log "packages: $(basename "$deb"): $checked ELF files, no symbol version above" \
    "${EM_DEB_ARM64_MAX_VERSIONS[*]}"
}

# The table of what the arm64 packages and python3-edgemon (all) may depend on: each package
# with its version in Debian 11, Debian 12, Ubuntu 20.04 and Ubuntu 22.04, read from the
# section of docs/PACKAGING.md below.
EM_DEB_BASELINES_DOC=docs/PACKAGING.md
EM_DEB_BASELINES_HEADING='### Depends of the arm64 packages'

# _em_deb_check_depends DEB: each package DEB's Depends names has a row in the baselines table,
# and every one of the row's four versions satisfies the relation; fails naming each that is
# missing or not satisfied.
_em_deb_check_depends() {
  local deb=$1 table dep bad=() checked=0
  table=$(awk -v h="$EM_DEB_BASELINES_HEADING" '$0 == h { on = 1; next }
    on && /^#/ { exit } on && /^\| `/' "$EM_DEB_BASELINES_DOC")
  [ -n "$table" ] ||
    _em_deb_fail "$EM_DEB_BASELINES_DOC: no table under '$EM_DEB_BASELINES_HEADING'" || return 1
  local -A ops=(['>=']=ge ['>>']=gt ['=']=eq ['<=']=le ['<<']=lt)
  while read -r dep; do
    [ -n "$dep" ] || continue
    if [[ ! $dep =~ ^([a-z0-9][a-z0-9.+-]*)(:any)?(\ \((>=|>>|=|<=|<<)\ ([^\)]+)\))?$ ]]; then
      bad+=("$dep: not one package (an alternative or an architecture qualifier)")
      continue
    fi
    local name=${BASH_REMATCH[1]} rel=${BASH_REMATCH[4]} want=${BASH_REMATCH[5]} row
    row=$(grep -F "| \`$name\` |" <<<"$table")
    if [ -z "$row" ]; then
      bad+=("$name: no row in the table of $EM_DEB_BASELINES_DOC")
      continue
    fi
    checked=$((checked + 1))
    [ -n "$rel" ] || continue
    local -a have
    # Cells 3 to 6: the four versions (a note after a space, such as the dagger, is dropped).
    mapfile -t have < <(cut -d'|' -f3-6 <<<"$row" | tr '|' '\n' | awk '{ print $1 }')
    [ "${#have[@]}" -eq 4 ] || { bad+=("$name: its row has no four versions"); continue; }
    local v
    for v in "${have[@]}"; do
      dpkg --compare-versions "$v" "${ops[$rel]}" "$want" ||
        bad+=("$name ($rel $want): not satisfied by $v")
    done
  done < <(dpkg-deb -f "$deb" Depends | sed 's/, /\n/g')
  [ "${#bad[@]}" -eq 0 ] || _em_deb_fail "$deb: Depends not satisfied by all four baselines:" \
    "$(printf '\n  %s' "${bad[@]}")" || return 1
  em_log "packages: $(basename "$deb"): $checked dependencies, each in Debian 11, Debian 12," \
    "Ubuntu 20.04 and Ubuntu 22.04 at a version that satisfies it"
}

# _em_deb_build DIR ARCH COMPONENTS...: runs cpack in the built tree DIR and checks that it wrote
# one package per component, labelled ARCH (python3-edgemon: all), with the programs of ARCH
# inside and Depends from dpkg-shlibdeps.
_em_deb_build() {
  local dir=$1 arch=$2
  shift 2
  local prefix
  prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$dir/CMakeCache.txt")
  if [ "$prefix" != /usr ]; then
    _em_deb_fail "$dir is configured for prefix '$prefix', not /usr (-DCMAKE_INSTALL_PREFIX=/usr)"
    return 1
  fi
  rm -rf "$dir/debs"
  if ! cpack --config "$dir/CPackConfig.cmake" >"$dir/cpack.log" 2>&1; then
    cat "$dir/cpack.log" >&2
    _em_deb_fail "cpack failed in $dir"
    return 1
  fi
  local pkg deb debs want elf
  for pkg in "$@"; do
    want=$arch
    [ "$pkg" = python3-edgemon ] && want=all
    debs=("$dir"/debs/"${pkg}"_*_"$want".deb)
    deb=${debs[0]}
    if [ "${#debs[@]}" -ne 1 ] || [ ! -f "$deb" ]; then
      _em_deb_fail "$dir: no single ${pkg}_*_$want.deb"
      return 1
    fi
    if [ "$want" = all ]; then
      _em_deb_check_depends "$deb" || return 1
      continue
    fi
    if [[ $(dpkg-deb -f "$deb" Depends) != *"libc6 (>="* ]]; then
      _em_deb_fail "$deb: Depends has no versioned libc6, dpkg-shlibdeps did not run"
      return 1
    fi
    if [ "$pkg" = edgemon-agent ] &&
      [[ ! ", $(dpkg-deb -f "$deb" Depends)," =~ ,\ libdw1[\ ,] ]]; then
      _em_deb_fail "$deb: Depends does not name libdw1 (the agent opens libdw.so.1 with dlopen," \
        "which dpkg-shlibdeps cannot see: packaging/deb.cmake names it)"
      return 1
    fi
    if [ "$pkg" = edgemon-agent ] &&
      [[ ", $(dpkg-deb -f "$deb" Depends)," =~ ,\ libsystemd0[\ ,] ]]; then
      _em_deb_fail "$deb: Depends names libsystemd0: the agent links libsystemd again (it speaks" \
        "the notify protocol itself: firmware/agent/service.c)"
      return 1
    fi
    rm -rf "$dir/debs/unpacked"
    dpkg-deb -x "$deb" "$dir/debs/unpacked" || return 1
    if [ "$arch" = arm64 ]; then
      _em_deb_check_versions "$deb" "$dir/debs/unpacked" || return 1
      _em_deb_check_depends "$deb" || return 1
    fi
    for elf in "$dir"/debs/unpacked/usr/bin/*; do
      case "$arch:$(file -b "$elf")" in
        arm64:ELF\ 64-bit*ARM\ aarch64*,\ stripped | amd64:ELF\ 64-bit*x86-64*,\ stripped) ;;
        *)
          _em_deb_fail "$deb: $(basename "$elf") is not a stripped $arch program"
          return 1
          ;;
      esac
    done
    rm -rf "$dir/debs/unpacked"
  done
}

# _em_deb_check_installed DIR: installs DIR's packages and checks what they did.
_em_deb_check_installed() {
  local dir=$1 out
  out=$(DEBIAN_FRONTEND=noninteractive dpkg -i "$dir"/debs/*.deb 2>&1) || {
    em_log "packages: dpkg -i left dependencies missing; apt-get -f install"
    local fixed
    fixed=$(DEBIAN_FRONTEND=noninteractive apt-get -f install -y -qq 2>&1) ||
      _em_deb_fail "dpkg -i then apt-get -f install failed: $out $fixed" || return 1
    out+=$'\n'$fixed
  }
  printf '%s\n' "$out" | grep '^edgemon' >&2
  local pkg
  for pkg in "${EM_DEB_PACKAGES[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$pkg")" = "install ok installed" ] ||
      _em_deb_fail "$pkg is not installed: $out" || return 1
  done

  # postinst: the user, the sysctl, enabled but started only on a valid config, and said so.
  getent passwd edgemon >/dev/null || _em_deb_fail "postinst did not create the edgemon user" ||
    return 1
  if [[ $out != *"edgemon-agent: could not apply"* ]]; then
    [ "$(cat /proc/sys/net/unix/max_dgram_qlen)" = 512 ] ||
      _em_deb_fail "postinst did not apply 60-edgemon.conf" || return 1
  fi
  [ -L /etc/systemd/system/multi-user.target.wants/edgemon-agent.service ] ||
    _em_deb_fail "edgemon-agent.service is not enabled" || return 1
  [ ! -e /etc/systemd/system/multi-user.target.wants/edgemon-aggregator.service ] ||
    _em_deb_fail "edgemon-aggregator.service is enabled" || return 1
  [[ $out == *"edgemon-agent: enabled, not started"* || $out == *"edgemon-agent: /etc/edgemon"* ||
    $out == *"edgemon-agent: edgemon-agent.service is enabled but not started"* ]] ||
    _em_deb_fail "postinst did not say whether it started the agent: $out" || return 1
  [[ $(dpkg-query -W -f='${Conffiles}' edgemon-agent) == *" /etc/edgemon/edgemon-agent.ini "* ]] ||
    _em_deb_fail "/etc/edgemon/edgemon-agent.ini is not a conffile" || return 1
  [ -d /usr/lib/python3/dist-packages/edgemon/__pycache__ ] ||
    _em_deb_fail "postinst did not byte-compile the Python client" || return 1

  # The installed programs, from the installed paths.
  /usr/bin/edgemon-agent --config /etc/edgemon/edgemon-agent.ini --check ||
    _em_deb_fail "edgemon-agent --check refuses the shipped config" || return 1
  local detected
  detected=$(/usr/bin/edgemon-agent --detect) || _em_deb_fail "edgemon-agent --detect failed" ||
    return 1
  [[ $detected == *$'\nprofiles: /usr/share/edgemon/boards\n'* ]] ||
    _em_deb_fail "edgemon-agent --detect does not read /usr/share/edgemon/boards" || return 1
  /usr/bin/edgemon-cli --help >/dev/null || _em_deb_fail "edgemon-cli --help failed" || return 1
  /usr/bin/edgemon-sim --help >/dev/null || _em_deb_fail "edgemon-sim --help failed" || return 1
  /usr/bin/edgemon-aggregator --config /etc/edgemon/edgemon-aggregator.ini --check >/dev/null ||
    _em_deb_fail "edgemon-aggregator --check refuses the shipped config" || return 1
  local module
  module=$(cd / && PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c \
    'import edgemon; print(edgemon.__file__)') || _em_deb_fail "import edgemon failed" || return 1
  [ "$module" = /usr/lib/python3/dist-packages/edgemon/__init__.py ] ||
    _em_deb_fail "import edgemon found $module" || return 1
  local verify
  verify=$(systemd-analyze verify "${EM_DEB_UNITS[@]}" 2>&1) && [ -z "$verify" ] ||
    _em_deb_fail "systemd-analyze verify: $verify" || return 1

  # What the services would have written, for purge to delete.
  mkdir -p /var/lib/edgemon /var/lib/edgemon-aggregator || return 1
  : >/var/lib/edgemon/spool && : >/var/lib/edgemon-aggregator/edgemon.db
}

# _em_deb_check_purged FILES...: purges the packages; none of FILES nor EM_DEB_GONE may remain.
_em_deb_check_purged() {
  _em_deb_purge >/dev/null || _em_deb_fail "dpkg --purge failed" || return 1
  local pkg path left=()
  for pkg in "${EM_DEB_PACKAGES[@]}"; do
    ! _em_deb_installed "$pkg" || _em_deb_fail "$pkg still known to dpkg after purge" || return 1
  done
  for path in "$@" "${EM_DEB_GONE[@]}"; do
    if [ -e "$path" ] || [ -L "$path" ]; then
      left+=("$path")
    fi
  done
  [ "${#left[@]}" -eq 0 ] || _em_deb_fail "left after purge: ${left[*]}"
}

# em_packages_test NATIVE CROSS: the stage, on two trees that are built already (NATIVE with
# the whole tree, CROSS with at least the agent and the host programs for aarch64), both
# configured with -DCMAKE_INSTALL_PREFIX=/usr. Needs root (dpkg -i). Returns non-zero when any
# step fails; the packages are purged whatever happened.
em_packages_test() {
  local native=$1 cross=$2 start=$SECONDS
  local arch
  arch=$(dpkg --print-architecture)
  _em_deb_build "$native" "$arch" edgemon-agent edgemon-host python3-edgemon || return 1
  _em_deb_build "$cross" arm64 edgemon-agent edgemon-host || return 1
  em_log "packages: $(cd "$native/debs" && echo *.deb) $(cd "$cross/debs" && echo *.deb)"
  # lintian warns that it runs as root, which the stage must; its errors fail the stage.
  local lint lint_rc=0
  lint=$(lintian --fail-on error "$native"/debs/*.deb "$cross"/debs/*.deb 2>&1) || lint_rc=$?
  printf '%s\n' "$lint" | grep -v '^running with root privileges' >&2 || true
  [ "$lint_rc" -eq 0 ] || _em_deb_fail "lintian reports errors" || return 1

  # The edgemon user counts as this machine's own only when no package of a previous
  # (aborted) run was there to make it.
  local had_user=0 qlen rc=0 pkg
  getent passwd edgemon >/dev/null && had_user=1
  for pkg in "${EM_DEB_PACKAGES[@]}"; do
    if _em_deb_installed "$pkg"; then
      em_log "packages: purging $pkg, left by an earlier run"
      had_user=0
    fi
  done
  _em_deb_purge >/dev/null || _em_deb_fail "cannot purge a previous run's packages" || return 1
  qlen=$(cat /proc/sys/net/unix/max_dgram_qlen)
  local paranoid
  paranoid=$(cat /proc/sys/kernel/perf_event_paranoid)
  local -a files=()
  if _em_deb_check_installed "$native"; then
    mapfile -t files < <(dpkg -L "${EM_DEB_PACKAGES[@]}" | while read -r path; do
      [ -d "$path" ] || echo "$path"
    done)
  else
    rc=1
  fi
  _em_deb_check_purged "${files[@]}" || rc=1
  if [ "$had_user" -eq 0 ] && getent passwd edgemon >/dev/null; then
    userdel edgemon 2>/dev/null || true
    groupdel edgemon 2>/dev/null || true
  fi
  echo "$qlen" >/proc/sys/net/unix/max_dgram_qlen 2>/dev/null || true
  echo "$paranoid" >/proc/sys/kernel/perf_event_paranoid 2>/dev/null || true
  if [ "$rc" -eq 0 ]; then
    em_log "packages: built, lintian clean, installed, ran, verified and purged in" \
      "$((SECONDS - start)) s"
  fi
  return "$rc"
}
