#!/usr/bin/env bash
# Installs what ontime needs on a fresh Debian machine (as root), then
# builds the release binary. `--no-build` installs only.
set -euo pipefail
cd "$(dirname "$0")/.."

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "setup: run as root (sudo $0): installing packages needs it" >&2
    exit 1
  fi
}

# Debian packages: stress-ng (loads), rt-tests (cyclictest, the peer in
# bench/), sqlite3 (inspecting --store), iproute2 and ethtool (lab network),
# iperf3 (the lab's wan load),
# fonts-dejavu-core (report figures), build tools; clang, libbpf-dev,
# libelf-dev and zlib1g-dev build `observe`'s BPF program and libbpf;
# linux-perf is the peer of the observe benchmark (perf sched record);
# nginx-light is the real web server the crawler is tested against;
# qemu-system-x86, qemu-utils (qemu-img) and cpio boot QEMU tenants and
# the guests of profile's guest test (TCG where KVM does not boot);
# fio and postmark are document 004's I/O workloads (`ontime io workload`,
# the doc-004 sweep), e2fsprogs and util-linux format and attach tenant disks;
# bpftool lists loaded BPF programs (the net tests check none is left);
# nats-server (JetStream) carries the fleet (`ontime agent`, `ontime analyse`);
# python3-venv holds SimSo, the independent simulator the engine is checked
# against (scripts/simso-check.py); mbpoll (libmodbus) is a Modbus/TCP
# client the gateway's Modbus side is tested with.
pkgs=(stress-ng rt-tests sqlite3 iproute2 ethtool iperf3 fonts-dejavu-core procps build-essential pkg-config
  clang llvm libbpf-dev libelf-dev zlib1g-dev linux-perf nginx-light qemu-system-x86 qemu-utils cpio
  fio postmark e2fsprogs util-linux bpftool nats-server python3-venv mbpoll)
# go tool pprof reads the profiles `ontime profile report --pprof` writes.
command -v go >/dev/null 2>&1 || pkgs+=(golang-go)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  need_root
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The guest kit (Debian's kernel and a busybox initramfs) that QEMU
# tenants and profile's guest test boot; fetched once.
if [ "$(id -u)" = 0 ]; then
  ./scripts/guest-kit.sh || echo "setup: no guest kit (QEMU tenants and the guest tests will skip)" >&2
fi

# SimSo 0.8.5 (PyPI; it pins SimPy 2.3.1) in its own environment, made
# once; the check of the simulator's engine runs it.
simso=/var/cache/ontime/simso
if [ "$(id -u)" = 0 ] && ! "$simso/bin/python" -c 'import simso' 2>/dev/null; then
  echo "setup: installing SimSo into $simso"
  rm -rf "$simso"
  mkdir -p "$(dirname "$simso")"
  if ! { python3 -m venv "$simso" && "$simso/bin/pip" install -q simso==0.8.5; }; then
    rm -rf "$simso"
    echo "setup: no SimSo (the engine's check against it will skip)" >&2
  fi
fi

# Perfetto's own trace definitions (the PyPI perfetto package ships them
# compiled) in their own environment: the test of `--perfetto` decodes the
# traces ontime writes with them (scripts/perfetto-check.py).
perfetto=/var/cache/ontime/perfetto
if [ "$(id -u)" = 0 ] && ! "$perfetto/bin/python" -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null; then
  echo "setup: installing Perfetto's trace definitions into $perfetto"
  rm -rf "$perfetto"
  mkdir -p "$(dirname "$perfetto")"
  if ! { python3 -m venv "$perfetto" && "$perfetto/bin/pip" install -q perfetto==0.59.1 'protobuf>=6.31.1,<8'; }; then
    rm -rf "$perfetto"
    echo "setup: no Perfetto definitions (the Perfetto trace check will skip)" >&2
  fi
fi

# Field-bus devices and pollers ontime did not write: pymodbus (a Modbus/TCP
# server and client) and bacpypes3 (BACnet/IP), pinned, in their own
# environment; the protocol tests start them (scripts/fieldbus-peer.py).
fieldbus=/var/cache/ontime/fieldbus
if [ "$(id -u)" = 0 ] && ! "$fieldbus/bin/python" -c 'import pymodbus, bacpypes3' 2>/dev/null; then
  echo "setup: installing pymodbus and bacpypes3 into $fieldbus"
  rm -rf "$fieldbus"
  mkdir -p "$(dirname "$fieldbus")"
  if ! { python3 -m venv "$fieldbus" && "$fieldbus/bin/pip" install -q pymodbus==3.16.1 bacpypes3==0.0.110; }; then
    rm -rf "$fieldbus"
    echo "setup: no pymodbus or bacpypes3 (the field-bus peer tests will skip)" >&2
  fi
fi

if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /root/.cargo/bin /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH" && break
  done
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: no Rust toolchain found; install Rust 1.80 or newer (rustup) and run again" >&2
  exit 1
fi

if [ "${1:-}" != "--no-build" ]; then
  echo "setup: building ontime (release)"
  cargo build --release --locked -q
  echo "setup: done: ./target/release/ontime --help"
fi
