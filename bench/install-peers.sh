#!/usr/bin/env bash
# Installs the peer tools the benchmarks compare against: cyclictest
# (rt-tests) and stress-ng from Debian, k6 from the Go module proxy (vegeta,
# the first choice, is not served by the proxy here).
set -euo pipefail
"$(dirname "$0")/../scripts/setup.sh" --no-build
if ! command -v k6 >/dev/null 2>&1 && [ ! -x "$HOME/go/bin/k6" ]; then
  command -v go >/dev/null 2>&1 || { echo "install-peers: Go is needed to build k6" >&2; exit 1; }
  echo "install-peers: building k6 (a few minutes)"
  go install go.k6.io/k6@v1.8.1
fi
echo "install-peers: k6 at $(command -v k6 || echo "$HOME/go/bin/k6")"
