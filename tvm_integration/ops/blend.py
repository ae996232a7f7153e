"""A select whose operands are all computed: ``blend(condition, a, b)``.

TVM simplifies a ``Select``'s true value as if its condition held and its false value as if it did
not, so a clamp that keeps a speculative load inside its buffer (``x[min(i, n - 1)]`` under
``Select(i < n, ...)``) is dropped as redundant, while a vector Select still loads both operands: a
read outside the buffer (issue 50's segfault). Bitwise operations carry no condition, so the clamps
stay, and the result is ``a`` or ``b`` bit for bit."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import te, tirx


def blend(condition, a, b):
    """``a`` where ``condition`` holds, else ``b`` (both of one type), by bitwise ops on their bits
    (floats reinterpreted as integers of their width; integers, signed or not, as they are):
    ``Select(condition, a, b)``'s bits, with nothing in ``a`` or ``b`` simplified under the condition."""
    a, b = (v.asobject() if isinstance(v, te.TensorSlice) else v for v in (a, b))   # x[i] of a te tensor
    dtype = str(a.ty.dtype)
    bits = dtype if dtype.startswith(("int", "uint")) else f"int{tvm.DataType(dtype).bits}"
    a_bits, b_bits = (a, b) if bits == dtype else (tirx.reinterpret(bits, a), tirx.reinterpret(bits, b))
    ones, zero = tirx.const(int(np.array(-1).astype(bits)), bits), tirx.const(0, bits)   # ~0, 0
    mixed = (a_bits & tirx.Select(condition, ones, zero)) | (b_bits & tirx.Select(condition, zero, ones))
    return mixed if bits == dtype else tirx.reinterpret(dtype, mixed)
