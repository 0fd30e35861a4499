# scripts/lib/system.sh - the booted-system stage of scripts/test.sh: a minimal Debian system
# (systemd, the distribution's kernel, mosquitto, python3, the packages' runtime libraries) made
# with mmdebstrap from the archive this machine's apt uses, cached outside the clone under
# /var/cache/edgemon-test/ keyed by everything that goes into it, and booted under qemu with
# systemd as PID 1 and no network device. A unit inside mounts a virtio-9p share holding this
# tree's packages and tests/system/inside.sh, runs it and powers the system off; what it wrote
# comes back through the share and tests/system/test_booted.py judges it (README's steps, the
# service as deployed). Source it after common.sh; it defines functions and changes nothing else.
# shellcheck shell=bash

EM_SYSTEM_CACHE=${EM_SYSTEM_CACHE:-/var/cache/edgemon-test}
# The image's packages: what the README's steps need, nothing of this tree's.
EM_SYSTEM_PACKAGES=(systemd systemd-sysv udev kmod linux-image-amd64 mosquitto python3 sudo
  procps curl ca-certificates init-system-helpers libdw1 libmosquitto1 libsystemd0
  libuv1 libcurl4 libmicrohttpd12 libsnappy1v5 libsqlite3-0 libstdc++6)
# The unit that runs the test inside and powers off whatever happens (no getty on the serial
# console: it would hang up the console that the kernel logs to).
EM_SYSTEM_UNIT='[Unit]
Description=edgemon booted-system test (tests/system/inside.sh from the 9p share)
After=multi-user.target mosquitto.service
[Service]
Type=oneshot
StandardOutput=journal+console
ExecStart=/bin/sh -c "modprobe 9pnet_virtio; mkdir -p /mnt/share && mount -t 9p -o trans=virtio,version=9p2000.L share /mnt/share && timeout 600 sh /mnt/share/inside.sh /mnt/share; sync; systemctl poweroff"
[Install]
WantedBy=multi-user.target'

# em_system_install_deps: mmdebstrap, qemu and mkfs.ext4 from Debian, only when missing.
em_system_install_deps() {
  local EM_PACKAGES=(mmdebstrap qemu-system-x86 e2fsprogs)
  em_install_deps
}

# em_system_image SUITE: prints the directory of the cached image for SUITE (root.img, vmlinuz,
# initrd.img), making it first when this key has none. The key hashes the suite, the package
# list, the unit and the apt sources used, so a change to any of them makes a new image.
em_system_image() {
  local suite=$1 sources=/etc/apt/sources.list.d/debian.sources
  [ -f "$sources" ] || sources=/etc/apt/sources.list
  local key
  key=$(printf '%s\n' "$suite" "${EM_SYSTEM_PACKAGES[*]}" "$EM_SYSTEM_UNIT" |
    cat - "$sources" | sha256sum | cut -c1-16)
  local dir=$EM_SYSTEM_CACHE/$suite-amd64-$key
  if [ -f "$dir/root.img" ]; then
    echo "$dir"
    return 0
  fi
  em_log "system: making the $suite image (mmdebstrap, once per package list) in $dir" >&2
  mkdir -p "$EM_SYSTEM_CACHE"
  local tmp=$dir.tmp
  rm -rf "$tmp"
  mkdir -p "$tmp"
  local include
  include=$(
    IFS=,
    echo "${EM_SYSTEM_PACKAGES[*]}"
  )
  if ! mmdebstrap --variant=minbase --include="$include" "$suite" "$tmp/root" "$sources" \
    >"$tmp/mmdebstrap.log" 2>&1; then
    tail -20 "$tmp/mmdebstrap.log" >&2
    return 1
  fi
  local r=$tmp/root
  printf '%s\n' "$EM_SYSTEM_UNIT" >"$r/etc/systemd/system/edgemon-systemtest.service"
  ln -sf /etc/systemd/system/edgemon-systemtest.service \
    "$r/etc/systemd/system/multi-user.target.wants/edgemon-systemtest.service"
  ln -sf /dev/null "$r/etc/systemd/system/serial-getty@ttyS0.service"
  echo edgemon-test >"$r/etc/hostname"
  echo '/dev/vda / ext4 rw 0 1' >"$r/etc/fstab"
  cp "$r"/boot/vmlinuz-* "$tmp/vmlinuz" && cp "$r"/boot/initrd.img-* "$tmp/initrd.img" || return 1
  mkfs.ext4 -q -F -L root -d "$r" "$tmp/root.img" 3G >&2 || return 1
  rm -rf "$r"
  mv "$tmp" "$dir"
  echo "$dir"
}

# em_system_boot IMAGE_DIR SHARE LOG: boots a copy of the image with SHARE as the 9p share
# (the pristine image stays as it is), until the system powers itself off or 15 minutes pass.
# KVM where /dev/kvm answers, else TCG (software emulation).
em_system_boot() {
  local image=$1 share=$2 log=$3
  local disk=$share.img
  cp --sparse=always "$image/root.img" "$disk"
  local accel=tcg cpu=max
  if [ -w /dev/kvm ] && [ -n "${EM_SYSTEM_KVM:-}" ]; then
    accel=kvm
    cpu=host
  fi
  timeout 900 qemu-system-x86_64 -machine q35 -accel "$accel" -cpu "$cpu" -smp 2 -m 1536 \
    -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 quiet" \
    -drive "file=$disk,if=virtio,format=raw" \
    -virtfs "local,path=$share,mount_tag=share,security_model=none,id=share" \
    -nic none -display none -serial "file:$log" -no-reboot
  local rc=$?
  rm -f "$disk"
  return "$rc"
}

# em_system_test BUILD_DIR: boots Debian 12 with BUILD_DIR's packages (BUILD_DIR/debs, made by
# em_packages_test), runs tests/system/inside.sh in it and judges the results on this side.
em_system_test() {
  local build=$1
  em_system_install_deps || return 1
  local image
  image=$(em_system_image bookworm) || return 1
  local share=$build/system/bookworm
  rm -rf "$share"
  mkdir -p "$share/debs"
  cp "$build"/debs/*.deb "$share/debs/" || return 1
  cp tests/system/inside.sh "$share/"
  em_log "system: booting Debian 12 (qemu, systemd as PID 1) with this tree's packages"
  local t0=$SECONDS
  em_system_boot "$image" "$share" "$share/console.log" || {
    echo "system: qemu failed or timed out (console: $share/console.log)" >&2
    return 1
  }
  em_log "system: the booted system ran for $((SECONDS - t0)) s; judging what it recorded"
  EM_SYSTEM_OUT=$share/out EM_CLI=$build/host/cli/edgemon-cli \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/system/test_booted.py
}
