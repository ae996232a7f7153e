"""AArch64 code compiled on this x86 host and run under qemu-aarch64, checked rather than timed (speed:
bench/mca.py): one operator's object with a runtime-free C driver (cross.py), a whole Relax model
with TVM's own AArch64 runtime (cross_model.py), and the libraries taken from the registry's AArch64
wheels that those programs link, checked before every use (wheels.py); ort_driver.c and litert_driver.c
run onnxruntime's and LiteRT's AArch64 builds (bench/ort_aarch64.py, bench/litert_aarch64.py)."""
