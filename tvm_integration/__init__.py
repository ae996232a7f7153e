"""Apache TVM 0.27 operators built on the kernel cache, and the QNN pipeline that compiles
pre-quantized models onto them. Importing registers nothing: ``register_kernels(isa)`` does, and the
operators (``tvm_integration.ops``) call it.

``compile_model(path, target="host", threads=N)`` (tvm_integration.qnn.model) is the entry point for
a model; it and ``CompiledModel`` are imported on first use, so that importing an operator does not
import the ONNX and TFLite front ends."""
from tvm_integration.intrinsics import register_kernels

__all__ = ["register_kernels", "compile_model", "CompiledModel"]


def __getattr__(name: str):
    if name in ("compile_model", "CompiledModel"):
        from tvm_integration.qnn import model
        return getattr(model, name)
    raise AttributeError(f"module 'tvm_integration' has no attribute {name!r}")
