#!/usr/bin/env bash
# Install what qsynth needs on a fresh Debian machine, only what is missing (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v qemu-aarch64 >/dev/null || need_apt+=(qemu-user)
command -v aarch64-linux-gnu-gcc >/dev/null || need_apt+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
command -v clang >/dev/null || need_apt+=(clang)
command -v llvm-mca >/dev/null || need_apt+=(llvm)
command -v llvm-mca-19 >/dev/null || need_apt+=(llvm-19)      # znver4 model (scripts/bench_uarch.py)
command -v gcc >/dev/null || need_apt+=(gcc)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "bootstrap: apt-get install ${need_apt[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('qsynth') != '0.1.0')" 2>/dev/null \
   || ! python3 -c "import pytest, hypothesis, xdist, z3, bitwuzla, tvm, filelock, typer, rich, ray, onnx, onnxruntime, sklearn, matplotlib, qonnx, tflite, ai_edge_litert, openvino" 2>/dev/null; then
    echo "bootstrap: pip install -e .[test,cluster]" >&2      # cluster: Ray, for the sweep-on-Ray test
    python3 -m pip install -q --disable-pip-version-check -e ".[test,cluster]"
fi
