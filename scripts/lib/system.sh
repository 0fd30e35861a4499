# scripts/lib/system.sh - the booted-system stage of scripts/test.sh: minimal Debian systems
# (systemd, the distribution's kernel, mosquitto, python3, the packages' runtime libraries) made
# with mmdebstrap from the archive this machine's apt uses, cached outside the clone under
# /var/cache/edgemon-test/ keyed by everything that goes into them, and booted under qemu with
# systemd as PID 1 and no network device: Debian 12 amd64 (this machine's own baseline) and
# Debian 11 arm64 (JetPack 5's glibc 2.31 and kernel 5.10, on an emulated Arm board with a PMU).
# A unit inside mounts a virtio-9p share holding this tree's packages and tests/system/inside.sh,
# runs it and powers the system off; what it wrote comes back through the share and
# tests/system/test_booted.py judges it (README's steps, the service as deployed).
# Source it after common.sh; it defines functions and changes nothing else.
# shellcheck shell=bash

EM_SYSTEM_CACHE=${EM_SYSTEM_CACHE:-/var/cache/edgemon-test}
# The image's packages: what the README's steps need, nothing of this tree's
# (linux-image-<arch> is added per architecture).
EM_SYSTEM_PACKAGES=(systemd systemd-sysv udev kmod mosquitto python3 sudo procps curl
  ca-certificates init-system-helpers libdw1 libmosquitto1 libsystemd0 libuv1 libcurl4
  libmicrohttpd12 libsnappy1v5 libsqlite3-0 libstdc++6)
# The unit that runs the test inside and powers off whatever happens (no getty on the serial
# console: it would hang up the console that the kernel logs to).
EM_SYSTEM_UNIT='[Unit]
Description=edgemon booted-system test (tests/system/inside.sh from the 9p share)
After=multi-user.target mosquitto.service
[Service]
Type=oneshot
StandardOutput=journal+console
ExecStart=/bin/sh -c "modprobe 9pnet_virtio; mkdir -p /mnt/share && mount -t 9p -o trans=virtio,version=9p2000.L share /mnt/share && timeout 900 sh /mnt/share/inside.sh /mnt/share; sync; systemctl poweroff"
[Install]
WantedBy=multi-user.target'

# em_system_install_deps: mmdebstrap, qemu (x86 and Arm system emulators, and qemu-user-static
# for the arm64 image's maintainer scripts) and mkfs.ext4 from Debian, only when missing.
em_system_install_deps() {
  local EM_PACKAGES=(mmdebstrap qemu-system-x86 qemu-system-arm qemu-user-static e2fsprogs)
  em_install_deps
}

# _em_system_binfmt: lets mmdebstrap run arm64 maintainer scripts in the image (binfmt_misc with
# qemu-user-static's interpreter, registered with the F flag so it works in the chroot).
_em_system_binfmt() {
  local fs=/proc/sys/fs/binfmt_misc
  [ -e "$fs/register" ] || mount -t binfmt_misc binfmt_misc "$fs" || return 1
  [ -e "$fs/qemu-aarch64" ] && return 0
  cat /usr/lib/binfmt.d/qemu-aarch64.conf >"$fs/register"
}

# _em_system_sources SUITE FILE: writes the apt sources for SUITE into FILE: this machine's own
# (a Debian 12), with the suite renamed for another release. Its security suite is left out for
# another release (an older release's security archive is not always mirrored where this
# machine's is; the image needs no update to prove the packages).
_em_system_sources() {
  local suite=$1 file=$2 sources=/etc/apt/sources.list.d/debian.sources
  [ -f "$sources" ] || sources=/etc/apt/sources.list
  if [ "$suite" = bookworm ]; then
    cp "$sources" "$file"
    return 0
  fi
  case $sources in
    *.sources)
      awk -v RS= -v ORS='\n\n' '!/-security/' "$sources" | sed "s/bookworm/$suite/g" >"$file" ;;
    *) grep -v -- '-security' "$sources" | sed "s/bookworm/$suite/g" >"$file" ;;
  esac
}

# em_system_image SUITE ARCH: prints the directory of the cached image for SUITE on ARCH
# (root.img, vmlinuz, initrd.img), making it first when this key has none. The key hashes the
# suite, the architecture, the package list, the unit and the apt sources used, so a change to
# any of them makes a new image.
em_system_image() {
  local suite=$1 arch=$2
  mkdir -p "$EM_SYSTEM_CACHE"
  local sources=$EM_SYSTEM_CACHE/$suite.sources.tmp
  _em_system_sources "$suite" "$sources" || return 1
  local packages=("${EM_SYSTEM_PACKAGES[@]}" "linux-image-$arch")
  local key
  key=$(printf '%s\n' "$suite" "$arch" "${packages[*]}" "$EM_SYSTEM_UNIT" |
    cat - "$sources" | sha256sum | cut -c1-16)
  local dir=$EM_SYSTEM_CACHE/$suite-$arch-$key
  if [ -f "$dir/root.img" ]; then
    rm -f "$sources"
    echo "$dir"
    return 0
  fi
  em_log "system: making the $suite $arch image (mmdebstrap, once per package list) in $dir" >&2
  [ "$arch" = amd64 ] || _em_system_binfmt || return 1
  local tmp=$dir.tmp
  rm -rf "$tmp"
  mkdir -p "$tmp"
  mv "$sources" "$tmp/sources"
  local include
  include=$(
    IFS=,
    echo "${packages[*]}"
  )
  if ! mmdebstrap --arch="$arch" --variant=minbase --include="$include" "$suite" "$tmp/root" \
    "$tmp/sources" >"$tmp/mmdebstrap.log" 2>&1; then
    tail -20 "$tmp/mmdebstrap.log" >&2
    return 1
  fi
  local r=$tmp/root
  printf '%s\n' "$EM_SYSTEM_UNIT" >"$r/etc/systemd/system/edgemon-systemtest.service"
  ln -sf /etc/systemd/system/edgemon-systemtest.service \
    "$r/etc/systemd/system/multi-user.target.wants/edgemon-systemtest.service"
  local tty
  for tty in ttyS0 ttyAMA0; do
    ln -sf /dev/null "$r/etc/systemd/system/serial-getty@$tty.service"
  done
  echo edgemon-test >"$r/etc/hostname"
  echo '/dev/vda / ext4 rw 0 1' >"$r/etc/fstab"
  cp "$r"/boot/vmlinuz-* "$tmp/vmlinuz" && cp "$r"/boot/initrd.img-* "$tmp/initrd.img" || return 1
  mkfs.ext4 -q -F -L root -d "$r" "$tmp/root.img" 3G >&2 || return 1
  rm -rf "$r"
  mv "$tmp" "$dir"
  echo "$dir"
}

# em_system_boot IMAGE_DIR ARCH SHARE LOG: boots a copy of the image with SHARE as the 9p share
# (the pristine image stays as it is), until the system powers itself off or 20 minutes pass.
# amd64: q35 under TCG, or KVM with EM_SYSTEM_KVM=1 where /dev/kvm boots guests (this VM's
# does not). arm64: the virt board with -cpu max under TCG, whose emulated PMUv3 the
# kernel's armv8_pmuv3 driver serves.
em_system_boot() {
  local image=$1 arch=$2 share=$3 log=$4
  local disk=$share.img
  cp --sparse=always "$image/root.img" "$disk"
  local qemu=()
  case $arch in
    amd64)
      local accel=tcg cpu=max
      if [ -w /dev/kvm ] && [ -n "${EM_SYSTEM_KVM:-}" ]; then
        accel=kvm
        cpu=host
      fi
      qemu=(qemu-system-x86_64 -machine q35 -accel "$accel" -cpu "$cpu" -append
        "root=/dev/vda rw console=ttyS0 quiet")
      ;;
    arm64)
      qemu=(qemu-system-aarch64 -machine virt -accel tcg,thread=multi -cpu max -append
        "root=/dev/vda rw console=ttyAMA0 quiet")
      ;;
    *) return 1 ;;
  esac
  timeout 1200 "${qemu[@]}" -smp 2 -m 1536 -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
    -drive "file=$disk,if=virtio,format=raw" \
    -virtfs "local,path=$share,mount_tag=share,security_model=none,id=share" \
    -nic none -display none -serial "file:$log" -no-reboot
  local rc=$?
  rm -f "$disk"
  return "$rc"
}

# em_system_test SUITE ARCH DEBS_DIR...: boots SUITE on ARCH with the .debs of ARCH (and the
# architecture-independent ones) from the DEBS_DIRs, runs tests/system/inside.sh in it and
# judges the results on this side with this machine's edgemon-cli (build/normal).
em_system_test() {
  local suite=$1 arch=$2
  shift 2
  em_system_install_deps || return 1
  local image
  image=$(em_system_image "$suite" "$arch") || return 1
  local share=build/system/$suite-$arch
  rm -rf "$share"
  mkdir -p "$share/debs"
  local dir
  for dir in "$@"; do
    cp "$dir"/debs/*_"$arch".deb "$dir"/debs/*_all.deb "$share/debs/" 2>/dev/null
  done
  [ -n "$(ls "$share"/debs/edgemon-agent_*_"$arch".deb 2>/dev/null)" ] || {
    echo "system: no edgemon-agent package for $arch in $*" >&2
    return 1
  }
  cp tests/system/inside.sh "$share/"
  em_log "system: booting $suite $arch (qemu, systemd as PID 1) with this tree's packages"
  local t0=$SECONDS
  em_system_boot "$image" "$arch" "$share" "$share/console.log" || {
    echo "system: qemu failed or timed out (console: $share/console.log)" >&2
    return 1
  }
  em_log "system: $suite $arch ran for $((SECONDS - t0)) s; judging what it recorded"
  EM_SYSTEM_OUT=$share/out EM_SYSTEM_ARCH=$arch EM_CLI=build/normal/host/cli/edgemon-cli \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/system/test_booted.py
}
