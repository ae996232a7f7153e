"""The QNN pipeline: a pre-quantized ONNX model compiled to integer arithmetic on the synthesized
kernels, bit-exact with onnxruntime. Its stages, in order, one module each:

    importer.py   ONNX -> Relax, every quantized op in QDQ form (QOperator converters per import;
                  lowbit.py: every low-bit form into QCDQ first)
    rewrite.py    QDQ groups -> integer ops (qdq.py reads the graph; arithmetic.py: onnxruntime's
                  arithmetic, as TE; integer_op.py reads an op back)
    pipeline.py   lower(): legalize then bind, the one lowering of every frontend's module and target
    legalize.py   integer ops -> the forms the target's kernels take (u8 x s8 for VNNI/AMX;
                  precision.py: which layers are bitserial)
    bind.py       conv2d/dense -> tensorized operators (tvm_integration.ops; bitserial_layer.py for
                  the low-bit ones; prim_calls.py calls each); the rest scheduled (schedules.py)
    model.py      compile_model(): the file through its frontend, lower, the build, and the compiled
                  model (run, save, load)
    artifacts.py  the private, checked cache of compiled models qsynth run loads

A TFLite model takes tflite_importer.py (tflite_arithmetic.py) in place of importer and rewrite;
quant.py holds what both frontends share (constants and the tables computed from them, per-tensor
parameters, broadcasting, the NCHW layout; the requantization is ops/output_stage.py's); errors.py
ModelError, the one-line refusal every stage and both frontends raise; report.py reports each
layer's precision and kernel (``qsynth inspect``).
"""
