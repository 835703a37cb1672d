#!/usr/bin/env bash
# The whole test suite: installs missing packages, then every crate's unit
# and end-to-end tests. Tests that need root (namespaces, cgroups, BPF) or a
# tool skip with a reason elsewhere; every skip is listed at the end, so a
# skipped test never passes for a run one.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --no-build
export PATH="$HOME/.cargo/bin:$PATH"
skips="$(mktemp)"
log="$(mktemp)"
trap 'rm -f "$skips" "$log"' EXIT
./scripts/module-cycles.py
# Only the crates that load BPF programs (trace's capture side, net's
# datapath, behind their `bpf` feature) may link libbpf or need clang to
# build; those that read recordings, simulate or report may not.
for crate in ontime-recording ontime-sched ontime-explain ontime-io ontime-scenario ontime-sim ontime-plan ontime-report ontime-sim-lab ontime-fleet ontime-fieldbus ontime-wire ontime-gateway ontime-crawl; do
  if cargo tree --locked -e normal,build -p "$crate" | grep -qE 'libbpf-(sys|cargo|rs)'; then
    echo "test.sh: $crate depends on libbpf (cargo tree -e normal,build -p $crate): keep BPF behind the bpf feature" >&2
    exit 1
  fi
done
rc=0
# --no-fail-fast: one failing test binary must not hide the others.
ONTIME_TEST_SKIPS="$skips" cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log" || rc=$?
if [ -s "$skips" ]; then
  echo "test.sh: $(wc -l <"$skips") test(s) skipped, not run:"
  sed 's/^/  /' "$skips"
else
  echo "test.sh: no test skipped"
fi
if [ "$rc" != 0 ]; then
  echo "test.sh: FAILED:"
  grep -E '^test .* \.\.\. FAILED$|^error: test failed, to rerun pass' "$log" | sed 's/^/  /' || true
fi
exit "$rc"
