"""Keras models of tests/data/tflite/ (issue 33): small blocks of the keras.applications families as
TensorFlow 2.21's converter writes them (full-integer quantization, TFLITE_BUILTINS_INT8, a
representative dataset), with random weights and biases, seeded. Run by make_tflite_models.py.

* ``mnv2_uint8``: MobileNetV2 blocks (expand, depthwise, project, residual add, Relu6), global
  pooling, a classifier; uint8 input and output, so QUANTIZE uint8 <-> int8 at both ends;
* ``resnet_int8``: ResNet's stem, ZeroPadding2D before the 7x7/2 conv and before the 3x3/2 max
  pool (PAD), a bottleneck with a projection shortcut;
* ``effnet_int8``: EfficientNet's swish (LOGISTIC, MUL) and squeeze-excite (MEAN, Reshape with a
  dynamic batch -> SHAPE / STRIDED_SLICE / PACK, a sigmoid gate multiplied in by broadcasting);
* ``mnv3_int8``: MobileNetV3's input rescaling (MUL and ADD by constants), HARD_SWISH, a hard-sigmoid
  squeeze-excite, Flatten, Dense;
* ``resize_int8``: tf.image.resize nearest and TF1 align_corners (RESIZE_NEAREST_NEIGHBOR), Resizing and
  UpSampling2D bilinear (RESIZE_BILINEAR), CONCATENATION;
* ``branches_int8``: two Dense branches added (the converter's bias-like [32] broadcast ADD), softmax;
* ``unary_int8``: every int8 value through LOGISTIC, TANH, HARD_SWISH, LEAKY_RELU (one output each);
* ``swish_int8``, ``swish_uint8`` (uint8 I/O): every 8-bit value of each of three inputs through swish
  (LOGISTIC, MUL), through a sigmoid that is an output too (the LOGISTIC read twice) times its input, and
  times its tanh (TANH, MUL), which qsynth folds into one table each;
* ``shapes_int8``: Dense on a 3-D tensor (FULLY_CONNECTED keep_num_dims), TRANSPOSE, SPLIT, MUL of
  two tensors, average and max pool, MEAN; batch fixed at 1;
* ``refused_int8``: operators qsynth refuses, all named in one error.
"""
from __future__ import annotations

import numpy as np

SIZE = 32


def _convert(tf, keras, model, shapes, seed: int, io=None) -> bytes:
    """Full-integer conversion of the Keras ``model`` (inputs of ``shapes``, batch dynamic), calibrated
    on seeded standard normal inputs; int8 input and output, or ``io``."""
    io = io or tf.int8
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(seed)
    converter.representative_dataset = lambda: ([rng.standard_normal([1, *s]).astype(np.float32) for s in shapes]
                                                for _ in range(64))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = io
    converter.inference_output_type = io
    return converter.convert()


def _layers(keras, seed: int):
    """Layer constructors with seeded random kernels and non-zero biases."""
    init = keras.initializers
    counter = [seed * 1000]

    def k(scale=1.0):
        counter[0] += 1
        return init.VarianceScaling(scale, seed=counter[0])

    def b():
        counter[0] += 1
        return init.RandomNormal(stddev=0.2, seed=counter[0])
    L = keras.layers
    return dict(
        conv=lambda f, size, stride=1, padding="same", act=None: L.Conv2D(
            f, size, stride, padding, activation=act, kernel_initializer=k(), bias_initializer=b()),
        dw=lambda size, stride=1, padding="same", act=None: L.DepthwiseConv2D(
            size, stride, padding, activation=act, depthwise_initializer=k(), bias_initializer=b()),
        dense=lambda n, act=None: L.Dense(n, activation=act, kernel_initializer=k(), bias_initializer=b()))


def mnv2_uint8(tf, keras) -> bytes:
    L, f = keras.layers, _layers(keras, 11)
    x = keras.Input([SIZE, SIZE, 3])
    y = f["conv"](16, 3, 2, act="relu6")(x)
    for expand in (48, 48):
        z = f["conv"](expand, 1, act="relu6")(y)
        z = f["dw"](3, act="relu6")(z)
        y = L.Add()([y, f["conv"](16, 1)(z)])
    y = f["conv"](32, 1, act="relu6")(y)
    y = f["dense"](10)(L.GlobalAveragePooling2D()(y))
    return _convert(tf, keras, keras.Model(x, y), [[SIZE, SIZE, 3]], 11, io=tf.uint8)


def resnet_int8(tf, keras) -> bytes:
    L, f = keras.layers, _layers(keras, 12)
    x = keras.Input([SIZE, SIZE, 3])
    y = L.ZeroPadding2D(3)(x)
    y = f["conv"](16, 7, 2, "valid", act="relu")(y)
    y = L.ZeroPadding2D(1)(y)
    y = L.MaxPooling2D(3, 2)(y)
    shortcut = f["conv"](32, 1)(y)
    z = f["conv"](8, 1, act="relu")(y)
    z = f["conv"](8, 3, act="relu")(z)
    z = f["conv"](32, 1)(z)
    y = L.ReLU()(L.Add()([shortcut, z]))
    y = f["dense"](10)(L.GlobalAveragePooling2D()(y))
    return _convert(tf, keras, keras.Model(x, y), [[SIZE, SIZE, 3]], 12)


def _squeeze_excite(keras, f, y, channels: int, squeezed: int, act, gate):
    L = keras.layers
    s = L.GlobalAveragePooling2D()(y)
    s = L.Reshape((1, 1, channels))(s)
    s = f["conv"](squeezed, 1, act=act)(s)
    s = f["conv"](channels, 1, act=gate)(s)
    return L.Multiply()([y, s])


def effnet_int8(tf, keras) -> bytes:
    L, f = keras.layers, _layers(keras, 13)
    x = keras.Input([SIZE, SIZE, 3])
    y = f["conv"](16, 3, 2, act="swish")(x)
    y = f["dw"](3, act="swish")(y)
    y = _squeeze_excite(keras, f, y, 16, 4, "swish", "sigmoid")
    y = f["conv"](24, 1)(y)
    y = f["conv"](32, 1, act="swish")(y)
    y = f["dense"](10)(L.GlobalAveragePooling2D()(y))
    return _convert(tf, keras, keras.Model(x, y), [[SIZE, SIZE, 3]], 13)


def mnv3_int8(tf, keras) -> bytes:
    L, f = keras.layers, _layers(keras, 14)
    x = keras.Input([SIZE, SIZE, 3])
    y = L.Rescaling(1.0 / 2.5, offset=-0.4)(x)
    y = f["conv"](16, 3, 2, act="hard_swish")(y)
    y = f["dw"](3, act="relu")(y)
    y = _squeeze_excite(keras, f, y, 16, 8, "relu", "hard_sigmoid")
    y = f["conv"](24, 1, act="hard_swish")(y)
    y = L.AveragePooling2D(4)(y)
    y = f["dense"](10)(L.Flatten()(y))
    return _convert(tf, keras, keras.Model(x, y), [[SIZE, SIZE, 3]], 14)


def resize_int8(tf, keras) -> bytes:
    L, f = keras.layers, _layers(keras, 15)
    x = keras.Input([16, 16, 4])
    y = f["conv"](8, 3, 2, act="relu")(x)
    a = L.Lambda(lambda t: tf.image.resize(t, (16, 16), "nearest"))(y)
    b = L.Resizing(16, 16, interpolation="bilinear")(f["conv"](8, 1)(y))
    y = L.Concatenate()([a, b, x])
    y = f["conv"](8, 3, act="relu")(y)
    c = L.UpSampling2D(2, interpolation="bilinear")(y)
    d = L.Lambda(lambda t: tf.compat.v1.image.resize_nearest_neighbor(t, (24, 24), align_corners=True))(y)
    return _convert(tf, keras, keras.Model(x, [c, d]), [[16, 16, 4]], 15)


def branches_int8(tf, keras) -> bytes:
    L, f = keras.layers, _layers(keras, 16)
    x = keras.Input([24])
    y = L.Add()([f["dense"](32, act="relu")(x), f["dense"](32)(x)])
    y = L.Softmax()(f["dense"](12)(y))
    return _convert(tf, keras, keras.Model(x, y), [[24]], 16)


def unary_int8(tf, keras) -> bytes:
    """Input [16, 16, 1]: every int8 value once; five outputs."""
    L = keras.layers
    x = keras.Input([16, 16, 1])
    ys = [L.Activation("sigmoid")(x), L.Activation("tanh")(x), L.Activation("hard_swish")(x),
          L.LeakyReLU(0.2)(x)]
    return _convert(tf, keras, keras.Model(x, ys), [[16, 16, 1]], 17)


def _swish(tf, keras, io) -> bytes:
    """Inputs [16, 16, 1]: every 8-bit value once each; four outputs."""
    L = keras.layers
    x, g, t = (keras.Input([16, 16, 1]) for _ in range(3))
    gate = L.Activation("sigmoid")(g)
    ys = [L.Activation("swish")(x), gate, L.Multiply()([g, gate]), L.Multiply()([t, L.Activation("tanh")(t)])]
    return _convert(tf, keras, keras.Model([x, g, t], ys), [[16, 16, 1]] * 3, 20, io=io)


def swish_int8(tf, keras) -> bytes:
    return _swish(tf, keras, tf.int8)


def swish_uint8(tf, keras) -> bytes:
    return _swish(tf, keras, tf.uint8)


def shapes_int8(tf, keras) -> bytes:
    L, f = keras.layers, _layers(keras, 18)
    x = keras.Input([8, 8, 6], batch_size=1)
    a, b = L.Lambda(lambda t: tf.split(t, 2, axis=-1))(x)
    y = L.Multiply()([f["conv"](8, 3, act="relu")(a), f["conv"](8, 3)(b)])
    y = L.MaxPooling2D(2)(y)
    t = L.Permute((2, 1, 3))(y)                                   # TRANSPOSE
    t = f["dense"](5)(L.Reshape((16, 8))(t))                      # FULLY_CONNECTED keep_num_dims
    m = L.Lambda(lambda v: tf.reduce_mean(v, axis=[1, 2]))(L.AveragePooling2D(2, 1, "same")(y))
    return _convert(tf, keras, keras.Model(x, [t, m]), [[8, 8, 6]], 18)


def refused_int8(tf, keras) -> bytes:
    """Operators qsynth refuses: a float ELU between DEQUANTIZE and QUANTIZE, a GATHER, CUMSUM."""
    L = keras.layers
    x = keras.Input([16, 8])
    y = L.Activation("elu")(x)
    y = L.Lambda(lambda t: tf.math.cumsum(tf.gather(t, [3, 1, 2], axis=1), axis=2))(y)
    return _convert(tf, keras, keras.Model(x, y), [[16, 8]], 19)


def _with_keras(make):
    def run(tf):
        import keras
        keras.backend.clear_session()       # layer names (and so tensor names) count from 0 per model
        keras.utils.set_random_seed(0)
        return make(tf, keras)
    return run


MODELS = {name: _with_keras(make) for name, make in [
    ("mnv2_uint8", mnv2_uint8), ("resnet_int8", resnet_int8), ("effnet_int8", effnet_int8),
    ("mnv3_int8", mnv3_int8), ("resize_int8", resize_int8), ("branches_int8", branches_int8),
    ("unary_int8", unary_int8), ("swish_int8", swish_int8), ("swish_uint8", swish_uint8),
    ("shapes_int8", shapes_int8), ("refused_int8", refused_int8)]}
