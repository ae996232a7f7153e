"""What a quantized model means, written once for every frontend and target: the integer ops both
frontends read a model into (integer_op.py) and their arithmetic as TE (arithmetic.py: onnxruntime's;
litert_arithmetic.py: LiteRT's, for the TFLite ops that differ; qlinear_softmax.py), the parameters,
constants and broadcasting they share (quant.py), each layer's precision (precision.py), and
``ModelError``, the one-line refusal every stage raises (errors.py)."""
