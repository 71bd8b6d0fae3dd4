#!/usr/bin/env bash
# `make run` ends here: start a local cluster and show Weft doing its main job.
# The demo comes with the weft CLI (crates/weft-cli); until then this says so and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "demo: Weft is built (target/release/). The cluster demo arrives with the weft CLI."
