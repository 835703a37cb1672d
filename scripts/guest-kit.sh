#!/usr/bin/env bash
# Builds the guest kit that the lab's QEMU tenants and `ontime profile`'s
# guest test boot: Debian's generic kernel (the cloud kernel has neither
# 9p nor the emulated e1000/rtl8139/AHCI devices document 001 needs) and a
# busybox initramfs carrying the modules for 9p, virtio, e1000, rtl8139,
# IDE/AHCI and ext4. Its /init prints `ontime-guest-ready WORK` on the
# serial console, then spins (kernel argument ontime.work=busy), sleeps
# (idle), runs ontime's guest agent and sleeps (agent), or runs a lab job
# (lab: see crates/lab/src/qemu.rs): the host's root read-only over 9p as
# the job's root, the run directory read-write over 9p at its host path,
# the tenant's address and neighbours from the kernel command line; the
# job's exit status goes to the run directory and the guest powers off.
# The initramfs tree is kept beside (root/) so the host can name addresses
# in its files. Idempotent (rebuilt when this script's kit version
# changes); the kit goes to $ONTIME_GUEST_KIT (default
# /var/cache/ontime/guest-kit). Needs root (apt) the first time.
set -euo pipefail
version=4
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="${ONTIME_GUEST_KIT:-/var/cache/ontime/guest-kit}"
if [ -s "$dest/vmlinuz" ] && [ -s "$dest/initrd.gz" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
kpkg="$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')"
if [ -z "$kpkg" ]; then
  apt-get update -qq
  kpkg="$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')"
fi
echo "guest-kit: fetching $kpkg and busybox-static"
apt-get download "$kpkg" busybox-static >/dev/null 2>&1 || { apt-get update -qq; apt-get download "$kpkg" busybox-static >/dev/null; }
dpkg-deb -x linux-image-*.deb kernel
dpkg-deb -x busybox-static_*.deb busybox
mkdir -p root/bin root/proc root/dev root/sys root/host root/etc
cp busybox/bin/busybox root/bin/busybox
for applet in sh sleep mount umount cat sed uname date insmod ip chroot mkdir poweroff sync ls echo tr cut head grep basename kill; do
  ln -s busybox "root/bin/$applet"
done
cp "$here/crates/profile/agent/ontime-guest-agent.sh" root/bin/ontime-guest-agent
# The modules the lab's devices need, with what they depend on, in load
# order (busybox depmod: the package ships no modules.dep).
kver="$(ls kernel/lib/modules)"
busybox/bin/busybox depmod -b kernel "$kver"
deps="kernel/lib/modules/$kver/modules.dep"
: > root/etc/modules
add_module() {
  local path="$1" dep
  grep -qx "$path" root/etc/modules && return 0
  for dep in $(grep "^$path:" "$deps" | cut -d: -f2-); do add_module "$dep"; done
  mkdir -p "root/lib/modules/$(dirname "$path")"
  cp "kernel/lib/modules/$kver/$path" "root/lib/modules/$path"
  echo "$path" >> root/etc/modules
}
# crc32c: ext4 asks the crypto API for it by name, not as a dependency.
for m in 9p 9pnet_virtio virtio_pci virtio_net e1000 8139too 8139cp virtio_blk ata_piix ahci sd_mod crc32c_generic ext4; do
  path="$(grep -o "^[^:]*/$m\.ko:" "$deps" | tr -d :)"
  [ -n "$path" ] || { echo "guest-kit: module $m not in $kpkg" >&2; exit 1; }
  add_module "$path"
done
cat > root/init <<'EOF'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
work=busy
neigh=
disk=
for a in $(cat /proc/cmdline); do
  case "$a" in
    ontime.work=*) work="${a#ontime.work=}" ;;
    ontime.ip=*) ip="${a#ontime.ip=}" ;;
    ontime.neigh=*) neigh="$neigh ${a#ontime.neigh=}" ;;
    ontime.run=*) run="${a#ontime.run=}" ;;
    ontime.job=*) job="${a#ontime.job=}" ;;
    ontime.disk=*) disk="${a#ontime.disk=}" ;;
  esac
done
if [ "$work" = lab ]; then
  mount -t sysfs sys /sys
  mount -t devtmpfs dev /dev
  while read -r m; do insmod "/lib/modules/$m" 2>/dev/null; done < /etc/modules
  fail() { echo "ontime-guest-failed $*"; sync; poweroff -f; }
  o=trans=virtio,version=9p2000.L,msize=262144
  mount -t 9p -o "$o,ro,cache=loose" hostroot /host || fail "cannot mount the host's root (9p)"
  # /tmp stays the host's (read-only): ontime may be built under it; the
  # job's scratch space is /run (TMPDIR).
  for m in "proc proc /host/proc" "sysfs sys /host/sys" "devtmpfs dev /host/dev" "tmpfs run /host/run"; do
    set -- $m
    mount -t "$1" "$2" "$3" || fail "cannot mount $3"
  done
  if [ -n "$disk" ]; then
    mount -t tmpfs mnt /host/mnt || fail "cannot mount /mnt"
    mkdir -p "/host$disk"
    dev=
    for d in /dev/vda /dev/sda; do [ -b "$d" ] && { dev="$d"; break; }; done
    [ -n "$dev" ] || fail "no disk (vda or sda) for $disk"
    mount -t ext4 "$dev" "/host$disk" || fail "cannot mount $dev at $disk"
  fi
  mkdir -p "/host$run" 2>/dev/null
  mount -t 9p -o "$o" rundir "/host$run" || fail "cannot mount the run directory (9p) at $run"
  ip link set lo up
  for n in /sys/class/net/*; do
    dev="${n##*/}"
    [ "$dev" = lo ] && continue
    ip link set "$dev" up && ip addr add "$ip" dev "$dev" || fail "cannot configure $dev with $ip"
    for x in $neigh; do
      ip neigh replace "${x%,*}" lladdr "${x#*,}" dev "$dev" nud permanent
    done
    break
  done
  # A stop request (the host writes "stop" to the second serial port, as
  # Ctrl-C asks a sandbox's probe): the probe gets SIGTERM and writes what
  # it measured, then the job ends and the guest powers off as usual.
  if [ -c /dev/ttyS1 ]; then
    (
      while read -r cmd < /dev/ttyS1; do
        [ "$cmd" = stop ] || continue
        echo "ontime-guest-stop"
        pid=/host/run/ontime-probe.pid
        n=0
        while [ ! -s "$pid" ] && [ "$n" -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
        [ -s "$pid" ] && kill -TERM "$(cat "$pid")"
        break
      done
    ) &
  fi
  echo "ontime-guest-ready lab"
  chroot /host /bin/sh "$job"
  echo "$?" > "/host$run/$(basename "$job" .sh).exit"
  sync
  umount "/host$run"
  [ -n "$disk" ] && umount "/host$disk"
  echo "ontime-guest-done"
  poweroff -f
fi
echo "ontime-guest-ready $work"
if [ "$work" = busy ]; then
  while :; do :; done
fi
if [ "$work" = agent ]; then
  sh /bin/ontime-guest-agent
fi
while :; do sleep 3600; done
EOF
chmod +x root/init
mkdir -p "$dest"
cp kernel/boot/vmlinuz-* "$dest/vmlinuz.tmp"
(cd root && find . | cpio -o -H newc --quiet | gzip -9) > "$dest/initrd.gz.tmp"
rm -rf "$dest/root"
cp -a root "$dest/root"
mv "$dest/vmlinuz.tmp" "$dest/vmlinuz"
mv "$dest/initrd.gz.tmp" "$dest/initrd.gz"
echo "$version" > "$dest/VERSION"
echo "guest-kit: $dest (kernel $kpkg, busybox initramfs)"
