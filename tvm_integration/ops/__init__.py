"""The operators the QNN pipeline binds (qnn/lower/bind.py), each scheduled in TE/TIR around a proved tile
(kernels/): int8 ``conv2d`` (im2col ``gemm`` or in place, ``direct``; ``depthwise`` in plain TIR) and
``dense``; ``bitserial_conv2d`` and ``bitserial_dense`` on ``bitserial_gemm``. Each fuses its
``output_stage`` and comes back as an ``operator.Built`` (to include in a model) or, compiled, an
``operator.Operator`` (``cross.QemuOperator`` for AArch64, run under qemu)."""
