"""How a PrimFunc qsynth builds itself enters a model's ``main``: added to the module under a name of
its own, which is also its exported symbol, and called by ``call_tir``. The tensorized operators
(bind.py, bitserial_layer.py) and the float ops' own kernels (float_calls.py) are all called so."""
from __future__ import annotations

from tvm import relax, tirx


def call(bb: relax.BlockBuilder, func: tirx.PrimFunc, name: str, args, out) -> relax.Call:
    """The call of ``func`` (added to ``bb``'s module as ``name``, or ``name`` made unique) on
    ``args``, returning ``out`` (a TensorType, or a list of them for a tuple)."""
    gvar = bb.add_func(func, name)
    bb.update_func(gvar, func.with_attr("global_symbol", gvar.name_hint))
    return relax.call_tir(gvar, list(args), out)
