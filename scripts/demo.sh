#!/usr/bin/env bash
# The main job of README.md: install what is missing, then run qsynth end to end on this host.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
for isa in neon avx2 avx512 amx; do
    qsynth isa list --isa "$isa" | head -n 1
done
for isa in neon avx2 avx512 amx; do
    qsynth isa check --isa "$isa" --samples 500 | tail -n 1
done
