"""Whole keras.applications models as TensorFlow 2.21's converter writes them (issue 33 item 4), for
scripts/bench_tflite.py and the opt-in slow test of tests/test_tflite_applications.py.

    pip install tensorflow-cpu==2.21.0 [tf2onnx==1.17.0]    # not qsynth dependencies: only this script's
    python scripts/make_tflite_applications.py [-o /tmp/tflite_apps] [names...]

Each model is built with ``weights=None`` (random, seeded), its logits as output (no softmax: with
random weights a softmax saturates to its zero point almost everywhere, hiding differences), every
bias and BatchNorm beta / gamma drawn at random (seeded) so that no bias is zero, and the BatchNorm
moving statistics re-estimated on seeded random batches run in training mode (momentum 0: each
layer keeps the mean and variance of its inputs in the last batch of 8 images, not Keras's 0 / 1). The
logits then spread over the int8 range (about 220-245 distinct values of 1000 on a random input).
Then full-integer conversion (make_tflite_keras.py's ``_convert``: TFLITE_BUILTINS_INT8, a seeded
representative dataset, int8 input and output, or uint8 for ``mobilenet_v2_uint8``). The files are
megabytes: they are written outside the repository (default /tmp/tflite_apps). Where tf2onnx is
importable, NAME.onnx beside each: its conversion of the .tflite (QDQ, int8 I/O), the network
scripts/bench_tflite.py runs on onnxruntime.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.make_tflite_keras import _convert  # noqa: E402
from synth.files import write_atomically  # noqa: E402

SIZE = 224
DEFAULT_OUT = Path("/tmp/tflite_apps")
APPLICATIONS = {           # name -> (keras.applications constructor, uint8 I/O)
    "mobilenet_v2": ("MobileNetV2", False),
    "mobilenet_v2_uint8": ("MobileNetV2", True),
    "resnet50": ("ResNet50", False),
    "efficientnet_b0": ("EfficientNetB0", False),
    "mobilenet_v3_small": ("MobileNetV3Small", False),
    "mobilenet_v3_large": ("MobileNetV3Large", False),
}


def _randomize(keras, model, rng) -> None:
    """Non-zero biases and BatchNorm affine parameters (Keras initializes them to 0 and 1)."""
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.gamma.assign(rng.uniform(0.5, 1.5, layer.gamma.shape).astype(np.float32))
            layer.beta.assign(rng.normal(0.0, 0.2, layer.beta.shape).astype(np.float32))
        elif getattr(layer, "bias", None) is not None:
            layer.bias.assign(rng.normal(0.0, 0.2, layer.bias.shape).astype(np.float32))


def _estimate_batch_norm(keras, model, rng, batches: int = 2, batch: int = 8) -> None:
    """Moving mean and variance re-estimated: seeded random batches in training mode at momentum 0."""
    norms = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    momenta = [layer.momentum for layer in norms]
    for layer in norms:
        layer.momentum = 0.0
    for _ in range(batches):
        model(rng.standard_normal([batch, SIZE, SIZE, 3]).astype(np.float32), training=True)
    for layer, momentum in zip(norms, momenta):
        layer.momentum = momentum


def application(tf, name: str, seed: int) -> bytes:
    """The converted ``name`` of APPLICATIONS."""
    import keras
    keras.backend.clear_session()
    keras.utils.set_random_seed(seed)
    constructor, uint8 = APPLICATIONS[name]
    model = getattr(keras.applications, constructor)(weights=None, input_shape=(SIZE, SIZE, 3),
                                                     classifier_activation=None)
    rng = np.random.default_rng(seed)
    _randomize(keras, model, rng)
    _estimate_batch_norm(keras, model, rng)
    return _convert(tf, keras, model, [[SIZE, SIZE, 3]], seed, io=tf.uint8 if uint8 else None)


def to_onnx(path: Path) -> Path | None:
    """tf2onnx's ONNX form of the .tflite ``path`` beside it, or None if tf2onnx is not installed."""
    try:
        import tf2onnx
    except ImportError:
        return None
    proto, _ = tf2onnx.convert.from_tflite(str(path), opset=17)
    return write_atomically(path.with_suffix(".onnx"), proto.SerializeToString())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", default=str(DEFAULT_OUT))
    parser.add_argument("names", nargs="*", help=f"only these models (default: all of {', '.join(APPLICATIONS)})")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(APPLICATIONS))
    if unknown:
        parser.error(f"unknown models: {', '.join(unknown)}; known: {', '.join(APPLICATIONS)}")
    import tensorflow as tf
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for seed, name in enumerate(APPLICATIONS, start=40):
        if args.names and name not in args.names:
            continue
        path = out / f"{name}.tflite"
        write_atomically(path, application(tf, name, seed))
        print(f"{path} ({path.stat().st_size} bytes)", flush=True)
        onnx = to_onnx(path)
        if onnx is not None:
            print(f"{onnx} ({onnx.stat().st_size} bytes)", flush=True)


if __name__ == "__main__":
    main()
