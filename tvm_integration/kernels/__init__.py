"""The kernel cache's proved tiles as TVM uses them, one idea per module:

    selection.py  which tile an operator takes and the LLVM target it is built for (int8, bitserial)
    tuning.py     which int8 tile shape, per operator shape (the tuning logs)
    int8.py       the int8 tiles and their TensorIntrins (a ``call_extern`` of the emitted ``_kloop``)
    bitserial.py  the bitserial tiles and their TensorIntrins (the emitted ``_gemm``)
    packing.py    weights into an int8 tile's layout
    bitpack.py    bit-packing, the bitserial tiles' layout
"""
