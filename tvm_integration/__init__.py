"""Apache TVM 0.27 operators built on the kernel cache, and the QNN pipeline that compiles
pre-quantized models onto them. A model's path, by subpackage (each imports only those below it):

    qnn/      the pipeline: a frontend (importer -> rewrite, or tflite_importer) -> pipeline.lower
              (legalize -> bind) -> model (compile_model)
    ops/      the operators bind builds: int8 conv2d/dense, bitserial conv2d/dense, their output stage
    kernels/  the proved tiles they call: which one (selection, tuning), as TensorIntrins (int8,
              bitserial), and the layouts they read (packing, bitpack)

``bench/`` holds the benchmarks and the models they run, built in code; nothing above imports it.

``compile_model(path, target="host", threads=N)`` (tvm_integration.qnn.runtime.model) is the entry point for
a model; it and ``CompiledModel`` are imported on first use, so that importing an operator does not
import the ONNX and TFLite front ends."""

__all__ = ["compile_model", "CompiledModel"]


def __getattr__(name: str):
    if name in ("compile_model", "CompiledModel"):
        from tvm_integration.qnn.runtime import model
        return getattr(model, name)
    raise AttributeError(f"module 'tvm_integration' has no attribute {name!r}")
