"""The QNN pipeline: a pre-quantized ONNX or TFLite model compiled to integer arithmetic on the
synthesized kernels, bit-exact with its reference runtime. The folders say the path, each importing
only the ones before it (tests/test_architecture.py):

    prim/       PrimFuncs of our own, their schedules and calls
    semantics/  the integer ops both frontends produce, their arithmetic, shared parameters, ModelError
    float/      the float ops between quantized ones, in the reference runtime's order
    onnx/       ONNX -> integer ops          tflite/   TFLite -> integer ops
    lower/      legalize, bind: the one lowering for every frontend and target
    runtime/    compile_model, the compiled model, its cache, the Arm reference, the inspect report
"""
