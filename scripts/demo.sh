#!/usr/bin/env bash
# The main job of README.md: install what is missing, then run qsynth end to end on this host:
# name the host CPU and what it can run, check the instruction semantics against the machine (and
# qemu), re-prove the kernel library, load or synthesize the kernels, compile every kernel and test
# it against its spec, time the host's A1W1, A2W2 and int8 kernels against plain C and TVM (a short run;
# benchmarks/kernels.md is the full one), then run one ResNet-18 layer on the int8 operator.
set -eu
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
qsynth host | sed -n '1,/^kernels in the library/p'
for isa in neon avx2 avx512 amx; do
    qsynth isa list --isa "$isa" | head -n 1
    qsynth isa check --isa "$isa" --samples 500 | tail -n 1
done
# Re-prove the kernel library first: every later command uses an entry only once this machine has
# re-proved it (synth/trust.py), and this stamps them all in one parallel run.
qsynth cache verify | tail -n 1
qsynth synth --isa neon --kernel bitserial --abits 1 --wbits 1 --encoding unipolar
qsynth synth --isa neon --kernel bitserial --abits 1 --wbits 1 --encoding hybrid | head -n 1
qsynth synth --isa neon --kernel bitserial --abits 1 --wbits 1 --encoding unipolar --row-bits 64 | head -n 1
qsynth synth --isa neon --kernel int8 --types u8u8 | head -n 1
qsynth synth --isa neon --kernel int8 --types s8s8 | head -n 1
qsynth synth --isa avx512 --kernel int8 --types u8s8 | head -n 1
qsynth synth --isa amx --kernel int8 --types u8s8 | head -n 1
qsynth test-kernels --samples 200 | tail -n 1
qsynth cache ls
speedups=$(mktemp -d)
trap 'rm -rf "$speedups"' EXIT
if ! python scripts/bench_kernels.py --isa avx2,avx512,amx --configs a1w1,a2w2,int8 --trials 5 --out "$speedups" > "$speedups/report" 2> "$speedups/log"; then
    cat "$speedups/log" >&2
    exit 1
fi
sed -n -e '/^Host:/p' -e '/^## x86/,$p' "$speedups/report"
# The kernels at work: one ResNet-18 layer through the int8 conv2d operator (TVM, tensorized with the
# host's cached kernel), checked against numpy, next to onnxruntime and TVM's own lowering.
qsynth bench-layer --layer C6 --config int8 --threads 1 2> /dev/null
# A whole pre-quantized model: ResNet-18 (224x224, random weights) quantized by onnxruntime, compiled
# through the QNN pipeline onto the host's kernels, checked against onnxruntime, timed next to it.
python scripts/make_models.py "$speedups" --models resnet18 > /dev/null
qsynth bench-model "$speedups/resnet18.int8.onnx" --fp32 "$speedups/resnet18.fp32.onnx" --threads 1 --trials 10 2> /dev/null
