#!/usr/bin/env bash
# The test command of README.md: install what is missing, then run the default suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec python3 -m pytest -q -n 2 "$@"
