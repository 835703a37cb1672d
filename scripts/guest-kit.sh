#!/usr/bin/env bash
# Builds the guest kit that `ontime profile`'s guest test boots under QEMU
# (TCG: this host has no KVM): Debian's cloud kernel and a busybox
# initramfs whose /init prints `ontime-guest-ready` on the serial console
# and then spins (kernel argument ontime.work=busy), sleeps
# (ontime.work=idle) or runs ontime's guest agent and sleeps
# (ontime.work=agent). The initramfs tree is kept beside (root/) so the
# host can name addresses in its files. Idempotent (rebuilt when this
# script's kit version changes); the kit goes to $ONTIME_GUEST_KIT
# (default /var/cache/ontime/guest-kit). Needs root (apt) the first time.
set -euo pipefail
version=2
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="${ONTIME_GUEST_KIT:-/var/cache/ontime/guest-kit}"
if [ -s "$dest/vmlinuz" ] && [ -s "$dest/initrd.gz" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
kpkg="$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')"
if [ -z "$kpkg" ]; then
  apt-get update -qq
  kpkg="$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')"
fi
echo "guest-kit: fetching $kpkg and busybox-static"
apt-get download "$kpkg" busybox-static >/dev/null 2>&1 || { apt-get update -qq; apt-get download "$kpkg" busybox-static >/dev/null; }
dpkg-deb -x linux-image-*.deb kernel
dpkg-deb -x busybox-static_*.deb busybox
mkdir -p root/bin root/proc root/dev
cp busybox/bin/busybox root/bin/busybox
for applet in sh sleep mount cat sed uname date; do ln -s busybox "root/bin/$applet"; done
cp "$here/crates/profile/agent/ontime-guest-agent.sh" root/bin/ontime-guest-agent
cat > root/init <<'EOF'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
work=busy
for a in $(cat /proc/cmdline); do
  case "$a" in ontime.work=*) work="${a#ontime.work=}" ;; esac
done
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
