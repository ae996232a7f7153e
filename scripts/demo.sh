#!/usr/bin/env bash
# The main job of README.md: install what is missing (scripts/bootstrap.sh), then `qsynth demo`: the
# host CPU and what it lacks, its kernels loaded from the library (re-proved on first use here, missing
# ones synthesized), a pre-quantized ResNet-18 compiled onto them and checked bit for bit against
# onnxruntime, its latency next to onnxruntime int8 and fp32, and one layer's bitserial speedups.
# Arguments go to `qsynth demo` (e.g. --quick, --json, --threads 2).
set -eu
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec qsynth demo "$@"
