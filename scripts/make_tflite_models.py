"""Write the TFLite test models (tests/data/tflite/) with TensorFlow's own converter.

    pip install tensorflow-cpu==2.21.0          # not a qsynth dependency: only this script needs it
    python scripts/make_tflite_models.py [-o tests/data/tflite]

Small networks of tf.nn ops with seeded random weights, calibrated on seeded random inputs:

* int8, TensorFlow's default full-integer quantization (per-channel weights, int8 input and output):
  ``cnn`` (conv2d with Relu, depthwise stride 2 with Relu6, 1x1 conv, a residual add with Relu, max
  and average pool, mean over H and W, fully connected), ``mobilenet`` (depthwise with multiplier 2,
  a strided VALID conv, a same-padded average pool, mean with keep_dims, reshape, two fully
  connected layers), ``mlp`` (batch 4, three fully connected layers), ``softmax`` (a classifier
  ending in SOFTMAX, which qsynth refuses), and two single-op models whose one input covers every case
  of their arithmetic: ``add`` (two 256x256 inputs: every pair of int8 values) and ``mean`` (over H, W
  of 5x7: 8926 channels, one per possible int32 sum);
* Keras models as TensorFlow's converter writes them today (scripts/make_tflite_keras.py, issue 33);
* uint8 per-tensor, the legacy TF1 flow (fake-quant ranges, ``inference_type=uint8``): ``legacy_uint8``
  (conv2d, depthwise with Relu6, an add of two branches, average pool, reshape, fully connected; a
  second output, the mean over H, W of the add).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

try:
    from scripts import make_tflite_keras as keras_models
except ImportError:                      # run as a script: scripts/ is on sys.path
    import make_tflite_keras as keras_models

SIZE = 16


def _weights(seed: int):
    rng = np.random.default_rng(seed)

    def w(*shape, scale=0.3):
        return rng.standard_normal(shape).astype(np.float32) * scale
    return w


def _int8(tf, fn, shape, seed: int, ranges=(1.0,)) -> bytes:
    """TensorFlow's default full-integer conversion of ``fn`` (float inputs of ``shape``, calibrated on
    standard normal values times ``ranges``, one per input)."""
    signature = [tf.TensorSpec(shape, tf.float32) for _ in ranges]
    concrete = tf.function(fn, input_signature=signature).get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete])
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(seed)
    converter.representative_dataset = lambda: ([rng.standard_normal(shape).astype(np.float32) * r for r in ranges]
                                                for _ in range(64))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    return converter.convert()


def cnn(tf) -> bytes:
    w = _weights(1)
    k1, b1, dw, bd = w(3, 3, 3, 8), w(8, scale=0.1), w(3, 3, 8, 1), w(8, scale=0.1)
    k2, b2, k3, b3 = w(1, 1, 8, 16), w(16, scale=0.1), w(3, 3, 16, 16, scale=0.1), w(16, scale=0.1)
    fc, bf = w(16, 10), w(10, scale=0.1)

    def fn(x):
        y = tf.nn.relu(tf.nn.conv2d(x, k1, 1, "SAME") + b1)
        y = tf.nn.relu6(tf.nn.depthwise_conv2d(y, dw, [1, 2, 2, 1], "SAME") + bd)
        y = tf.nn.conv2d(y, k2, 1, "VALID") + b2
        y = tf.nn.relu(y + tf.nn.relu(tf.nn.conv2d(y, k3, 1, "SAME") + b3))
        y = tf.nn.avg_pool2d(tf.nn.max_pool2d(y, 2, 2, "VALID"), 2, 1, "SAME")
        return tf.matmul(tf.reduce_mean(y, axis=[1, 2]), fc) + bf
    return _int8(tf, fn, [1, SIZE, SIZE, 3], 1)


def mobilenet(tf) -> bytes:
    w = _weights(2)
    k1, b1, dw, bd = w(3, 3, 4, 8), w(8, scale=0.1), w(3, 3, 8, 2), w(16, scale=0.1)
    k2, b2 = w(1, 1, 16, 24, scale=0.2), w(24, scale=0.1)
    f1, c1, f2, c2 = w(24, 32, scale=0.2), w(32, scale=0.1), w(32, 5, scale=0.2), w(5, scale=0.1)

    def fn(x):
        y = tf.nn.relu6(tf.nn.conv2d(x, k1, 2, "VALID") + b1)
        y = tf.nn.relu(tf.nn.depthwise_conv2d(y, dw, [1, 1, 1, 1], "SAME") + bd)
        y = tf.nn.avg_pool2d(tf.nn.conv2d(y, k2, 1, "SAME") + b2, 3, 2, "SAME")
        y = tf.reshape(tf.reduce_mean(y, axis=[1, 2], keepdims=True), [1, 24])
        return tf.matmul(tf.nn.relu(tf.matmul(y, f1) + c1), f2) + c2
    return _int8(tf, fn, [1, SIZE + 1, SIZE + 1, 4], 2)


def mlp(tf) -> bytes:
    w = _weights(3)
    f1, c1, f2, c2, f3, c3 = w(64, 48, scale=0.2), w(48), w(48, 32, scale=0.2), w(32), w(32, 10), w(10)

    def fn(x):
        y = tf.nn.relu(tf.matmul(x, f1) + c1)
        return tf.matmul(tf.nn.relu6(tf.matmul(y, f2) + c2), f3) + c3
    return _int8(tf, fn, [4, 64], 3)


def softmax(tf) -> bytes:
    w = _weights(4)
    f1, c1 = w(16, 4), w(4)
    return _int8(tf, lambda x: tf.nn.softmax(tf.matmul(x, f1) + c1), [1, 16], 4)


def add(tf) -> bytes:
    return _int8(tf, lambda x, y: x + y, [1, 256, 256, 1], 6, ranges=(1.0, 2.7))


def mean(tf) -> bytes:
    return _int8(tf, lambda x: tf.reduce_mean(x, axis=[1, 2]), [1, 5, 7, 35 * 255 + 1], 7)


def legacy_uint8(tf) -> bytes:
    """A uint8 per-tensor model as TF1 quantization-aware training wrote them: every tensor gets its
    range from a fake-quant node, the converter makes it uint8 throughout."""
    tf1 = tf.compat.v1
    w = _weights(5)
    graph = tf1.Graph()
    with graph.as_default():
        def fq(t, lo, hi):
            return tf1.fake_quant_with_min_max_args(t, lo, hi)
        x = tf1.placeholder(tf.float32, [1, 12, 12, 3], name="x")
        y = fq(tf.nn.relu(tf.nn.conv2d(fq(x, -1.0, 1.0), fq(w(3, 3, 3, 8), -0.9, 0.7), 1, "SAME") + w(8)), 0.0, 3.0)
        dw = fq(w(3, 3, 8, 1), -0.8, 0.8)
        y = fq(tf.nn.relu6(tf.nn.depthwise_conv2d(y, dw, [1, 2, 2, 1], "SAME") + w(8, scale=0.1)), 0.0, 6.0)
        z = fq(tf.nn.conv2d(y, fq(w(1, 1, 8, 8), -0.6, 0.5), 1, "SAME") + w(8, scale=0.1), -2.5, 2.0)
        y = fq(y + z, -2.0, 7.0)
        m = tf.identity(fq(tf.reduce_mean(y, axis=[1, 2]), -1.0, 3.0), name="m")
        y = tf.reshape(tf.nn.avg_pool2d(y, 2, 2, "VALID"), [1, 72])
        y = tf.identity(fq(tf.matmul(y, fq(w(72, 10), -0.5, 0.4)) + w(10, scale=0.1), -4.0, 4.0), name="y")
        with tf1.Session(graph=graph) as session:
            converter = tf1.lite.TFLiteConverter.from_session(session, [x], [y, m])
            converter.inference_type = tf.uint8
            converter.quantized_input_stats = {"x": (127.5, 127.5)}     # (mean, std): the range -1..1
            return converter.convert()


MODELS = {"cnn_int8": cnn, "mobilenet_int8": mobilenet, "mlp_int8": mlp, "softmax_int8": softmax,
          "add_int8": add, "mean_int8": mean, "legacy_uint8": legacy_uint8}
MODELS.update(keras_models.MODELS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", default=str(Path(__file__).resolve().parent.parent / "tests/data/tflite"))
    parser.add_argument("names", nargs="*", help="only these models (default: all)")
    args = parser.parse_args()
    import tensorflow as tf
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, make in MODELS.items():
        if args.names and name not in args.names:
            continue
        path = out / f"{name}.tflite"
        path.write_bytes(make(tf))
        print(f"{path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
