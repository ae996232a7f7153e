"""Benchmarks of the operators and models, and the models they run, built in code. The pipeline
(qnn/), the operators (ops/) and the kernels (kernels/) never import this package.

    timing.py            medians, TVM's time evaluator, ours and baselines side by side
    layers.py            a ResNet-18 conv layer, int8, next to onnxruntime and TVM (``qsynth bench-layer``)
    bitserial_layers.py  the same layers on the bitserial conv2d; on NEON, costed by llvm-mca (mca.py)
    models.py            a whole model next to onnxruntime or LiteRT (``qsynth bench-model``)
    int8_models.py       ResNet-18, MobileNetV2/V3, a SiLU FPN, an MLP: float ONNX, quantized by onnxruntime
    lowbit_models.py     ResNet-18 with 1-3-bit layers, QCDQ, and the integer network it computes
    core_models.py       which LLVM scheduling model costs each Arm core (llvm-mca's resources name it)
    provenance.py        every benchmark's record: commit, command, host, threads, load, date
"""
