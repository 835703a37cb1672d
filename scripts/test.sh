#!/usr/bin/env bash
# The whole test suite: installs missing packages, then every crate's unit
# and end-to-end tests. Tests that need root skip with a reason elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --no-build
export PATH="$HOME/.cargo/bin:$PATH"
cargo test --workspace --locked 2>&1
