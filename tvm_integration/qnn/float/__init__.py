"""The float ops between quantized ones, computed in the order the reference runtime computes them, so
that the model stays bit-exact: MLAS's x86 kernels (float_ops.py, float_matmul.py, float_gemv.py,
layer_norm.py, reduce_mean.py, over mlas_math.py's operations) and onnxruntime's AArch64 build
(neon_float.py, the same rules with its kernels in place); float_calls.py emits each call."""
