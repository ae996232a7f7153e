"""The QNN pipeline: a pre-quantized ONNX model compiled to integer arithmetic on the synthesized
kernels, bit-exact with onnxruntime. Its stages, in order, one module each:

    importer.py   ONNX -> Relax, every quantized op in QDQ form (QOperator converters registered)
    rewrite.py    QDQ groups -> integer ops (arithmetic.py: onnxruntime's arithmetic, as TE)
    legalize.py   integer ops -> the forms the target's kernels take (u8 x s8 for VNNI/AMX)
    dispatch.py   conv2d/dense -> tensorized operators (tvm_integration.ops); the rest scheduled
    model.py      compile_model(): the stages, the build, and the compiled model (run, save, load)
"""
