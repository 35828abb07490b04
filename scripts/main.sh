#!/usr/bin/env bash
# The main job, end to end on bundled data with the default local model (Qwen2.5-Coder-1.5B):
# compile a program on bundled train examples, save it, evaluate it on the bundled dev subset,
# and answer one question from the saved file. Extra arguments go to `sqlweave demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/sqlweave demo "$@"
