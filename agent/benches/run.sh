#!/usr/bin/env bash
# Runs the agent benchmark with the release binaries as shipped (statically linked, as in the
# images). As root. Sizes: AGENTBENCH_ROUNDS (30), AGENTBENCH_PROCS (1000), AGENTBENCH_MIB (256).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static"
exec cargo bench --target x86_64-unknown-linux-gnu -p sandbox-agent --bench agentbench "$@"
