#!/usr/bin/env bash
# Idempotent set-up of a fresh machine: a virtual environment in .venv, torch 2.13.0 (CPU) first,
# then sqlweave with what the job needs: `bash scripts/setup.sh` (the main job: the local model
# and the report) or `bash scripts/setup.sh test` (every extra, and headless Chromium for the
# browser tests). Safe to run again: finished steps are skipped quickly.
set -euo pipefail
cd "$(dirname "$0")/.."
PURPOSE=${1:-main}
case "$PURPOSE" in
  main) EXTRAS="local,report" ;;
  test) EXTRAS="local,served,serve,report,postgres,duckdb,embeddings,mipro,dev" ;;
  *) echo "setup.sh: unknown purpose '$PURPOSE' (main or test)" >&2; exit 2 ;;
esac

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
# torch must come first and pinned: an unpinned torch resolves to a multi-GB CUDA build.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/pip install --quiet "torch==2.13.0"
fi
# llama-cpp-python compiles from source (~6 min on 2 cores); pip caches the wheel afterwards.
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
# setuptools announces every editable install with a multi-line notice (a package-dir layout
# needs its import finder); it says nothing about this project, so it is silenced here.
PYTHONWARNINGS="ignore:Editable installation" .venv/bin/pip install --quiet -e ".[$EXTRAS]"
[ "$PURPOSE" = test ] || exit 0
# Headless Chromium renders the HTML report and drives the served page in the browser tests
# (Debian's package). Needs root; without it those tests skip with their reason.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "setup: could not install chromium; the report browser test will skip" >&2
  else
    echo "setup: chromium missing and not root; the report browser test will skip" >&2
  fi
fi
