"""Apache TVM 0.27 operators built on the kernel cache. Importing registers nothing:
``register_kernels(isa)`` does, and the operators (``tvm_integration.ops``) call it."""
from tvm_integration.intrinsics import register_kernels

__all__ = ["register_kernels"]
